package mcpserver

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// FuzzReadDecision: any answer to an approval's input request is read
// without panicking, and only accept (approve or reject) and decline
// decide anything.
func FuzzReadDecision(f *testing.F) {
	for _, s := range []string{
		`{"action":"accept","content":{"decision":"approve","comment":"ok"}}`,
		`{"action":"accept","content":{"decision":"REJECT"}}`,
		`{"action":"decline"}`, `{"action":"cancel"}`, `{"action":"accept"}`,
		`{"action":7}`, `[]`, `null`, `"accept"`, `{"action":"accept","content":[]}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		approve, _, decide, err := readDecision("a1", json.RawMessage(data))
		if err != nil && decide {
			t.Fatalf("%q: an error and a decision", data)
		}
		if approve && !decide {
			t.Fatalf("%q: approve without deciding", data)
		}
		var r elicitResult
		if decide && (json.Unmarshal(data, &r) != nil || (r.Action != "accept" && r.Action != "decline")) {
			t.Fatalf("%q: decided on action %q", data, r.Action)
		}
	})
}

// FuzzDeclared: any _meta of a request (decoded as the SDK decodes it)
// is read without panicking; only an object under the extension's key
// declares it.
func FuzzDeclared(f *testing.F) {
	for _, s := range []string{
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`,
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":true}}}`,
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":[]}}`,
		`{"io.modelcontextprotocol/clientCapabilities":null}`, `{}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var meta mcp.Meta
		if json.Unmarshal(data, &meta) != nil {
			return
		}
		canon, _ := json.Marshal(meta)
		if declared(nil, meta) && !bytes.Contains(canon, []byte(`"`+TasksExtension+`":{`)) {
			t.Fatalf("%s declares the extension without an object under its key", data)
		}
	})
}

// FuzzCheckBody: any POST body is checked without panicking; a refused one
// gets parse error or invalid request and an id that is absent or the
// message's; an accepted single message's id is a string or an integer
// every JSON reader holds exactly.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`, `{"jsonrpc":"2.0","id":3,"result":{}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":1.5,"method":"ping"}]`, `[]`, `5`, `{`, ``,
		`{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, `{"jsonrpc":"2.0","id":-0,"method":7}`, `{"id":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msg, rerr := checkBody(body)
		if rerr != nil {
			if rerr.Code != door.CodeParseError && rerr.Code != door.CodeInvalidRequest {
				t.Fatalf("%q: code %d", body, rerr.Code)
			}
		}
		if len(msg.id) == 0 {
			return
		}
		var v any
		if err := json.Unmarshal(msg.id, &v); err != nil {
			t.Fatalf("%q: id %q is not JSON", body, msg.id)
		}
		switch id := v.(type) {
		case string:
		case float64:
			if id != float64(int64(id)) || id > maxExactID || id < -maxExactID {
				t.Fatalf("%q: id %q is not an exact integer", body, msg.id)
			}
		default:
			t.Fatalf("%q: id %q is neither a string nor a number", body, msg.id)
		}
	})
}

// FuzzLineFilter: any stdio input is read through the filter without
// panicking; every line the SDK gets passes checkBody and fits the limit,
// and every answer the filter writes is one JSON-RPC error per line.
func FuzzLineFilter(f *testing.F) {
	for _, s := range []string{
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{bad\n\n[1]\n",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-03-26\"}}\n[{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]",
		"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}\r\n" + strings.Repeat("x", 300) + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		var out bytes.Buffer
		lf := newLineFilter(io.NopCloser(bytes.NewReader(input)), &lockedWriter{w: nopWriteCloser{&out}}, 256)
		got, err := io.ReadAll(lf)
		if err != nil {
			t.Fatalf("%q: %v", input, err)
		}
		for _, line := range bytes.Split(bytes.TrimSuffix(got, []byte("\n")), []byte("\n")) {
			if len(got) == 0 {
				break
			}
			if _, rerr := checkBody(line); rerr != nil || len(line) > 256 {
				t.Fatalf("%q: the SDK got %q (%v)", input, line, rerr)
			}
		}
		for _, line := range bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n")) {
			var r door.Response
			if out.Len() > 0 && (json.Unmarshal(line, &r) != nil || r.Error == nil) {
				t.Fatalf("%q: the filter answered %q", input, line)
			}
		}
	})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
