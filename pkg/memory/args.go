package memory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The memory tools (pkg/tools registers them; the executor runs them on
// the child's behalf through the state service).
const (
	ToolStateGet    = "state_get"
	ToolStateSet    = "state_set"
	ToolStateDelete = "state_delete"
	ToolRemember    = "remember"
	ToolRecall      = "recall"
)

// Tools lists the memory tools.
var Tools = []string{ToolStateGet, ToolStateSet, ToolStateDelete, ToolRemember, ToolRecall}

// StateGet are state_get's arguments.
type StateGet struct {
	Key   string `json:"key"`
	Scope Scope  `json:"-"`
}

// StateSet are state_set's arguments.
type StateSet struct {
	Key        string          `json:"key"`
	Value      json.RawMessage `json:"value"`
	TTLSeconds int64           `json:"ttl_seconds"`
	Persist    bool            `json:"persist"`
	// IfRevision: nil writes whatever is there; 0 the key must not exist;
	// n its revision must be n.
	IfRevision *int64 `json:"if_revision"`
	Scope      Scope  `json:"-"`
}

// TTL is the entry's lifetime (0: the default).
func (a StateSet) TTL() time.Duration { return time.Duration(a.TTLSeconds) * time.Second }

// StateDelete are state_delete's arguments.
type StateDelete struct {
	Key        string `json:"key"`
	IfRevision *int64 `json:"if_revision"`
	Scope      Scope  `json:"-"`
}

// Remember are remember's arguments.
type Remember struct {
	Text  string   `json:"text"`
	Tags  []string `json:"tags"`
	Scope Scope    `json:"-"`
}

// Recall are recall's arguments. Scope "" searches every scope the
// agent may read.
type Recall struct {
	Query string   `json:"query"`
	K     int      `json:"k"`
	Tags  []string `json:"tags"`
	Scope Scope    `json:"-"`
}

// scoped is the scope every tool's arguments may name.
type scoped struct {
	Scope string `json:"scope"`
}

// decode reads a tool's arguments strictly: one JSON object, no unknown
// field (but "scope", read apart), nothing after it.
func decode(raw []byte, v any) (scopeName string, err error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", invalid("the arguments are not a JSON object: %v", err)
	}
	var sc scoped
	if s, ok := fields["scope"]; ok {
		if err := json.Unmarshal(s, &sc.Scope); err != nil {
			return "", invalid("scope: want a string (task-tree, agent or org)")
		}
		delete(fields, "scope")
	}
	rest, _ := json.Marshal(fields)
	d := json.NewDecoder(bytes.NewReader(rest))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return "", invalid("%v", err)
	}
	return sc.Scope, nil
}

// scopeOr parses a scope, "" being def.
func scopeOr(name string, def Scope) (Scope, error) {
	if strings.TrimSpace(name) == "" {
		return def, nil
	}
	return ParseScope(name)
}

// ParseStateGet reads state_get's arguments (scope: task-tree by default).
func ParseStateGet(raw []byte) (StateGet, error) {
	var a StateGet
	name, err := decode(raw, &a)
	if err != nil {
		return a, err
	}
	if a.Scope, err = scopeOr(name, ScopeTaskTree); err != nil {
		return a, err
	}
	return a, CheckKey(a.Key)
}

// ParseStateSet reads state_set's arguments: a key, a JSON value of at
// most MaxValueBytes, a TTL within bounds.
func ParseStateSet(raw []byte) (StateSet, error) {
	var a StateSet
	name, err := decode(raw, &a)
	if err != nil {
		return a, err
	}
	if a.Scope, err = scopeOr(name, ScopeTaskTree); err != nil {
		return a, err
	}
	if err := CheckKey(a.Key); err != nil {
		return a, err
	}
	if len(bytes.TrimSpace(a.Value)) == 0 {
		return a, invalid("a value is required (any JSON value)")
	}
	if err := CheckValue(a.Value); err != nil {
		return a, err
	}
	if a.TTLSeconds < 0 || a.TTLSeconds > int64(MaxTTL/time.Second) {
		return a, invalid("ttl_seconds %d: 0 (the default, %s) to %d", a.TTLSeconds, DefaultTTL, int64(MaxTTL/time.Second))
	}
	if a.IfRevision != nil && *a.IfRevision < 0 {
		return a, invalid("if_revision %d: 0 (must not exist) or a revision", *a.IfRevision)
	}
	return a, nil
}

// CheckValue checks a working-state value's size (its JSON encoding).
func CheckValue(v []byte) error {
	if len(v) > MaxValueBytes {
		return invalid("value is %d bytes; at most %d (64 KiB)", len(v), MaxValueBytes)
	}
	if !json.Valid(v) {
		return invalid("value is not valid JSON")
	}
	return nil
}

