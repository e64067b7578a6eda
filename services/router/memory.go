package router

// What agents keep (issue 30, docs/memory.md) through the API: the
// MemoryService (working state, memories) and the ThreadService. Each RPC
// is checked here as the state service checks it (pkg/memory's rules),
// then forwarded to the state service as a StateOp, MemoryOp or ThreadOp
// naming the caller's org and key: the org is checked where the data lives,
// another org's scope, key, memory or thread is not found.

import (
	"context"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/memory"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// memoryServer implements agentmeshv1.MemoryService.
type memoryServer struct {
	agentmeshv1.UnimplementedMemoryServiceServer
	s *Service
}

// threadServer implements agentmeshv1.ThreadService.
type threadServer struct {
	agentmeshv1.UnimplementedThreadServiceServer
	s *Service
}

// stateCall sends req to the state service's op after check passed.
func stateCall[Req, Resp proto.Message](ctx context.Context, s *Service, c call, req Req, resp Resp) (Resp, error) {
	var zero Resp
	if c.check != nil {
		return zero, toStatus(s.log, c.method, c.check)
	}
	if err := bus.Request(ctx, s.nc, s.names.State(c.op), req, resp); err != nil {
		return zero, toStatus(s.log, c.method, err)
	}
	return resp, nil
}

// apiOrigin is the origin of an API call: the caller's key.
func apiOrigin(ctx context.Context) *busv1.MemoryOrigin {
	return &busv1.MemoryOrigin{KeyName: keyName(ctx)}
}

// keyName is the caller's key's name ("" without one).
func keyName(ctx context.Context) string {
	c, _ := CallerFrom(ctx)
	return c.KeyName
}

// checkTarget checks a scope, its scope id and (unless empty) a key.
func checkTarget(scope, scopeID, key string, needKey bool) error {
	sc, err := memory.ParseScope(scope)
	if err != nil {
		return bus.FieldError("scope", "%v", err)
	}
	if err := memory.CheckScopeID(sc, scopeID); err != nil {
		return bus.FieldError("scope_id", "%v", err)
	}
	if needKey {
		if err := memory.CheckKey(key); err != nil {
			return bus.FieldError("key", "%v", err)
		}
	}
	return nil
}

// checkOptionalScope checks a filter's scope and scope id (both may be
// empty; a scope id needs its scope).
func checkOptionalScope(scope, scopeID string) error {
	if scope == "" {
		if scopeID != "" {
			return bus.FieldError("scope_id", "a scope_id needs its scope")
		}
		return nil
	}
	sc, err := memory.ParseScope(scope)
	if err != nil {
		return bus.FieldError("scope", "%v", err)
	}
	if scopeID != "" || sc == memory.ScopeOrg {
		if err := memory.CheckScopeID(sc, scopeID); err != nil {
			return bus.FieldError("scope_id", "%v", err)
		}
	}
	return nil
}

func stateOp(ctx context.Context, op any) *busv1.StateOp {
	out := &busv1.StateOp{Org: orgFrom(ctx), Origin: apiOrigin(ctx)}
	switch o := op.(type) {
	case *busv1.StateOp_Get:
		out.Op = o
	case *busv1.StateOp_Set:
		out.Op = o
	case *busv1.StateOp_Delete:
		out.Op = o
	case *busv1.StateOp_List:
		out.Op = o
	}
	return out
}

func (m *memoryServer) GetState(ctx context.Context, req *agentmeshv1.GetStateRequest) (*agentmeshv1.GetStateResponse, error) {
	return stateCall(ctx, m.s, call{"GetState", subjects.StateGetState, checkTarget(req.GetScope(), req.GetScopeId(), req.GetKey(), true)},
		stateOp(ctx, &busv1.StateOp_Get{Get: req}), &agentmeshv1.GetStateResponse{})
}

// checkSet checks a write of working state: its target, its value's size
// (refused naming the limit), its TTL.
func checkSet(req *agentmeshv1.SetStateRequest) error {
	if err := checkTarget(req.GetScope(), req.GetScopeId(), req.GetKey(), true); err != nil {
		return err
	}
	if req.GetValue() == nil {
		return bus.FieldError("value", "a value is required (any JSON value)")
	}
	if b, err := protojson.Marshal(req.GetValue()); err != nil {
		return bus.FieldError("value", "not a JSON value: %v", err)
	} else if len(b) > memory.MaxValueBytes {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "value", Message: "the value is over the limit of 65536 bytes (64 KiB) as JSON"}
	}
	if d := req.GetTtl(); d != nil {
		if err := d.CheckValid(); err != nil {
			return bus.FieldError("ttl", "%v", err)
		}
		if _, err := memory.TTL(d.AsDuration()); err != nil {
			return bus.FieldError("ttl", "%v", err)
		}
	}
	if req.IfRevision != nil && req.GetIfRevision() < 0 {
		return bus.FieldError("if_revision", "0 (the key must not exist) or a revision")
	}
	return nil
}

