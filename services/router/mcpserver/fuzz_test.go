package mcpserver

import (
	"bytes"
	"encoding/json"
	"testing"

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
