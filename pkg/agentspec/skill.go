package agentspec

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/tools"
)

// Limits of a skill definition (the catalogue entry, agentmeshv1.Skill).
const (
	// MaxSkillDescription bounds Skill.description (task analysis reads
	// it, so it is kept to a paragraph or two).
	MaxSkillDescription = 4 << 10
	// MaxPromptTemplate bounds Skill.prompt_template: every agent offering
	// the skill carries it in its system prompt.
	MaxPromptTemplate = 16 << 10
	// MaxSkillTools bounds Skill.required_tools.
	MaxSkillTools = 32
	// MaxSkillConfig bounds the entries of Skill.config; keys are at most
	// MaxConfigKey bytes and all of it at most MaxConfigBytes.
	MaxSkillConfig = 64
	MaxConfigKey   = 128
	MaxConfigBytes = 16 << 10
)

// SkillName checks one skill name (a catalogue entry's, or one named in
// a request); field names it in the error.
func SkillName(field, name string) error {
	switch {
	case name == "":
		return bus.FieldError(field, "required")
	case !skillRE.MatchString(name):
		return bus.FieldError(field, "must be lower-case letters, digits and _.:/- (1-%d bytes, starting with a letter or digit), got %.80q", MaxSkillBytes, name)
	}
	return nil
}

// Skill checks a skill definition and names the first bad field: the name
// rule of every skill, the size of the description, the prompt template
// and the configuration, and that each required tool is a known built-in
// tool (an agent offering the skill gets them).
func Skill(sk *agentmeshv1.Skill) error {
	if sk == nil {
		return bus.FieldError("skill", "required")
	}
	if err := SkillName("skill.name", sk.Name); err != nil {
		return err
	}
	if n := len(sk.Description); n > MaxSkillDescription {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "skill.description", Message: fmt.Sprintf("%d bytes is over the limit of %d", n, MaxSkillDescription)}
	}
	if err := text("skill.description", sk.Description); err != nil {
		return err
	}
	if n := len(sk.PromptTemplate); n > MaxPromptTemplate {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "skill.prompt_template", Message: fmt.Sprintf("%d bytes is over the limit of %d", n, MaxPromptTemplate)}
	}
	if err := text("skill.prompt_template", sk.PromptTemplate); err != nil {
		return err
	}
	if n := len(sk.RequiredTools); n > MaxSkillTools {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "skill.required_tools", Message: fmt.Sprintf("%d tools is over the limit of %d", n, MaxSkillTools)}
	}
	seen := make(map[string]bool, len(sk.RequiredTools))
	for i, t := range sk.RequiredTools {
		f := fmt.Sprintf("skill.required_tools[%d]", i)
		if _, ok := tools.Lookup(t); !ok {
			return &bus.Error{Code: bus.CodeFailedPrecondition, Field: f, Message: fmt.Sprintf("unknown tool %.80q (amctl tools lists them)", t)}
		}
		if seen[t] {
			return bus.FieldError(f, "duplicate tool %q", t)
		}
		seen[t] = true
	}
	if n := len(sk.Config); n > MaxSkillConfig {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "skill.config", Message: fmt.Sprintf("%d entries is over the limit of %d", n, MaxSkillConfig)}
	}
	total := 0
	for k, v := range sk.Config {
		switch {
		case k == "":
			return bus.FieldError("skill.config", "keys must not be empty")
		case len(k) > MaxConfigKey:
			return bus.FieldError("skill.config", "key %.32q... is longer than %d bytes", k, MaxConfigKey)
		case !utf8.ValidString(k) || strings.IndexFunc(k, unicode.IsControl) >= 0:
			return bus.FieldError("skill.config", "key %.32q must be printable UTF-8", k)
		case !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0:
			return bus.FieldError("skill.config", "value of %.32q must be valid UTF-8 without NUL characters", k)
		}
		total += len(k) + len(v)
	}
	if total > MaxConfigBytes {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "skill.config", Message: fmt.Sprintf("%d bytes is over the limit of %d", total, MaxConfigBytes)}
	}
	return nil
}

// text checks a free-text field of a skill: valid UTF-8 without NUL, the
// one character Postgres cannot keep in text (or jsonb), so both stores
// take the same skills and a NUL is refused by name, not failed on by the
// database.
func text(field, s string) error {
	switch {
	case !utf8.ValidString(s):
		return bus.FieldError(field, "must be valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return bus.FieldError(field, "must not contain NUL characters")
	}
	return nil
}
