package rest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// LastEventID is the header an EventSource sends when it reconnects: the
// id of the last event it received.
const LastEventID = "Last-Event-ID"

// maxCursorDigits bounds a cursor's length (int64 has at most 19 digits).
const maxCursorDigits = 19

// ErrBadCursor is a Last-Event-ID (or ?after=) that is not a seq.
var ErrBadCursor = errors.New("want the seq of the last event seen: a whole number from 0")

// ParseCursor reads an event stream's cursor: the seq of the last event
// the client saw, as decimal digits only (no sign, no spaces, at most 19
// digits, at most the largest int64).
func ParseCursor(s string) (int64, error) {
	if s == "" || len(s) > maxCursorDigits {
		return 0, ErrBadCursor
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, ErrBadCursor
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, ErrBadCursor
	}
	return n, nil
}

// streamParams reads the cursor (Last-Event-ID, which a reconnecting
// EventSource sends, else ?after= or ?after_seq=) and ?tokens=.
func streamParams(r *http.Request) (after int64, tokens bool, err error) {
	q := r.URL.Query()
	name, raw, given := LastEventID, "", false
	if vs := r.Header.Values(LastEventID); len(vs) > 1 {
		return 0, false, badParam(LastEventID, "given more than once")
	} else if len(vs) == 1 && vs[0] != "" {
		raw, given = vs[0], true
	}
	for _, p := range []string{"after", "after_seq"} {
		if !given && q.Has(p) {
			name, raw, given = p, q.Get(p), true
		}
	}
	if given {
		if after, err = ParseCursor(strings.TrimSpace(raw)); err != nil {
			return 0, false, badParam(name, "%v, got %q", err, raw)
		}
	}
	if q.Has("tokens") {
		if tokens, err = strconv.ParseBool(q.Get("tokens")); err != nil {
			return 0, false, badParam("tokens", "want true or false, got %q", q.Get("tokens"))
		}
	}
	return after, tokens, nil
}

func badParam(field, format string, args ...any) error {
	return fieldError(field, field+": "+format, args...)
}

// events serves GET /v1/tasks/{id}/events: the task's WatchTask stream,
// through the router's gRPC API, as Server-Sent Events.
type events struct {
	conn      agentmeshv1.TaskServiceClient
	log       *slog.Logger
	keepAlive time.Duration
}

var eventJSON = protojson.MarshalOptions{UseProtoNames: true}

func (e *events) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	after, tokens, err := streamParams(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	ctx, cancel := context.WithCancel(OutgoingContext(r.Context(), r))
	defer cancel()
	stream, err := e.conn.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: r.PathValue("id"), AfterSeq: after})
	if err != nil {
		WriteError(w, r, err)
		return
	}
	// The router sends the header once the watch is accepted (or with its
	// first event); a stream that ends before it was refused, or had
	// nothing to say (a finished task read to its end).
	if md, _ := stream.Header(); md == nil {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			w.WriteHeader(http.StatusNoContent) // an EventSource stops here
			return
		}
		WriteError(w, r, err)
		return
	}
	out := newSSEWriter(w, e.keepAlive)
	defer out.close()
	last := agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED
	for {
		resp, err := stream.Recv()
		switch {
		case errors.Is(err, io.EOF):
			_ = out.event("end", "", &agentmeshv1.WatchTaskResponse{Status: last})
			return
		case err != nil:
			if ctx.Err() == nil { // not the client going away
				_ = out.event("error", "", status.Convert(err).Proto())
			}
			return
		}
		last = resp.GetStatus()
		ev := resp.GetEvent()
		id := ""
		if ev.GetType() == agentmeshv1.EventType_EVENT_TYPE_TOKEN {
			if !tokens {
				continue
			}
		} else {
			id = strconv.FormatInt(ev.GetSeq(), 10)
		}
		if err := out.event(eventName(ev.GetType()), id, resp); err != nil {
			return // the client is gone
		}
	}
}

// eventName is the SSE event name of an event type: "created", "status",
// "step", "token", "dependency", "updated", "subtask", "proposal".
func eventName(t agentmeshv1.EventType) string {
	if _, ok := agentmeshv1.EventType_name[int32(t)]; !ok || t == agentmeshv1.EventType_EVENT_TYPE_UNSPECIFIED {
		return "message"
	}
	return strings.ToLower(strings.TrimPrefix(t.String(), "EVENT_TYPE_"))
}

// sseWriter writes one event stream: events from the handler, and a
// comment line from a timer when nothing was written for a while (no
// goroutine waits for it).
type sseWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	every time.Duration

	mu     sync.Mutex
	timer  *time.Timer
	closed bool
	buf    []byte
}

// retryMillis is the reconnection delay the stream suggests to EventSource.
const retryMillis = 1000

func newSSEWriter(w http.ResponseWriter, every time.Duration) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies: do not hold events back
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w), every: every}
	s.mu.Lock()
	_ = s.writeLocked([]byte("retry: " + strconv.Itoa(retryMillis) + "\n\n"))
	s.timer = time.AfterFunc(every, s.keepAlive)
	s.mu.Unlock()
	return s
}

// event writes one event: its id (omitted when empty: the client's cursor
// stays), name and JSON data on one line.
func (s *sseWriter) event(name, id string, m proto.Message) error {
	data, err := eventJSON.Marshal(m)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buf[:0]
	if id != "" {
		b = append(append(append(b, "id: "...), id...), '\n')
	}
	b = append(append(append(b, "event: "...), name...), '\n')
	b = append(append(append(b, "data: "...), data...), "\n\n"...)
	s.buf = b
	return s.writeLocked(b)
}

func (s *sseWriter) keepAlive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.writeLocked([]byte(": keep-alive\n\n"))
}

// writeLocked writes and flushes b unless closed, and re-arms the
// keep-alive; s.mu is held.
func (s *sseWriter) writeLocked(b []byte) error {
	if s.closed {
		return errStreamClosed
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	err := s.rc.Flush()
	if s.timer != nil {
		s.timer.Reset(s.every)
	}
	return err
}

// close stops the keep-alive; nothing is written after it.
func (s *sseWriter) close() {
	s.mu.Lock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
}

var errStreamClosed = errors.New("event stream closed")

// fieldError is an InvalidArgument status whose BadRequest detail names
// the field.
func fieldError(field, format string, args ...any) error {
	return withField(status.Newf(codes.InvalidArgument, format, args...), field).Err()
}
