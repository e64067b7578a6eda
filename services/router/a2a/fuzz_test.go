package a2a

import (
	"encoding/json"
	"testing"

	"github.com/agentmesh/agentmesh/services/router/door"
)

// FuzzParseRequest: any body is read without panicking; an accepted
// request has a method and an id that is a JSON string or number; a
// refused one gets a JSON-RPC error code and an id that is null or the
// request's.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`,
		`{"jsonrpc":"2.0","id":"a","method":"message/send","params":{"message":{"role":"user","messageId":"m","parts":[{"kind":"text","text":"hi"}]}}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tasks/get"}]`, `{"jsonrpc":"2.0","method":"x"}`, `{"id":null}`,
		`{"jsonrpc":"2.0","id":-1.5e3,"method":"m","params":null}`, `"str"`, `{`, ``, `{"jsonrpc":"2.0","id":{},"method":"m"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, id, rerr := parseRequest(body)
		if rerr != nil {
			switch rerr.Code {
			case door.CodeParseError, door.CodeInvalidRequest, door.CodeInvalidParams:
			default:
				t.Fatalf("%q: code %d", body, rerr.Code)
			}
			if !json.Valid(id) {
				t.Fatalf("%q: error id %q is not JSON", body, id)
			}
			return
		}
		var v any
		if req.Method == "" || json.Unmarshal(req.ID, &v) != nil {
			t.Fatalf("%q: accepted with method %q id %q", body, req.Method, req.ID)
		}
		switch v.(type) {
		case string, float64:
		default:
			t.Fatalf("%q: id %q is neither a string nor a number", body, req.ID)
		}
	})
}

// FuzzMessage: any message/send params are checked, and their text or
// decision read, without panicking; a message accepted as input has text.
func FuzzMessage(f *testing.F) {
	for _, s := range []string{
		`{"message":{"role":"user","messageId":"m","parts":[{"kind":"text","text":"hi"},{"kind":"data","data":{"a":1}}]}}`,
		`{"message":{"role":"user","messageId":"m","taskId":"t","parts":[{"kind":"text","text":"approve: fine"}]}}`,
		`{"message":{"role":"user","messageId":"m","parts":[{"kind":"data","data":{"decision":"reject","comment":"no"}}]}}`,
		`{"message":{"role":"user","messageId":"m","contextId":"c-1","parts":[{"kind":"file","file":{}}]},"metadata":{"skills":["a",1]}}`,
		`{"message":{"role":"agent"}}`, `{"configuration":{"blocking":"yes"}}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		p, rerr := readSend(&request{Params: params})
		if rerr != nil {
			return
		}
		if text, rerr := inputOf(p.Message); rerr == nil && text == "" {
			t.Fatalf("%q: accepted as input with no text", params)
		}
		_, _, _ = decisionOf(p.Message)
		_ = p.blocking()
		_ = p.history()
	})
}
