package a2a

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/memory"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// readSend decodes and checks message/send's params.
func readSend(req *request) (*sendParams, *door.RPCError) {
	var p sendParams
	if rerr := decodeParams(req.Params, &p); rerr != nil {
		return nil, rerr
	}
	m := p.Message
	switch {
	case m == nil:
		return nil, &door.RPCError{Code: door.CodeInvalidParams, Message: "message: required"}
	case m.Role != "user":
		return nil, &door.RPCError{Code: door.CodeInvalidParams, Message: fmt.Sprintf("message.role: %.20q, want user", m.Role)}
	case m.MessageID == "":
		return nil, &door.RPCError{Code: door.CodeInvalidParams, Message: "message.messageId: required"}
	case strings.IndexFunc(m.MessageID, unicode.IsControl) >= 0:
		// It becomes the task's idempotency key, which may hold none.
		return nil, &door.RPCError{Code: door.CodeInvalidParams, Message: "message.messageId: must not contain control characters"}
	case len(m.Parts) == 0:
		return nil, &door.RPCError{Code: door.CodeInvalidParams, Message: "message.parts: required"}
	}
	if c := p.Configuration; c != nil && len(c.PushNotificationConfig) > 0 && string(c.PushNotificationConfig) != "null" {
		return nil, errNoPush
	}
	if c := p.Configuration; c != nil && c.HistoryLength != nil && *c.HistoryLength < 0 {
		return nil, &door.RPCError{Code: door.CodeInvalidParams, Message: "configuration.historyLength: must not be negative"}
	}
	if m.ContextID != "" {
		if rerr := checkContextID(m.ContextID); rerr != nil {
			return nil, rerr
		}
	}
	return &p, nil
}

// blocking reports whether message/send waits for the task to end or ask
// for input: unless configuration.blocking is false (the reference SDKs
// read an absent blocking as true).
func (p *sendParams) blocking() bool {
	c := p.Configuration
	return c == nil || c.Blocking == nil || *c.Blocking
}

// history is the historyLength a request asks for (-1: all).
func (p *sendParams) history() int {
	if p.Configuration != nil && p.Configuration.HistoryLength != nil {
		return *p.Configuration.HistoryLength
	}
	return -1
}

// deliver does what a message asks: a message to a task answers the
// approval it waits on; any other starts a task (in the message's
// context, continuing its newest task). It returns the task after.
func (s *Server) deliver(ctx context.Context, p *sendParams) (*agentmeshv1.Task, *door.RPCError) {
	if p.Message.TaskID != "" {
		return s.answer(ctx, p.Message)
	}
	return s.start(ctx, p)
}

// answer delivers a message to an existing task: only a task that is
// input-required (blocked on an approval) takes one.
func (s *Server) answer(ctx context.Context, m *Message) (*agentmeshv1.Task, *door.RPCError) {
	t, err := s.api.Get(ctx, m.TaskID)
	if err != nil {
		return nil, s.apiError(err, CodeTaskNotFound)
	}
	if m.ContextID != "" && m.ContextID != contextOf(t) {
		return nil, &door.RPCError{Code: door.CodeInvalidParams,
			Message: fmt.Sprintf("message.contextId: task %s belongs to context %s, not %.70s", t.GetId(), contextOf(t), m.ContextID)}
	}
	a := t.GetPendingApproval()
	switch {
	case taskstate.Terminal(t.GetStatus()):
		return nil, &door.RPCError{Code: CodeUnsupportedOperation, Message: fmt.Sprintf(
			"task %s is %s: a finished task takes no more messages; send a new message with contextId %s to continue the conversation",
			t.GetId(), taskstate.Name(t.GetStatus()), contextOf(t))}
	case a == nil || t.GetStatus() != agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED:
		return nil, &door.RPCError{Code: CodeUnsupportedOperation, Message: fmt.Sprintf(
			"task %s is %s: a task takes a message only while it is input-required (waiting for a decision on a tool call)",
			t.GetId(), taskstate.Name(t.GetStatus()))}
	}
	approve, comment, rerr := decisionOf(m)
	if rerr != nil {
		return nil, rerr
	}
	after, err := s.api.Decide(ctx, a.GetId(), approve, comment)
	if err != nil {
		return nil, s.apiError(err, CodeTaskNotFound)
	}
	return after, nil
}

