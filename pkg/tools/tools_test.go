package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBuiltinSchemasParse(t *testing.T) {
	for _, tool := range Builtin() {
		var m map[string]any
		if err := json.Unmarshal(tool.Parameters, &m); err != nil {
			t.Errorf("%s: schema does not parse: %v", tool.Name, err)
		}
		if m["type"] != "object" {
			t.Errorf("%s: schema type = %v, want object", tool.Name, m["type"])
		}
		if tool.Description == "" || tool.Category == "" || tool.Risk == "" || tool.Runs == "" {
			t.Errorf("%s: incomplete spec %+v", tool.Name, tool.Spec)
		}
	}
}

func TestCall(t *testing.T) {
	Now = func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	t.Cleanup(func() { Now = time.Now })
	tests := []struct {
		name, tool, args string
		want             string
		wantErr          error
	}{
		{"echo", "echo", `{"text":"hi there"}`, "hi there", nil},
		{"echo missing text", "echo", `{}`, "", ErrInvalidArguments},
		{"echo wrong type", "echo", `{"text":3}`, "", ErrInvalidArguments},
		{"echo extra property", "echo", `{"text":"a","x":1}`, "", ErrInvalidArguments},
		{"echo not json", "echo", `{"text":`, "", ErrInvalidArguments},
		{"echo array", "echo", `["a"]`, "", ErrInvalidArguments},
		{"time utc", "current_time", `{}`, "2026-03-01T12:00:00Z", nil},
		{"time empty args", "current_time", ``, "2026-03-01T12:00:00Z", nil},
		{"time paris", "current_time", `{"timezone":"Europe/Paris"}`, "2026-03-01T13:00:00+01:00", nil},
		{"time bad zone", "current_time", `{"timezone":"Mars/Olympus"}`, "", ErrInvalidArguments},
		{"time path zone", "current_time", `{"timezone":"../../etc/passwd"}`, "", ErrInvalidArguments},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool, ok := Lookup(tt.tool)
			if !ok {
				t.Fatalf("Lookup(%q) not found", tt.tool)
			}
			got, err := tool.Call(context.Background(), Env{}, tt.args)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	got, err := Resolve([]string{"echo", "current_time"})
	if err != nil || len(got) != 2 || got[0].Name != "echo" {
		t.Fatalf("Resolve = %v, %v", got, err)
	}
	if _, err := Resolve([]string{"echo", "rm_rf"}); !errors.Is(err, ErrUnknownTool) || !strings.Contains(err.Error(), "rm_rf") {
		t.Errorf("err = %v, want unknown tool naming rm_rf", err)
	}
}

func TestValidate(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{
		"n":{"type":"integer","minimum":1,"maximum":3},
		"f":{"type":"number"},
		"mode":{"type":"string","enum":["a","b"]},
		"tags":{"type":"array","items":{"type":"string"},"maxItems":2},
		"opt":{"type":["string","null"]}
	},"required":["n"],"additionalProperties":{"type":"boolean"}}`)
	tests := []struct {
		args    string
		wantErr string
	}{
		{`{"n":2}`, ""},
		{`{"n":2.5}`, "want integer"},
		{`{"n":0}`, "less than 1"},
		{`{"n":4}`, "more than 3"},
		{`{"n":1,"f":1}`, ""},
		{`{"n":1,"mode":"c"}`, "one of"},
		{`{"n":1,"tags":["x",1]}`, "arguments.tags[1]: want string"},
		{`{"n":1,"tags":["x","y","z"]}`, "more than 2 items"},
		{`{"n":1,"opt":null}`, ""},
		{`{"n":1,"extra":true}`, ""},
		{`{"n":1,"extra":"no"}`, "arguments.extra: want boolean"},
		{`{}`, "missing required property \"n\""},
		{`{"n":1} {"n":2}`, "not one JSON value"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			err := Validate(schema, []byte(tt.args))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestOutputCapped(t *testing.T) {
	tool, _ := Lookup("echo")
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("a", 60000)})
	out, err := tool.Call(context.Background(), Env{}, string(big))
	if err != nil || len(out) != 60000 {
		t.Fatalf("len = %d, err = %v", len(out), err)
	}
	tool.Run = func(context.Context, Env, json.RawMessage) (string, error) {
		return strings.Repeat("b", MaxOutput+10), nil
	}
	out, err = tool.Call(context.Background(), Env{}, `{"text":"x"}`)
	if err != nil || !strings.HasSuffix(out, "[output cut at 256 KiB]") {
		t.Fatalf("output not cut: len %d, err %v", len(out), err)
	}
}

func FuzzValidate(f *testing.F) {
	for _, tool := range Builtin() {
		f.Add(string(tool.Parameters), `{"text":"x"}`)
	}
	f.Add(`{"type":"array","items":{"type":"object"}}`, `[{}, 1]`)
	f.Fuzz(func(t *testing.T, schema, args string) {
		_ = Validate(json.RawMessage(schema), []byte(args))
	})
}
