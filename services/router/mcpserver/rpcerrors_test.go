package mcpserver

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/agentmesh/agentmesh/services/router/door"
)

// A message that is not JSON-RPC 2.0, or names a method the server does
// not have, gets a JSON-RPC error object (the code, the words, the
// request's id when it could be read) — the SDK answered these with a
// plain-text 400 — and an id the response could not repeat exactly (a
// fraction, beyond 2^53) is refused: the SDK answered 1.5 with id 1 and
// 99999999999999999999 with id -9223372036854775808. An unknown
// notification is ignored (202), as JSON-RPC has it.
func TestJSONRPCErrors(t *testing.T) {
	e := start(t)
	key := doortest.Secret(t, "a-op")
	session := e.initialize(t, key)
	h := http.Header{}
	h.Set("Authorization", "Bearer "+key)
	h.Set("Mcp-Session-Id", session)
	h.Set("MCP-Protocol-Version", "2025-06-18")
	e.post(t, h, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	for _, tt := range []struct {
		name, body string
		status     int
		code       int64
		words, id  string
	}{
		{"not JSON", `{"jsonrpc":`, http.StatusBadRequest, door.CodeParseError, "not valid JSON", "null"},
		{"empty", ``, http.StatusBadRequest, door.CodeInvalidRequest, "empty body", "null"},
		{"a number", `5`, http.StatusBadRequest, door.CodeInvalidRequest, "JSON object", "null"},
		{"no jsonrpc", `{"id":3,"method":"ping"}`, http.StatusBadRequest, door.CodeInvalidRequest, `jsonrpc: must be "2.0"`, "3"},
		{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, http.StatusBadRequest, door.CodeInvalidRequest, "id: must be a string or an integer", "null"},
		{"id beyond 2^53", `{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, http.StatusBadRequest, door.CodeInvalidRequest, "id: must be a string or an integer", "null"},
		{"boolean id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, http.StatusBadRequest, door.CodeInvalidRequest, "id: must be a string or an integer", "null"},
		{"method not a string", `{"jsonrpc":"2.0","id":4,"method":5}`, http.StatusBadRequest, door.CodeInvalidRequest, "method: must be a string", "4"},
		{"no method", `{"jsonrpc":"2.0","id":4}`, http.StatusBadRequest, door.CodeInvalidRequest, "method: required", "4"},
		{"unknown method", `{"jsonrpc":"2.0","id":7,"method":"foo/bar"}`, http.StatusOK, door.CodeMethodNotFound, `method not found: "foo/bar"`, "7"},
		{"no params", `{"jsonrpc":"2.0","id":"p","method":"tools/call"}`, http.StatusOK, door.CodeInvalidParams, `params: required`, `"p"`},
		{"notification with an id", `{"jsonrpc":"2.0","id":9,"method":"notifications/initialized"}`, http.StatusBadRequest, door.CodeInvalidRequest, "unexpected id", "9"},
		{"batch", `[{"jsonrpc":"2.0","id":5,"method":"ping"}]`, http.StatusBadRequest, door.CodeInvalidRequest, "batch", "null"},
		{"bad batch element", `[{"jsonrpc":"2.0","id":5,"method":"ping"},{"jsonrpc":"2.0","id":0.5,"method":"ping"}]`, http.StatusBadRequest, door.CodeInvalidRequest, "[1].id: must be", "null"},
		{"over the size limit", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", DefaultMaxBodyBytes) + `"}}`, http.StatusRequestEntityTooLarge, door.CodeInvalidRequest, "over the size limit", "null"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.post(t, h, []byte(tt.body))
			if r.status != tt.status || r.Error == nil || r.Error.Code != tt.code || !strings.Contains(r.Error.Message, tt.words) || string(r.ID) != tt.id {
				t.Errorf("got %d id %s %+v (%.200s), want %d code %d with %q and id %s", r.status, r.ID, r.Error, r.body, tt.status, tt.code, tt.words, tt.id)
			}
		})
	}
	// An unknown notification is ignored; ids a response repeats exactly
	// are answered with them.
	if r := e.post(t, h, []byte(`{"jsonrpc":"2.0","method":"notifications/zzz"}`)); r.status != http.StatusAccepted || len(r.body) != 0 {
		t.Errorf("an unknown notification: %d %q, want 202 and no body", r.status, r.body)
	}
	for _, id := range []string{`"s"`, `""`, `0`, `-5`, `9007199254740991`} {
		r := e.post(t, h, []byte(`{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`))
		if r.status != http.StatusOK || r.Error != nil || string(r.ID) != id {
			t.Errorf("ping with id %s: %d id %s %+v", id, r.status, r.ID, r.Error)
		}
	}
	// The session still works.
	if got := e.ping(t, key, session); got != http.StatusOK {
		t.Errorf("ping after the errors: %d", got)
	}
}

// Errors the SDK raised without a JSON-RPC code (it sent code 0, which
// JSON-RPC does not define) have one: a call other than initialize (or
// ping) outside a session is 400 invalid request naming Mcp-Session-Id,
// as the spec has it; a second initialize in a session is invalid request.
func TestNoCodeZeroErrors(t *testing.T) {
	e := start(t)
	key := doortest.Secret(t, "a-op")
	h := http.Header{}
	h.Set("Authorization", "Bearer "+key)
	h.Set("MCP-Protocol-Version", "2025-06-18")
	r := e.post(t, h, []byte(`{"jsonrpc":"2.0","id":"l","method":"tools/list"}`))
	if r.status != http.StatusBadRequest || r.Error == nil || r.Error.Code != door.CodeInvalidRequest ||
		!strings.Contains(r.Error.Message, "Mcp-Session-Id") || string(r.ID) != `"l"` {
		t.Errorf("tools/list outside a session: %d id %s %+v (%.200s)", r.status, r.ID, r.Error, r.body)
	}
	if r := e.post(t, h, []byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)); r.status != http.StatusOK || r.Error != nil {
		t.Errorf("ping outside a session: %d %+v", r.status, r.Error)
	}
	h.Set("Mcp-Session-Id", e.initialize(t, key))
	r = e.post(t, h, []byte(`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	if r.Error == nil || r.Error.Code != door.CodeInvalidRequest || !strings.Contains(r.Error.Message, "duplicate") {
		t.Errorf("a second initialize: %d %+v", r.status, r.Error)
	}
}