func (m *memoryServer) SetState(ctx context.Context, req *agentmeshv1.SetStateRequest) (*agentmeshv1.SetStateResponse, error) {
	return stateCall(ctx, m.s, call{"SetState", subjects.StateSetState, checkSet(req)},
		stateOp(ctx, &busv1.StateOp_Set{Set: req}), &agentmeshv1.SetStateResponse{})
}

func (m *memoryServer) DeleteState(ctx context.Context, req *agentmeshv1.DeleteStateRequest) (*agentmeshv1.DeleteStateResponse, error) {
	check := checkTarget(req.GetScope(), req.GetScopeId(), req.GetKey(), true)
	if check == nil && req.IfRevision != nil && req.GetIfRevision() <= 0 {
		check = bus.FieldError("if_revision", "a revision (1 or more)")
	}
	return stateCall(ctx, m.s, call{"DeleteState", subjects.StateDeleteState, check},
		stateOp(ctx, &busv1.StateOp_Delete{Delete: req}), &agentmeshv1.DeleteStateResponse{})
}

func (m *memoryServer) ListState(ctx context.Context, req *agentmeshv1.ListStateRequest) (*agentmeshv1.ListStateResponse, error) {
	check := checkTarget(req.GetScope(), req.GetScopeId(), "", false)
	if check == nil {
		check = checkPage(req.GetPageSize())
	}
	return stateCall(ctx, m.s, call{"ListState", subjects.StateListState, check},
		stateOp(ctx, &busv1.StateOp_List{List: req}), &agentmeshv1.ListStateResponse{})
}

func checkPage(n int32) error {
	if n < 0 || n > 1000 {
		return bus.FieldError("page_size", "0 to 1000")
	}
	return nil
}

func memOp(ctx context.Context, op any) *busv1.MemoryOp {
	out := &busv1.MemoryOp{Org: orgFrom(ctx), Origin: apiOrigin(ctx)}
	switch o := op.(type) {
	case *busv1.MemoryOp_Get:
		out.Op = o
	case *busv1.MemoryOp_List:
		out.Op = o
	case *busv1.MemoryOp_Delete:
		out.Op = o
	case *busv1.MemoryOp_Prune:
		out.Op = o
	case *busv1.MemoryOp_Search:
		out.Op = o
	}
	return out
}

func checkMemoryID(id string) error {
	if id == "" || len(id) > 64 || !subjects.ValidToken(id) {
		return bus.FieldError("id", "a memory id is required (as ListMemories gives it)")
	}
	return nil
}

func (m *memoryServer) ListMemories(ctx context.Context, req *agentmeshv1.ListMemoriesRequest) (*agentmeshv1.ListMemoriesResponse, error) {
	check := checkOptionalScope(req.GetScope(), req.GetScopeId())
	if check == nil {
		check = checkPage(req.GetPageSize())
	}
	return stateCall(ctx, m.s, call{"ListMemories", subjects.StateListMemories, check},
		memOp(ctx, &busv1.MemoryOp_List{List: req}), &agentmeshv1.ListMemoriesResponse{})
}