// start submits the message as a new task.
func (s *Server) start(ctx context.Context, p *sendParams) (*agentmeshv1.Task, *door.RPCError) {
	input, rerr := inputOf(p.Message)
	if rerr != nil {
		return nil, rerr
	}
	req := &agentmeshv1.SubmitTaskRequest{Input: input, IdempotencyKey: idempotencyKey(p.Message.MessageID),
		Metadata: map[string]string{"door": "a2a", MetaMessageID: truncate(p.Message.MessageID, 200)}}
	if rerr := choices(req, p.Metadata, p.Message.Metadata); rerr != nil {
		return nil, rerr
	}
	ctxID := p.Message.ContextID
	req.ThreadId = threadOf(ctxID)
	if ctxID == "" {
		ctxID = ulid.Make().String()
		req.ThreadId = ctxID
	} else {
		prev, rerr := s.newestOf(ctx, ctxID)
		if rerr != nil {
			return nil, rerr
		}
		switch {
		case prev.GetThreadId() != "":
			req.ThreadId = prev.GetThreadId() // the context's thread (or another door's)
		case prev != nil:
			// A context from before threads, or another door's task
			// outside any thread: continue it as such.
			req.ThreadId, req.ThreadPolicy, req.ContinueFrom = "", 0, prev.GetId()
		}
	}
	req.Tags = []string{ContextTagPrefix + ctxID}
	req.Metadata[MetaContextID] = ctxID
	t, err := s.api.Submit(ctx, req)
	if err != nil {
		return nil, s.apiError(err, door.CodeInvalidParams)
	}
	return t, nil
}

// newestOf is the context ctxID's newest task: the newest task tagged
// with it, or — a context no A2A message opened — the task whose id the
// context is (a task from another door: contextOf names a task so), or
// none (nil).
func (s *Server) newestOf(ctx context.Context, ctxID string) (*agentmeshv1.Task, *door.RPCError) {
	prev, err := s.api.List(ctx, &agentmeshv1.ListTasksRequest{Tag: ContextTagPrefix + ctxID, PageSize: 1})
	if err != nil {
		return nil, s.apiError(err, door.CodeInvalidParams)
	}
	if ts := prev.GetTasks(); len(ts) > 0 {
		return ts[0], nil
	}
	t, err := s.api.Get(ctx, ctxID)
	switch status.Code(err) {
	case codes.OK:
		return t, nil
	case codes.NotFound, codes.InvalidArgument:
		return nil, nil // a fresh context the client named
	}
	return nil, s.apiError(err, door.CodeInvalidParams)
}

// choices reads agentmesh's choices from the request's (or the message's)
// metadata: "agent" (a name), "skills" (names), "priority" and "title".
func choices(req *agentmeshv1.SubmitTaskRequest, metas ...map[string]any) *door.RPCError {
	for _, md := range metas {
		for k, v := range md {
			var ok bool
			switch k {
			case "agent":
				req.Agent, ok = v.(string)
			case "title":
				req.Title, ok = v.(string)
			case "thread_policy":
				var name string
				if name, ok = v.(string); ok {
					p, err := memory.ParseThreadPolicy(name)
					if err != nil {
						return &door.RPCError{Code: door.CodeInvalidParams, Message: "metadata.thread_policy: " + err.Error()}
					}
					req.ThreadPolicy = p
				}
			case "priority":
				var name string
				if name, ok = v.(string); ok {
					p, err := door.ParsePriority(name)
					if err != nil {
						return &door.RPCError{Code: door.CodeInvalidParams, Message: "metadata.priority: " + err.Error()}
					}
					req.Priority = p
				}
			case "skills":
				var list []any
				if list, ok = v.([]any); ok {
					req.RequiredSkills = req.RequiredSkills[:0]
					for _, sk := range list {
						name, isString := sk.(string)
						ok = ok && isString
						req.RequiredSkills = append(req.RequiredSkills, name)
					}
				}
			default:
				ok = true // not agentmesh's: ignored
			}
			if !ok {
				return &door.RPCError{Code: door.CodeInvalidParams, Message: fmt.Sprintf("metadata.%s: wrong type (agent, title, priority: strings; skills: an array of strings)", k)}
			}
		}
	}
	return nil
}

