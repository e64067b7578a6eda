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
	"github.com/agentmesh/agentmesh/services/router/door"
	"google.golang.org/grpc"
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
// EventSource sends, else ?after= or ?after_seq=), the name of what gave
// it ("" when nothing did) and ?tokens=.
func streamParams(r *http.Request) (after int64, cursor string, tokens bool, err error) {
	q := r.URL.Query()
	name, raw, given := LastEventID, "", false
	if vs := r.Header.Values(LastEventID); len(vs) > 1 {
		return 0, "", false, badParam(LastEventID, "given more than once")
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
			return 0, "", false, badParam(name, "%v, got %q", err, raw)
		}
	} else {
		name = ""
	}
	if q.Has("tokens") {
		if tokens, err = strconv.ParseBool(q.Get("tokens")); err != nil {
			return 0, "", false, badParam("tokens", "want true or false, got %q", q.Get("tokens"))
		}
	}
	return after, name, tokens, nil
}

// asCursor renames the router's after_seq in a refusal of the cursor to
// what the client gave it as (Last-Event-ID, after): the client never
// said after_seq.
func asCursor(err error, cursor string) error {
	st, ok := status.FromError(err)
	if !ok || cursor == "" || cursor == "after_seq" || fieldOf(st) != "after_seq" {
		return err
	}
	msg := cursor + strings.TrimPrefix(st.Message(), "after_seq")
	return fieldError(cursor, "%s", msg)
}

func badParam(field, format string, args ...any) error {
	return fieldError(field, field+": "+format, args...)
}

// WatchStream receives a watch's answers: Accepted once the watch stands
// (before its first event, or with it), then each response.
type WatchStream interface {
	Accepted() error
	Send(*agentmeshv1.WatchTaskResponse) error
}

// Watcher runs WatchTask as the caller of r (its key, its trace context)
// into s until the task ends (nil), the caller goes away, or the router
// refuses or ends the watch (a gRPC status). A watch that returns before
// Accepted had nothing to send: the cursor was at the end of an ended task.
type Watcher func(r *http.Request, req *agentmeshv1.WatchTaskRequest, s WatchStream) error

// ConnWatcher runs WatchTask through a gRPC connection to the router, the
// request's credentials as outgoing metadata (OutgoingContext). Whether
// the router accepted the watch is judged as every door judges it
// (door.API.WatchAdmitted); a watch that ended at once had nothing to say.
func ConnWatcher(conn grpc.ClientConnInterface) Watcher {
	api := &door.API{Tasks: agentmeshv1.NewTaskServiceClient(conn)}
	return func(r *http.Request, req *agentmeshv1.WatchTaskRequest, s WatchStream) error {
		// The credentials travel as OutgoingContext puts them: ctx carries
		// no door.WithKey, so WatchAdmitted adds none of its own.
		ctx, cancel := context.WithCancel(OutgoingContext(r.Context(), r))
		defer cancel()
		stream, err := api.WatchAdmitted(ctx, req.GetId(), req.GetAfterSeq())
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Accepted(); err != nil {
			return err
		}
		return relay(stream.Recv, s.Send)
	}
}

// relay hands what recv gives to send until the stream ends (nil) or
// either fails.
func relay[T any](recv func() (T, error), send func(T) error) error {
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := send(m); err != nil {
			return err
		}
	}
}

// events serves GET /v1/tasks/{id}/events: the task's WatchTask, run by
// watch as the caller, as Server-Sent Events.
type events struct {
	watch     Watcher
	log       *slog.Logger
	keepAlive time.Duration
}

var eventJSON = protojson.MarshalOptions{UseProtoNames: true}

func (e *events) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	after, cursor, tokens, err := streamParams(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	out := &sseStream{w: w, tokens: tokens, every: e.keepAlive, head: r.Method == http.MethodHead}
	defer out.close()
	err = e.watch(r, &agentmeshv1.WatchTaskRequest{Id: r.PathValue("id"), AfterSeq: after}, out)
	switch {
	case out.started && out.head: // the headers were the answer
	case !out.started && err == nil:
		w.WriteHeader(http.StatusNoContent) // nothing after the cursor; an EventSource stops here
	case !out.started:
		WriteError(w, r, asCursor(err, cursor))
	case err == nil:
		_ = out.event("end", "", &agentmeshv1.WatchTaskResponse{Status: out.last})
	case r.Context().Err() == nil: // not the client going away
		_ = out.event("error", "", status.Convert(err).Proto())
	}
}

// sseStream is one event stream: the watch's answers as events, and a
// comment line from a timer when nothing was written for a while (no
// goroutine waits for it).
type sseStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	tokens  bool
	every   time.Duration
	started bool
	head    bool // a HEAD request: the stream ends once accepted
	last    agentmeshv1.TaskStatus

	mu     sync.Mutex
	timer  *time.Timer
	closed bool
	buf    []byte
}

// errHead ends the watch of a HEAD request once it is accepted: its
// answer is the headers alone, and it holds no watch open.
var errHead = errors.New("event stream: HEAD answered")

// Accepted starts the stream: 200, text/event-stream, the retry delay.
func (s *sseStream) Accepted() error {
	if s.started {
		if s.head {
			return errHead
		}
		return nil
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies: do not hold events back
	s.w.WriteHeader(http.StatusOK)
	if s.head {
		return errHead
	}
	s.rc = http.NewResponseController(s.w)
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.writeLocked([]byte("retry: " + strconv.Itoa(retryMillis) + "\n\n"))
	s.timer = time.AfterFunc(s.every, s.keepAlive)
	return err
}

// Send writes one response as an event: its seq the id (none for a
// token: not in the history, never the cursor), its type the name.
func (s *sseStream) Send(resp *agentmeshv1.WatchTaskResponse) error {
	if err := s.Accepted(); err != nil {
		return err
	}
	s.last = resp.GetStatus()
	ev := resp.GetEvent()
	id := ""
	if ev.GetType() == agentmeshv1.EventType_EVENT_TYPE_TOKEN {
		if !s.tokens {
			return nil
		}
	} else {
		id = strconv.FormatInt(ev.GetSeq(), 10)
	}
	return s.event(eventName(ev.GetType()), id, resp)
}

// eventName is the SSE event name of an event type: "created", "status",
// "step", "token", "dependency", "updated", "subtask", "proposal".
func eventName(t agentmeshv1.EventType) string {
	if _, ok := agentmeshv1.EventType_name[int32(t)]; !ok || t == agentmeshv1.EventType_EVENT_TYPE_UNSPECIFIED {
		return "message"
	}
	return strings.ToLower(strings.TrimPrefix(t.String(), "EVENT_TYPE_"))
}

// retryMillis is the reconnection delay the stream suggests to EventSource.
const retryMillis = 1000

// event writes one event: its id (omitted when empty: the client's cursor
// stays), name and JSON data on one line.
func (s *sseStream) event(name, id string, m proto.Message) error {
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

func (s *sseStream) keepAlive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.writeLocked([]byte(": keep-alive\n\n"))
}

// writeLocked writes and flushes b unless closed, and re-arms the
// keep-alive; s.mu is held.
func (s *sseStream) writeLocked(b []byte) error {
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
func (s *sseStream) close() {
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
