package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TaskTemplate is the URI template of a task as a resource (seed 003's
// subtask:// resource; the API takes such a URI wherever it takes an id).
const TaskTemplate = taskstate.SubtaskScheme + "{id}"

const mimeJSON = "application/json"

func (s *server) addResources() {
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: TaskTemplate, Name: "task", Title: "An agentmesh task",
		Description: "A task of your org as JSON: status, agent, input, result or error, usage, what it waits on. " +
			"Subscribe to be told when it changes.",
		MIMEType: mimeJSON,
	}, s.readTask)
}

// rpcError is an API error as a JSON-RPC error of the protocol's own
// requests; a missing task is MCP's "resource not found".
func (s *server) rpcError(err error, uri string) error {
	if status.Code(err) == codes.NotFound {
		return mcp.ResourceNotFoundError(uri)
	}
	re := door.FromError(s.log, err, door.CodeInvalidParams)
	data, _ := json.Marshal(re.Data)
	return &jsonrpc.Error{Code: re.Code, Message: re.Message, Data: data}
}

// taskID returns the id of a subtask:// URI ("" when it is not one).
func taskID(uri string) string {
	id, ok := strings.CutPrefix(uri, taskstate.SubtaskScheme)
	if !ok || id == "" || strings.ContainsAny(id, "/?#") {
		return ""
	}
	return id
}

func (s *server) readTask(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id := taskID(uri)
	if id == "" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	t, err := s.api.Get(ctx, id)
	if err != nil {
		return nil, s.rpcError(err, uri)
	}
	body, err := json.Marshal(viewOf(t, true))
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mimeJSON, Text: string(body)}}}, nil
}

// listResources lists the org's newest tasks as resources (the cursor is
// ListTasks' page token).
func (s *server) listResources(ctx context.Context, req *mcp.ListResourcesRequest) (*mcp.ListResourcesResult, error) {
	lreq := &agentmeshv1.ListTasksRequest{PageSize: maxListPage}
	if req.Params != nil {
		lreq.PageToken = req.Params.Cursor
	}
	resp, err := s.api.List(ctx, lreq)
	if err != nil {
		return nil, s.rpcError(err, "")
	}
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}, NextCursor: resp.GetNextPageToken(),
		Cacheable: mcp.Cacheable{CacheScope: cacheScopePrivate}} // the SDK's SetCacheable is not on this path
	for _, t := range resp.GetTasks() {
		name := t.GetTitle()
		if name == "" {
			name = door.Cut(firstLine(t.GetInput()), 80)
		}
		out.Resources = append(out.Resources, &mcp.Resource{
			URI: taskstate.SubtaskURI(t.GetId()), Name: t.GetId(), Title: name, MIMEType: mimeJSON,
			Description: "task " + taskstate.Name(t.GetStatus()) + " on agent " + t.GetAgent(),
		})
	}
	return out, nil
}

// subscriptions follows the tasks clients subscribed to: one WatchTask
// per task URI however many sessions subscribed (it runs with the key of
// the session that subscribed first: every subscriber passed GetTask with
// its own key, so all of them see the task), and a resources/updated
// notification to the subscribed sessions on every recorded event. A
// finished task is not followed (it does not change any more); the watch
// ends when the task does, or when its last subscriber leaves.
type subscriptions struct {
	s *server

	mu       sync.Mutex
	closed   bool
	follows  map[string]*following                      // uri → its watch
	sessions map[*mcp.ServerSession]map[string]struct{} // session → uris
}

type following struct {
	cancel context.CancelFunc
	by     map[*mcp.ServerSession]struct{}
}

func newSubscriptions(s *server) *subscriptions {
	return &subscriptions{s: s, follows: map[string]*following{}, sessions: map[*mcp.ServerSession]map[string]struct{}{}}
}