func (s *Server) send(ctx context.Context, req *request) (any, *door.RPCError) {
	p, rerr := readSend(req)
	if rerr != nil {
		return nil, rerr
	}
	t, rerr := s.deliver(ctx, p)
	if rerr != nil {
		return nil, rerr
	}
	if p.blocking() && !final(stateOf(t)) {
		var err error
		if t, err = s.settle(ctx, t); err != nil {
			return nil, s.apiError(err, CodeTaskNotFound)
		}
	}
	return taskOf(t, p.history()), nil
}

// settle waits (at most MaxWait) until the task ends or asks for input,
// and returns it as it stands then. A watch the API refuses or ends (the
// org's watches all taken) ends the wait, as MaxWait does: the task runs,
// and the answer names it (not an error a client would retry).
func (s *Server) settle(ctx context.Context, t *agentmeshv1.Task) (*agentmeshv1.Task, error) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.MaxWait)
	defer cancel()
	stream, err := s.api.Watch(wctx, t.GetId(), t.GetLastEventSeq())
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	for err == nil {
		var resp *agentmeshv1.WatchTaskResponse
		if resp, err = stream.Recv(); err != nil {
			break
		}
		if st := resp.GetStatus(); taskstate.Terminal(st) || (st == agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED && resp.GetEvent().GetApproval() != nil) {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err() // the client left
	}
	if err != nil && !errors.Is(err, io.EOF) && wctx.Err() == nil {
		s.log.Debug("a2a: the wait for a task ended", "task_id", t.GetId(), "err", err)
	}
	return s.api.Get(ctx, t.GetId())
}

func (s *Server) get(ctx context.Context, req *request) (any, *door.RPCError) {
	var p idParams
	if rerr := readID(req, &p); rerr != nil {
		return nil, rerr
	}
	t, err := s.api.Get(ctx, p.ID)
	if err != nil {
		return nil, s.apiError(err, CodeTaskNotFound)
	}
	n := -1
	if p.HistoryLength != nil {
		n = *p.HistoryLength
	}
	return taskOf(t, n), nil
}

func (s *Server) cancel(ctx context.Context, req *request) (any, *door.RPCError) {
	var p idParams
	if rerr := readID(req, &p); rerr != nil {
		return nil, rerr
	}
	t, err := s.api.Cancel(ctx, p.ID, "cancelled by the A2A client (tasks/cancel)")
	if status.Code(err) == codes.FailedPrecondition {
		return nil, &door.RPCError{Code: CodeTaskNotCancelable, Message: status.Convert(err).Message(),
			Data: door.StatusData{Status: "FAILED_PRECONDITION"}}
	}
	if err != nil {
		return nil, s.apiError(err, CodeTaskNotFound)
	}
	return taskOf(t, -1), nil
}

func readID(req *request, p *idParams) *door.RPCError {
	if rerr := decodeParams(req.Params, p); rerr != nil {
		return rerr
	}
	if strings.TrimSpace(p.ID) == "" {
		return &door.RPCError{Code: door.CodeInvalidParams, Message: "id: required (the task's id)"}
	}
	if p.HistoryLength != nil && *p.HistoryLength < 0 {
		return &door.RPCError{Code: door.CodeInvalidParams, Message: "historyLength: must not be negative"}
	}
	return nil
}