func (m *memoryServer) GetMemory(ctx context.Context, req *agentmeshv1.GetMemoryRequest) (*agentmeshv1.GetMemoryResponse, error) {
	return stateCall(ctx, m.s, call{"GetMemory", subjects.StateGetMemory, checkMemoryID(req.GetId())},
		memOp(ctx, &busv1.MemoryOp_Get{Get: req}), &agentmeshv1.GetMemoryResponse{})
}

func (m *memoryServer) DeleteMemory(ctx context.Context, req *agentmeshv1.DeleteMemoryRequest) (*agentmeshv1.DeleteMemoryResponse, error) {
	resp, err := stateCall(ctx, m.s, call{"DeleteMemory", subjects.StateDeleteMemory, checkMemoryID(req.GetId())},
		memOp(ctx, &busv1.MemoryOp_Delete{Delete: req}), &agentmeshv1.DeleteMemoryResponse{})
	if err == nil {
		m.s.log.Info("memory deleted", "org", orgFrom(ctx), "memory", req.GetId(), "key", keyName(ctx))
	}
	return resp, err
}

func (m *memoryServer) PruneMemories(ctx context.Context, req *agentmeshv1.PruneMemoriesRequest) (*agentmeshv1.PruneMemoriesResponse, error) {
	check := checkOptionalScope(req.GetScope(), req.GetScopeId())
	switch {
	case check != nil:
	case req.GetMaxAge() != nil && (req.GetMaxAge().CheckValid() != nil || req.GetMaxAge().AsDuration() < 0):
		check = bus.FieldError("max_age", "a positive duration")
	case req.GetMaxItems() < 0:
		check = bus.FieldError("max_items", "must not be negative")
	case req.GetMaxAge().AsDuration() == 0 && req.GetMaxItems() == 0:
		check = bus.FieldError("max_age", "give max_age, max_items or both")
	}
	return stateCall(ctx, m.s, call{"PruneMemories", subjects.StatePruneMemories, check},
		memOp(ctx, &busv1.MemoryOp_Prune{Prune: req}), &agentmeshv1.PruneMemoriesResponse{})
}

func (m *memoryServer) SearchMemories(ctx context.Context, req *agentmeshv1.SearchMemoriesRequest) (*agentmeshv1.SearchMemoriesResponse, error) {
	check := checkOptionalScope(req.GetScope(), req.GetScopeId())
	switch {
	case check != nil:
	case len(req.GetEmbedding()) == 0:
		check = bus.FieldError("embedding", "the query's embedding is required")
	case len(req.GetEmbedding()) > memory.MaxDimensions:
		check = bus.FieldError("embedding", "%d dimensions; at most %d", len(req.GetEmbedding()), memory.MaxDimensions)
	case req.GetEmbeddingModel() == "":
		check = bus.FieldError("embedding_model", "the embedding model is required")
	case req.GetK() < 0 || req.GetK() > memory.MaxK:
		check = bus.FieldError("k", "1 to %d (0 means %d)", memory.MaxK, memory.DefaultK)
	}
	if check == nil {
		if _, err := memory.CheckTags(req.GetTags()); err != nil {
			check = bus.FieldError("tags", "%v", err)
		}
	}
	return stateCall(ctx, m.s, call{"SearchMemories", subjects.StateSearchMemories, check},
		memOp(ctx, &busv1.MemoryOp_Search{Search: req}), &agentmeshv1.SearchMemoriesResponse{})
}

// ---- threads ----

func threadOp(ctx context.Context, op any) *busv1.ThreadOp {
	out := &busv1.ThreadOp{Org: orgFrom(ctx), KeyName: keyName(ctx)}
	switch o := op.(type) {
	case *busv1.ThreadOp_List:
		out.Op = o
	case *busv1.ThreadOp_Get:
		out.Op = o
	case *busv1.ThreadOp_Delete:
		out.Op = o
	}
	return out
}

func checkThreadID(field, id string) error {
	if err := memory.CheckThreadID(id); err != nil {
		return bus.FieldError(field, "%v", err)
	}
	return nil
}

func (t *threadServer) ListThreads(ctx context.Context, req *agentmeshv1.ListThreadsRequest) (*agentmeshv1.ListThreadsResponse, error) {
	return stateCall(ctx, t.s, call{"ListThreads", subjects.StateListThreads, checkPage(req.GetPageSize())},
		threadOp(ctx, &busv1.ThreadOp_List{List: req}), &agentmeshv1.ListThreadsResponse{})
}

