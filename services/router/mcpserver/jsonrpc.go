package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentmesh/agentmesh/services/router/door"
)

// message is what checkBody learned of a POST body: a single message's id
// (empty for a notification, a response or a batch) and method.
type message struct {
	id     json.RawMessage
	method string
}

// maxExactID is the largest integer id every JSON reader (the SDK's, a
// JavaScript client's) holds exactly: 2^53-1.
const maxExactID = 1<<53 - 1

var integerID = regexp.MustCompile(`^-?(0|[1-9][0-9]{0,15})$`)

// checkBody checks the JSON-RPC 2.0 shape of a POST body before the SDK
// reads it, so a malformed one gets a JSON-RPC error object (the SDK
// answers these in plain text) and an id the SDK would not repeat exactly
// (a fraction, an exponent, beyond 2^53: it reads ids as int64) is
// refused. A batch's elements are checked one by one.
func checkBody(body []byte) (message, *door.RPCError) {
	body = bytes.TrimSpace(body)
	switch {
	case len(body) == 0:
		return message{}, &door.RPCError{Code: door.CodeInvalidRequest, Message: "empty body: send one JSON-RPC 2.0 message"}
	case !json.Valid(body):
		return message{}, &door.RPCError{Code: door.CodeParseError, Message: "the body is not valid JSON"}
	case body[0] == '[':
		var batch []json.RawMessage
		if err := json.Unmarshal(body, &batch); err != nil || len(batch) == 0 {
			return message{}, &door.RPCError{Code: door.CodeInvalidRequest, Message: "a batch is a non-empty array of JSON-RPC messages"}
		}
		for i, raw := range batch {
			if _, rerr := checkOne(raw); rerr != nil {
				rerr.Message = fmt.Sprintf("batch[%d].%s", i, rerr.Message)
				return message{}, rerr
			}
		}
		return message{}, nil
	}
	return checkOne(body)
}

// checkOne checks one message: "jsonrpc": "2.0", an id that is a string
// or an exact integer, and a method (a string) unless it is a response.
func checkOne(raw json.RawMessage) (message, *door.RPCError) {
	var m struct {
		JSONRPC *string         `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  json.RawMessage `json:"method"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		return message{}, &door.RPCError{Code: door.CodeInvalidRequest, Message: "a message is a JSON object with jsonrpc, id, method and params"}
	}
	var msg message
	if len(m.ID) > 0 && string(m.ID) != "null" {
		if !exactID(m.ID) {
			return message{}, &door.RPCError{Code: door.CodeInvalidRequest,
				Message: fmt.Sprintf("id: must be a string or an integer between -%d and %d, not %.40s", maxExactID, maxExactID, m.ID)}
		}
		msg.id = m.ID
	}
	if m.JSONRPC == nil || *m.JSONRPC != "2.0" {
		return msg, &door.RPCError{Code: door.CodeInvalidRequest, Message: `jsonrpc: must be "2.0"`}
	}
	switch {
	case len(m.Method) > 0 && m.Method[0] != '"':
		return msg, &door.RPCError{Code: door.CodeInvalidRequest, Message: "method: must be a string"}
	case len(m.Method) > 0:
		_ = json.Unmarshal(m.Method, &msg.method)
	case len(m.Result) == 0 && len(m.Error) == 0:
		return msg, &door.RPCError{Code: door.CodeInvalidRequest, Message: "method: required (or result or error, for a response)"}
	}
	return msg, nil
}

// exactID reports whether id is a JSON string or an integer within ±2^53-1.
func exactID(id json.RawMessage) bool {
	if id[0] == '"' {
		return true
	}
	if !integerID.Match(id) {
		return false
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil && n >= -maxExactID && n <= maxExactID
}

// plainErrors turns the SDK's plain-text 400 answers to a message that
// passed checkBody into JSON-RPC: an unknown method is method-not-found
// (an unknown notification is ignored, 202), missing params are invalid
// params, the rest invalid request, with the message's id. Any other
// answer passes through.
type plainErrors struct {
	http.ResponseWriter
	msg    message
	caught bool
	text   bytes.Buffer
}

func (p *plainErrors) WriteHeader(code int) {
	if code == http.StatusBadRequest && !p.caught && strings.HasPrefix(p.Header().Get("Content-Type"), "text/plain") {
		p.caught = true
		return
	}
	p.ResponseWriter.WriteHeader(code)
}

func (p *plainErrors) Write(b []byte) (int, error) {
	if p.caught {
		return p.text.Write(b)
	}
	return p.ResponseWriter.Write(b)
}

// Flush flushes what is not caught (an SSE stream).
func (p *plainErrors) Flush() {
	if !p.caught {
		_ = http.NewResponseController(p.ResponseWriter).Flush()
	}
}

func (p *plainErrors) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// finish writes the caught answer as JSON-RPC.
func (p *plainErrors) finish() {
	if !p.caught {
		return
	}
	why := strings.TrimSpace(p.text.String())
	p.Header().Del("X-Content-Type-Options")
	status, rerr := http.StatusBadRequest, &door.RPCError{Code: door.CodeInvalidRequest, Message: why}
	switch {
	case strings.Contains(why, "not handled") && len(p.msg.id) == 0:
		p.Header().Del("Content-Type")
		p.ResponseWriter.WriteHeader(http.StatusAccepted) // an unknown notification: ignored
		return
	case strings.Contains(why, "not handled"):
		status, rerr = http.StatusOK, &door.RPCError{Code: door.CodeMethodNotFound, Message: fmt.Sprintf("method not found: %.80q", p.msg.method)}
	case strings.Contains(why, `missing required "params"`):
		status, rerr = http.StatusOK, &door.RPCError{Code: door.CodeInvalidParams, Message: fmt.Sprintf("params: required (%.80s takes params)", p.msg.method)}
	case strings.Contains(why, "batching is not supported"):
		rerr.Message = "batch requests are not supported in MCP 2025-06-18 and later: send one message per request"
	}
	writeRPCError(p.ResponseWriter, status, p.msg.id, rerr)
}

// writeRPCError writes a JSON-RPC error response (id null when unknown).
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, rerr *door.RPCError) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	door.WriteJSON(w, status, door.Response{JSONRPC: "2.0", ID: id, Error: rerr})
}