// ParseStateDelete reads state_delete's arguments.
func ParseStateDelete(raw []byte) (StateDelete, error) {
	var a StateDelete
	name, err := decode(raw, &a)
	if err != nil {
		return a, err
	}
	if a.Scope, err = scopeOr(name, ScopeTaskTree); err != nil {
		return a, err
	}
	if a.IfRevision != nil && *a.IfRevision <= 0 {
		return a, invalid("if_revision %d: a revision (1 or more)", *a.IfRevision)
	}
	return a, CheckKey(a.Key)
}

// ParseRemember reads remember's arguments: a text of at most
// MaxTextBytes, tags, a scope (task-tree by default).
func ParseRemember(raw []byte) (Remember, error) {
	var a Remember
	name, err := decode(raw, &a)
	if err != nil {
		return a, err
	}
	if a.Scope, err = scopeOr(name, ScopeTaskTree); err != nil {
		return a, err
	}
	if err := CheckText(a.Text); err != nil {
		return a, err
	}
	a.Tags, err = CheckTags(a.Tags)
	return a, err
}

// CheckText checks a memory's text.
func CheckText(text string) error {
	switch {
	case strings.TrimSpace(text) == "":
		return invalid("a text is required")
	case len(text) > MaxTextBytes:
		return invalid("text is %d bytes; at most %d (8 KiB)", len(text), MaxTextBytes)
	case !utf8.ValidString(text):
		return invalid("text is not valid UTF-8")
	}
	return nil
}

// ParseRecall reads recall's arguments: a query, k (1-MaxK, default
// DefaultK), tags every hit must carry, a scope ("" = every readable one).
func ParseRecall(raw []byte) (Recall, error) {
	var a Recall
	name, err := decode(raw, &a)
	if err != nil {
		return a, err
	}
	if strings.TrimSpace(name) != "" {
		if a.Scope, err = ParseScope(name); err != nil {
			return a, err
		}
	}
	switch {
	case strings.TrimSpace(a.Query) == "":
		return a, invalid("a query is required")
	case len(a.Query) > MaxQueryBytes:
		return a, invalid("query is %d bytes; at most %d", len(a.Query), MaxQueryBytes)
	case !utf8.ValidString(a.Query):
		return a, invalid("query is not valid UTF-8")
	case a.K < 0 || a.K > MaxK:
		return a, invalid("k %d: 1 to %d (0 means %d)", a.K, MaxK, DefaultK)
	}
	if a.K == 0 {
		a.K = DefaultK
	}
	a.Tags, err = CheckTags(a.Tags)
	return a, err
}

// Access is what a memory tool call does to which scope: the gate checks
// it against the agent's policy before the call runs.
type Access struct {
	Scope Scope
	// Write: the call writes (state_set, state_delete, remember).
	Write bool
	// All: recall without a scope (every scope the policy lets it read).
	All bool
}

// AccessOf parses a memory tool's arguments and says what the call would
// access; ok is false for a tool that is not a memory tool.
func AccessOf(tool string, raw []byte) (acc Access, ok bool, err error) {
	switch tool {
	case ToolStateGet:
		a, err := ParseStateGet(raw)
		return Access{Scope: a.Scope}, true, err
	case ToolStateSet:
		a, err := ParseStateSet(raw)
		return Access{Scope: a.Scope, Write: true}, true, err
	case ToolStateDelete:
		a, err := ParseStateDelete(raw)
		return Access{Scope: a.Scope, Write: true}, true, err
	case ToolRemember:
		a, err := ParseRemember(raw)
		return Access{Scope: a.Scope, Write: true}, true, err
	case ToolRecall:
		a, err := ParseRecall(raw)
		return Access{Scope: a.Scope, All: a.Scope == ""}, true, err
	}
	return Access{}, false, nil
}

// Denied says why p refuses acc ("" when it allows it).
func (p Policy) Denied(tool string, acc Access) string {
	switch {
	case acc.All:
		if len(p.Read) == 0 {
			return fmt.Sprintf("the agent's memory policy lets %s read no scope", tool)
		}
		return ""
	case acc.Write && !p.MayWrite(acc.Scope):
		return fmt.Sprintf("the agent's memory policy does not let %s write scope %q (it may write: %s)", tool, acc.Scope, Names(p.Write))
	case !acc.Write && !p.MayRead(acc.Scope):
		return fmt.Sprintf("the agent's memory policy does not let %s read scope %q (it may read: %s)", tool, acc.Scope, Names(p.Read))
	}
	return ""
}