// subscribe is the SDK's SubscribeHandler (resources/subscribe, and
// subscriptions/listen of the 2026-07-28 revision).
func (u *subscriptions) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	id := taskID(uri)
	if id == "" {
		return mcp.ResourceNotFoundError(uri)
	}
	t, err := u.s.api.Get(ctx, id)
	if err != nil {
		return u.s.rpcError(err, uri)
	}
	ss := req.Session
	var watch *watchStart
	if !taskstate.Terminal(t.GetStatus()) && !u.followed(uri) {
		// Started (admitted by the API) before the answer: a watch the API
		// refuses refuses the subscription.
		if watch, err = u.startWatch(ctx, id, t.GetLastEventSeq()); err != nil && !errors.Is(err, io.EOF) {
			return u.s.rpcError(err, uri)
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		watch.stop()
		return &jsonrpc.Error{Code: door.CodeUnavailable, Message: "the server is shutting down"}
	}
	if u.sessions[ss] == nil {
		u.sessions[ss] = map[string]struct{}{}
		go u.endWith(ss)
	}
	u.sessions[ss][uri] = struct{}{}
	f := u.follows[uri]
	switch {
	case f == nil && watch == nil:
		return nil // finished: it does not change any more
	case f == nil:
		f = &following{cancel: watch.cancel, by: map[*mcp.ServerSession]struct{}{}}
		u.follows[uri] = f
		go u.watch(watch.ctx, f, uri, watch.stream)
	default:
		watch.stop() // another subscriber's watch came first
	}
	f.by[ss] = struct{}{}
	return nil
}

// watchStart is a watch the API admitted, not yet followed.
type watchStart struct {
	ctx    context.Context
	cancel context.CancelFunc
	stream agentmeshv1.TaskService_WatchTaskClient
}

// stop ends a watch no one will follow (nil: none).
func (w *watchStart) stop() {
	if w != nil {
		w.cancel()
	}
}

// startWatch opens the watch of a task with the key in ctx, for as long as
// it is followed (not ctx's request); io.EOF: the task has nothing more to
// say.
func (u *subscriptions) startWatch(ctx context.Context, id string, after int64) (*watchStart, error) {
	wctx, cancel := context.WithCancel(door.WithKey(context.Background(), door.KeyFrom(ctx)))
	stream, err := u.s.api.WatchAdmitted(wctx, id, after)
	if err != nil {
		cancel()
		return nil, err
	}
	return &watchStart{ctx: wctx, cancel: cancel, stream: stream}, nil
}

// followed reports whether uri has its watch already.
func (u *subscriptions) followed(uri string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.follows[uri] != nil
}

// unsubscribe is the SDK's UnsubscribeHandler.
func (u *subscriptions) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.dropLocked(req.Session, req.Params.URI)
	return nil
}

func (u *subscriptions) dropLocked(ss *mcp.ServerSession, uri string) {
	delete(u.sessions[ss], uri)
	if f := u.follows[uri]; f != nil {
		delete(f.by, ss)
		if len(f.by) == 0 {
			f.cancel()
			delete(u.follows, uri)
		}
	}
}

// endWith drops a session's subscriptions when it ends.
func (u *subscriptions) endWith(ss *mcp.ServerSession) {
	_ = ss.Wait()
	u.mu.Lock()
	defer u.mu.Unlock()
	for uri := range u.sessions[ss] {
		u.dropLocked(ss, uri)
	}
	delete(u.sessions, ss)
}

// watch follows one task on its admitted stream until it ends (or the
// last subscriber leaves), telling the subscribers of every recorded event.
func (u *subscriptions) watch(ctx context.Context, f *following, uri string, stream agentmeshv1.TaskService_WatchTaskClient) {
	defer func() {
		u.mu.Lock()
		if u.follows[uri] == f {
			delete(u.follows, uri)
		}
		u.mu.Unlock()
		f.cancel()
	}()
	for {
		resp, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				u.s.log.Warn("mcp: subscription watch ended", "uri", uri, "err", err)
			}
			return
		}
		if resp.GetEvent().GetSeq() == 0 {
			continue // streamed model output: not a change of the record
		}
		if err := u.s.mcp.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
			u.s.log.Debug("mcp: resource updated", "uri", uri, "err", err)
		}
	}
}

// close ends every watch and refuses new subscriptions.
func (u *subscriptions) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for uri, f := range u.follows {
		f.cancel()
		delete(u.follows, uri)
	}
}

// following reports how many tasks are followed (for tests).
func (u *subscriptions) following() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.follows)
}
