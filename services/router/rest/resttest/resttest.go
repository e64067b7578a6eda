// Package resttest is a small client of agentmesh's REST and SSE door for
// tests and benchmarks: JSON calls with a key, google.rpc.Status errors
// decoded, and a reader of text/event-stream. Test support only.
package resttest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	spb "google.golang.org/genproto/googleapis/rpc/status"
)

// Client calls one router's HTTP listener.
type Client struct {
	// Base is the listener's URL, e.g. http://127.0.0.1:7480.
	Base string
	// Key is sent as "Authorization: Bearer KEY" unless empty.
	Key  string
	HTTP *http.Client
}

// New returns a client of base (with a 30 s timeout per call).
func New(base, key string) *Client {
	return &Client{Base: base, Key: key, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// As returns a copy of c that sends key.
func (c *Client) As(key string) *Client {
	cp := *c
	cp.Key = key
	return &cp
}

// Response is a whole answer.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// Marshal is the JSON the door takes: proto names.
var Marshal = protojson.MarshalOptions{UseProtoNames: true}

// Do sends one request: body is nil, a string or []byte (sent as is), or
// a proto.Message (as JSON). It fails t on a transport error.
func (c *Client) Do(t testing.TB, method, path string, body any) Response {
	t.Helper()
	r, err := c.Try(context.Background(), method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// Try is Do returning the transport error.
func (c *Client) Try(ctx context.Context, method, path string, body any) (Response, error) {
	req, err := c.Request(ctx, method, path, body)
	if err != nil {
		return Response{}, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Response{Code: resp.StatusCode, Header: resp.Header, Body: b}, err
}

// Request builds a request with the client's key.
func (c *Client) Request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case proto.Message:
		j, err := Marshal.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(j)
	default:
		return nil, fmt.Errorf("resttest: body of type %T", body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	return req, nil
}

// Decode reads the body into m (proto JSON); it fails t unless the answer
// is 200 and decodes.
func (r Response) Decode(t testing.TB, m proto.Message) {
	t.Helper()
	if r.Code != http.StatusOK {
		t.Fatalf("HTTP %d %s, want 200", r.Code, r.Body)
	}
	if err := protojson.Unmarshal(r.Body, m); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// Status decodes an error body (google.rpc.Status); nil when it is none.
func (r Response) Status() *status.Status {
	var p spb.Status
	if err := protojson.Unmarshal(r.Body, &p); err != nil {
		return nil
	}
	return status.FromProto(&p)
}

// Event is one server-sent event.
type Event struct {
	ID, Name, Data string
	// Comment is set for a comment line (a keep-alive); the rest is empty.
	Comment string
}

// Stream reads a text/event-stream.
type Stream struct {
	Resp *http.Response
	rd   *bufio.Reader
}

// Events opens an event stream: GET path with Last-Event-ID lastID (none
// when empty). A non-200 answer is returned whole, with a nil stream.
func (c *Client) Events(ctx context.Context, path, lastID string) (*Stream, Response, error) {
	req, err := c.Request(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, Response{}, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	hc := *c.HTTP
	hc.Timeout = 0 // a stream lasts; ctx bounds it
	resp, err := hc.Do(req)
	if err != nil {
		return nil, Response{}, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return nil, Response{Code: resp.StatusCode, Header: resp.Header, Body: b}, err
	}
	return &Stream{Resp: resp, rd: bufio.NewReader(resp.Body)}, Response{Code: resp.StatusCode, Header: resp.Header}, nil
}

// ErrEnd is returned by Next at the end of the stream.
var ErrEnd = io.EOF

// Next returns the next event or comment; io.EOF at the end.
func (s *Stream) Next() (Event, error) {
	var ev Event
	seen := false
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && !seen {
				return Event{}, io.EOF
			}
			return ev, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if seen {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			if !seen {
				return Event{Comment: strings.TrimSpace(line[1:])}, nil
			}
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.ID = value
			case "event":
				ev.Name = value
			case "data":
				if ev.Data != "" {
					ev.Data += "\n"
				}
				ev.Data += value
			}
			if field != "retry" {
				seen = true
			}
		}
	}
}

// Close drops the connection.
func (s *Stream) Close() { _ = s.Resp.Body.Close() }
