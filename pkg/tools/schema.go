package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"
)

// Validate checks the JSON document args against schema and returns an
// error a model can act on ("property \"text\": want string, got number").
//
// It implements the part of JSON Schema that tool definitions use: type
// (one or a list), properties, required, additionalProperties (false or a
// schema), items, enum, minLength/maxLength, minimum/maximum and
// minItems/maxItems. Other keywords are ignored.
func Validate(schema json.RawMessage, args []byte) error {
	var s schemaNode
	if err := json.Unmarshal(schema, &s); err != nil {
		return fmt.Errorf("tool schema does not parse: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("arguments are not JSON: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("arguments are not one JSON value")
	}
	return s.check("arguments", v)
}

type schemaNode struct {
	Type                 typeList               `json:"type"`
	Properties           map[string]*schemaNode `json:"properties"`
	Required             []string               `json:"required"`
	AdditionalProperties json.RawMessage        `json:"additionalProperties"`
	Items                *schemaNode            `json:"items"`
	Enum                 []any                  `json:"enum"`
	MinLength            *int                   `json:"minLength"`
	MaxLength            *int                   `json:"maxLength"`
	Minimum              *float64               `json:"minimum"`
	Maximum              *float64               `json:"maximum"`
	MinItems             *int                   `json:"minItems"`
	MaxItems             *int                   `json:"maxItems"`
}

// typeList is "type" as one name or a list of names.
type typeList []string

func (t *typeList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*t = typeList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("type must be a string or a list of strings")
	}
	*t = many
	return nil
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		if f, err := x.Float64(); err == nil && f == math.Trunc(f) && !strings.ContainsAny(x.String(), ".eE") {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}

func typeMatches(want, got string) bool {
	return want == got || (want == "number" && got == "integer")
}

func (s *schemaNode) check(path string, v any) error {
	got := jsonType(v)
	if len(s.Type) > 0 {
		ok := false
		for _, w := range s.Type {
			if typeMatches(w, got) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("%s: want %s, got %s", path, strings.Join(s.Type, " or "), got)
		}
	}
	if len(s.Enum) > 0 {
		ok := false
		for _, e := range s.Enum {
			if fmt.Sprint(e) == fmt.Sprint(v) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("%s: must be one of %v", path, s.Enum)
		}
	}
	switch x := v.(type) {
	case string:
		n := utf8.RuneCountInString(x)
		if s.MinLength != nil && n < *s.MinLength {
			return fmt.Errorf("%s: shorter than %d characters", path, *s.MinLength)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			return fmt.Errorf("%s: longer than %d characters", path, *s.MaxLength)
		}
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return fmt.Errorf("%s: not a number: %w", path, err)
		}
		if s.Minimum != nil && f < *s.Minimum {
			return fmt.Errorf("%s: less than %v", path, *s.Minimum)
		}
		if s.Maximum != nil && f > *s.Maximum {
			return fmt.Errorf("%s: more than %v", path, *s.Maximum)
		}
	case []any:
		if s.MinItems != nil && len(x) < *s.MinItems {
			return fmt.Errorf("%s: fewer than %d items", path, *s.MinItems)
		}
		if s.MaxItems != nil && len(x) > *s.MaxItems {
			return fmt.Errorf("%s: more than %d items", path, *s.MaxItems)
		}
		if s.Items != nil {
			for i, e := range x {
				if err := s.Items.check(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
					return err
				}
			}
		}
	case map[string]any:
		for _, r := range s.Required {
			if _, ok := x[r]; !ok {
				return fmt.Errorf("%s: missing required property %q", path, r)
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var extra *schemaNode
		extraAllowed := true
		switch a := bytes.TrimSpace(s.AdditionalProperties); {
		case len(a) == 0 || string(a) == "true":
		case string(a) == "false":
			extraAllowed = false
		default:
			extra = new(schemaNode)
			if err := json.Unmarshal(a, extra); err != nil {
				return fmt.Errorf("tool schema: additionalProperties: %w", err)
			}
		}
		for _, k := range keys {
			sub := fmt.Sprintf("%s.%s", path, k)
			if p, ok := s.Properties[k]; ok {
				if p != nil {
					if err := p.check(sub, x[k]); err != nil {
						return err
					}
				}
				continue
			}
			if !extraAllowed {
				return fmt.Errorf("%s: unknown property %q", path, k)
			}
			if extra != nil {
				if err := extra.check(sub, x[k]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