func (t *threadServer) GetThread(ctx context.Context, req *agentmeshv1.GetThreadRequest) (*agentmeshv1.GetThreadResponse, error) {
	check := checkThreadID("id", req.GetId())
	if check == nil && (req.GetMaxTasks() < 0 || req.GetMaxTasks() > 100) {
		check = bus.FieldError("max_tasks", "0 to 100")
	}
	return stateCall(ctx, t.s, call{"GetThread", subjects.StateGetThread, check},
		threadOp(ctx, &busv1.ThreadOp_Get{Get: req}), &agentmeshv1.GetThreadResponse{})
}

func (t *threadServer) DeleteThread(ctx context.Context, req *agentmeshv1.DeleteThreadRequest) (*agentmeshv1.DeleteThreadResponse, error) {
	return stateCall(ctx, t.s, call{"DeleteThread", subjects.StateDeleteThread, checkThreadID("id", req.GetId())},
		threadOp(ctx, &busv1.ThreadOp_Delete{Delete: req}), &agentmeshv1.DeleteThreadResponse{})
}

// ---- SubmitTask's thread, policy and cache fields ----

// threadTagPrefix is the prefix of the tags the state service gives a
// thread's tasks; a submit may not carry one of its own.
const threadTagPrefix = "thread:"

// checkMemoryFields checks SubmitTask's thread_id, thread_policy and the
// reserved tags.
func checkMemoryFields(req *agentmeshv1.SubmitTaskRequest) error {
	for i, tag := range req.GetTags() {
		if len(tag) >= len(threadTagPrefix) && tag[:len(threadTagPrefix)] == threadTagPrefix {
			return bus.FieldError("tags", "tags[%d] %q: the prefix %q is reserved for the tasks of threads", i, tag, threadTagPrefix)
		}
	}
	if req.GetThreadId() == "" {
		if req.GetThreadPolicy() != agentmeshv1.ThreadPolicy_THREAD_POLICY_UNSPECIFIED {
			return bus.FieldError("thread_policy", "a thread policy needs a thread_id")
		}
		return nil
	}
	if err := checkThreadID("thread_id", req.GetThreadId()); err != nil {
		return err
	}
	switch {
	case req.GetContinueFrom() != "":
		return bus.FieldError("thread_id", "a thread's task continues the thread: not with continue_from")
	case len(req.GetDependsOn()) > 0:
		return bus.FieldError("thread_id", "a thread's task waits on the thread as its policy says: not with depends_on")
	case req.GetThreadPolicy() < 0 || req.GetThreadPolicy() > agentmeshv1.ThreadPolicy_THREAD_POLICY_ROLLBACK:
		return bus.FieldError("thread_policy", "unknown thread policy %d", req.GetThreadPolicy())
	}
	return nil
}

// threadAgent sets a thread submit's agent to the thread's, when the
// request names neither agent nor skills and the thread exists.
func (s *Service) threadAgent(ctx context.Context, req *agentmeshv1.SubmitTaskRequest) error {
	if req.GetThreadId() == "" || req.GetAgent() != "" || len(req.GetRequiredSkills()) > 0 {
		return nil
	}
	var resp agentmeshv1.GetThreadResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateGetThread), threadOp(ctx, &busv1.ThreadOp_Get{Get: &agentmeshv1.GetThreadRequest{Id: req.GetThreadId(), MaxTasks: 1}}), &resp)
	if bus.CodeOf(err) == bus.CodeNotFound {
		return nil // a new thread: the default agent
	}
	if err != nil {
		return err
	}
	req.Agent = resp.GetThread().GetAgent()
	return nil
}

// addMemoryFields copies the submit's thread and cache fields to the task.
func addMemoryFields(task *agentmeshv1.Task, req *agentmeshv1.SubmitTaskRequest) {
	task.ThreadId, task.ThreadPolicy, task.NoCache = req.GetThreadId(), req.GetThreadPolicy(), req.GetNoCache()
}
