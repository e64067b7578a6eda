package a2a

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/agentmesh/agentmesh/services/router/door"
)

// request is one JSON-RPC 2.0 request as parseRequest accepted it.
type request struct {
	// ID is the request's id as it came: a JSON string or number.
	ID     json.RawMessage
	Method string
	Params json.RawMessage
}

// nullID is the id of a response to a request whose id could not be read.
var nullID = json.RawMessage("null")

// parseRequest reads one JSON-RPC 2.0 request: an object with "jsonrpc":
// "2.0", a method, an id (string or number: every A2A method answers, so
// a notification is refused) and params that are an object when present.
// Batches are refused. The id of the error is the request's when it could
// be read, else null.
func parseRequest(body []byte) (*request, json.RawMessage, *door.RPCError) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, nullID, &door.RPCError{Code: door.CodeInvalidRequest, Message: "empty body: send one JSON-RPC 2.0 request"}
	}
	if !json.Valid(body) {
		return nil, nullID, &door.RPCError{Code: door.CodeParseError, Message: "the body is not valid JSON"}
	}
	if body[0] == '[' {
		return nil, nullID, &door.RPCError{Code: door.CodeInvalidRequest, Message: "batch requests are not supported: send one request per call"}
	}
	var raw struct {
		JSONRPC *string         `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  *string         `json:"method"`
		Params  json.RawMessage `json:"params"`
	}
	if body[0] != '{' || json.Unmarshal(body, &raw) != nil {
		return nil, nullID, &door.RPCError{Code: door.CodeInvalidRequest, Message: "a request is a JSON object with jsonrpc, id, method and params"}
	}
	switch {
	case len(raw.ID) == 0 || string(raw.ID) == "null":
		return nil, nullID, &door.RPCError{Code: door.CodeInvalidRequest, Message: "id: required (every A2A method answers)"}
	case raw.ID[0] != '"' && raw.ID[0] != '-' && (raw.ID[0] < '0' || raw.ID[0] > '9'):
		return nil, nullID, &door.RPCError{Code: door.CodeInvalidRequest, Message: "id: must be a string or a number"}
	}
	id := raw.ID
	if raw.JSONRPC == nil || *raw.JSONRPC != "2.0" {
		return nil, id, &door.RPCError{Code: door.CodeInvalidRequest, Message: `jsonrpc: must be "2.0"`}
	}
	if raw.Method == nil || *raw.Method == "" {
		return nil, id, &door.RPCError{Code: door.CodeInvalidRequest, Message: "method: required"}
	}
	if p := bytes.TrimSpace(raw.Params); len(p) > 0 && p[0] != '{' && string(p) != "null" {
		return nil, id, &door.RPCError{Code: door.CodeInvalidParams, Message: "params: must be an object"}
	}
	return &request{ID: id, Method: *raw.Method, Params: raw.Params}, id, nil
}

// decodeParams decodes a request's params into v; a type mismatch is
// invalid params naming the field.
func decodeParams(params json.RawMessage, v any) *door.RPCError {
	if len(params) == 0 || string(params) == "null" {
		params = []byte("{}")
	}
	if err := json.Unmarshal(params, v); err != nil {
		msg := "params: " + err.Error()
		if te, ok := err.(*json.UnmarshalTypeError); ok {
			msg = fmt.Sprintf("params.%s: must be %s, not %s", te.Field, jsonType(te.Type.Kind().String()), te.Value)
		}
		return &door.RPCError{Code: door.CodeInvalidParams, Message: msg}
	}
	return nil
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	}
	return "a number"
}

// errorData is an error's data: the API status it came from, if any, and
// the message again under "error" (where A2A's SDKs look for details).
type errorData struct {
	Status string `json:"status,omitempty"`
	Error  string `json:"error"`
}

func detailed(rerr *door.RPCError) *door.RPCError {
	if rerr == nil {
		return nil
	}
	d := errorData{Error: rerr.Message}
	if sd, ok := rerr.Data.(door.StatusData); ok {
		d.Status = sd.Status
	}
	out := *rerr
	out.Data = d
	return &out
}

// reply writes a JSON-RPC response (always HTTP 200: errors are in the
// body, as JSON-RPC over HTTP has them).
func reply(w http.ResponseWriter, id json.RawMessage, result any, rerr *door.RPCError) {
	resp := door.Response{JSONRPC: "2.0", ID: id, Result: result, Error: detailed(rerr)}
	if rerr == nil && result == nil {
		resp.Result = json.RawMessage("null")
	}
	door.WriteJSON(w, http.StatusOK, resp)
}

// sse writes a server-sent event stream of JSON-RPC responses to one
// request (message/stream, tasks/resubscribe).
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	id json.RawMessage
}

func startSSE(w http.ResponseWriter, id json.RawMessage) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives a server's write timeout
	_ = rc.Flush()
	return &sse{w: w, rc: rc, id: id}
}

// send writes one event: a result, or an error (which ends the stream).
func (s *sse) send(result any, rerr *door.RPCError) error {
	body, err := json.Marshal(door.Response{JSONRPC: "2.0", ID: s.id, Result: result, Error: detailed(rerr)})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", body); err != nil {
		return err
	}
	return s.rc.Flush()
}

// keepAlive writes a comment, so idle connections are not cut.
func (s *sse) keepAlive() error {
	if _, err := s.w.Write([]byte(": keep-alive\n\n")); err != nil {
		return err
	}
	return s.rc.Flush()
}
