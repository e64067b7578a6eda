package subjects

// What agents keep (issue 30, docs/memory.md): working state, memories,
// threads and the result cache, all served by the state service.
//
// Each request carries agentmesh.bus.v1.StateOp, MemoryOp or ThreadOp (the
// org acted for, who asks, the public API's request); the replies are the
// public API's responses (remember: bus.v1.RememberResponse).
//
//	<p>.state.kv.{get,set,delete,list}        working state (executor: get,
//	                                          set, delete for its tools;
//	                                          router: all four)
//	<p>.state.memory.{remember,search}        the executor's remember/recall
//	<p>.state.memory.{get,list,delete,prune,search}
//	                                          the router (the API)
//	<p>.state.thread.{list,get,delete}        the router (the API, and the
//	                                          thread's agent at submit)
//
// KV buckets of the state service (memory storage: hot, lost with the NATS
// server; what must survive is persisted to the record):
//
//	<P>_WORKING_STATE  "<org>.<scope>.<scope id>.<key>" → bus.v1.StateRecord,
//	                   each message with its entry's TTL
//	<P>_RESULT_CACHE   "<org>.<cache key>" → the id of the completed task
//	                   whose result answers an identical one, with the
//	                   agent's cache TTL
const (
	StateGetState    = "kv.get"
	StateSetState    = "kv.set"
	StateDeleteState = "kv.delete"
	StateListState   = "kv.list"

	StateRemember       = "memory.remember"
	StateSearchMemories = "memory.search"
	StateGetMemory      = "memory.get"
	StateListMemories   = "memory.list"
	StateDeleteMemory   = "memory.delete"
	StatePruneMemories  = "memory.prune"

	StateListThreads  = "thread.list"
	StateGetThread    = "thread.get"
	StateDeleteThread = "thread.delete"
)

// WorkingStateBucket names the state service's hot working-state bucket.
func (n Names) WorkingStateBucket() string { return n.streamPrefix() + "_WORKING_STATE" }

// ResultCacheBucket names the state service's result-cache bucket.
func (n Names) ResultCacheBucket() string { return n.streamPrefix() + "_RESULT_CACHE" }

// memoryPub is what each identity may publish for what agents keep, added
// to its Permissions.
func (n Names) memoryPub(service string) []string {
	state := func(ops ...string) []string {
		out := make([]string, len(ops))
		for i, op := range ops {
			out[i] = n.State(op)
		}
		return out
	}
	switch service {
	case ServiceState:
		// Its two buckets (created, written, read back), and the purge of
		// one forgotten deletion in the embedded store's memories bucket.
		var out []string
		for _, b := range []string{n.WorkingStateBucket(), n.ResultCacheBucket()} {
			out = append(out, "$KV."+b+".>")
			out = append(out, streamAdmin("KV_"+b)...)
			out = append(out, streamReader("KV_"+b)...)
		}
		return append(out, jsAPI+"STREAM.PURGE.KV_"+n.StoreBucket("memories"))
	case ServiceExecutor:
		return state(StateGetState, StateSetState, StateDeleteState, StateRemember, StateSearchMemories)
	case ServiceRouter:
		return state(StateGetState, StateSetState, StateDeleteState, StateListState,
			StateGetMemory, StateListMemories, StateDeleteMemory, StatePruneMemories, StateSearchMemories,
			StateListThreads, StateGetThread, StateDeleteThread)
	}
	return nil
}
