package main

// What agents keep (issue 30, docs/memory.md): amctl state, memories and
// threads, and submit's --thread, --thread-policy and --no-cache.

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/memory"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// threadFlags are submit's thread and cache flags.
type threadFlags struct {
	thread, policy *string
	noCache        *bool
}

func addThreadFlags(fs *flag.FlagSet) threadFlags {
	return threadFlags{
		thread:  fs.String("thread", "", "put the task in this thread (a conversation): it continues the thread's previous task"),
		policy:  fs.String("thread-policy", "", "when the thread's previous task has not finished: reject (default), enqueue, interrupt or rollback"),
		noCache: fs.Bool("no-cache", false, "run the agent even if an identical task's result is in its result cache"),
	}
}

func (f threadFlags) apply(req *agentmeshv1.SubmitTaskRequest) error {
	p, err := memory.ParseThreadPolicy(*f.policy)
	if err != nil {
		return usagef("--thread-policy: %v", err)
	}
	if p != agentmeshv1.ThreadPolicy_THREAD_POLICY_UNSPECIFIED && *f.thread == "" {
		return usagef("--thread-policy needs --thread")
	}
	req.ThreadId, req.ThreadPolicy, req.NoCache = *f.thread, p, *f.noCache
	return nil
}

// scopeFlags are the scope flags of the state and memory commands.
type scopeFlags struct {
	scope, id *string
}

func addScopeFlags(fs *flag.FlagSet, def string) scopeFlags {
	return scopeFlags{
		scope: fs.String("scope", def, "task-tree, agent or org"),
		id:    fs.String("id", "", "the scope's id: the root task's id (task-tree) or the agent's name (agent)"),
	}
}

func (c *cli) stateCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "state", `Usage: amctl state COMMAND [flags]

Working state: JSON values under keys that agents' tools (state_get,
state_set, state_delete) read and write, per scope — task-tree (--id ROOT
TASK), agent (--id AGENT) or org — each with a TTL and a revision.

Commands:
  get KEY [--scope S --id ID]                         show one entry
  set KEY JSON [--ttl D] [--persist] [--if-revision N]  write one (compare-and-set with --if-revision; 0 = only if absent)
  delete KEY [--if-revision N]                        delete one
  list [--prefix P]                                   list a scope's entries

Run 'amctl state COMMAND -h' for a command's flags.
`, args,
		subcommand{"get", c.stateGet},
		subcommand{"set", c.stateSet},
		subcommand{"delete", c.stateDelete},
		subcommand{"list", c.stateList},
	)
}

func (c *cli) memoryClient() agentmeshv1.MemoryServiceClient {
	return agentmeshv1.NewMemoryServiceClient(c.conn)
}

func (c *cli) printEntry(e *agentmeshv1.StateEntry) error {
	if c.json() {
		return c.printJSON(e, true)
	}
	v, _ := protojson.Marshal(e.GetValue())
	fmt.Fprintf(c.stdout, "%s/%s %s = %s\n  revision %d, expires %s%s, written by %s\n", e.GetScope(), e.GetScopeId(), e.GetKey(), v,
		e.GetRevision(), when(e.GetExpiresAt()), map[bool]string{true: ", persisted"}[e.GetPersisted()], provenance(e.GetProvenance()))
	return nil
}

func provenance(p *agentmeshv1.Provenance) string {
	if p.GetTaskId() != "" {
		return fmt.Sprintf("task %s (agent %s v%d)", p.GetTaskId(), p.GetAgent(), p.GetAgentVersion())
	}
	return "key " + p.GetKeyName()
}

func (c *cli) stateGet(ctx context.Context, args []string) error {
	fs := c.flags("state get", "KEY [--scope S --id ID]", "Show one working-state entry.")
	sc := addScopeFlags(fs.FlagSet, "org")
	pos, err := c.parseConnect(fs, args, "state get", "KEY")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.memoryClient().GetState(cctx, &agentmeshv1.GetStateRequest{Scope: *sc.scope, ScopeId: *sc.id, Key: pos[0]})
	if err != nil {
		return err
	}
	return c.printEntry(resp.GetEntry())
}

// revisionFlag is an optional --if-revision.
type revisionFlag struct {
	set bool
	n   int64
}

func (r *revisionFlag) String() string { return fmt.Sprint(r.n) }
func (r *revisionFlag) Set(v string) error {
	_, err := fmt.Sscan(v, &r.n)
	r.set = err == nil
	return err
}

func (r *revisionFlag) ptr() *int64 {
	if !r.set {
		return nil
	}
	return &r.n
}

func (c *cli) stateSet(ctx context.Context, args []string) error {
	fs := c.flags("state set", "KEY JSON [--scope S --id ID] [--ttl D] [--persist] [--if-revision N]",
		"Write one working-state entry (JSON: any JSON value, e.g. '{\"step\": 3}' or '\"text\"').")
	sc := addScopeFlags(fs.FlagSet, "org")
	ttl := fs.Duration("ttl", 0, "how long the entry lives (default 7 days, at most 365 days)")
	persist := fs.Bool("persist", false, "also write it to the system of record")
	var rev revisionFlag
	fs.Var(&rev, "if-revision", "compare-and-set: the entry's revision must be N (0: it must not exist)")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("state set", pos, "KEY", "JSON"); err != nil {
		return err
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(pos[1]), v); err != nil {
		return usagef("state set: JSON: %v", err)
	}
	req := &agentmeshv1.SetStateRequest{Scope: *sc.scope, ScopeId: *sc.id, Key: pos[0], Value: v, Persist: *persist, IfRevision: rev.ptr()}
	if *ttl != 0 {
		req.Ttl = durationpb.New(*ttl)
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.memoryClient().SetState(cctx, req)
	if err != nil {
		return err
	}
	return c.printEntry(resp.GetEntry())
}

func (c *cli) stateDelete(ctx context.Context, args []string) error {
	fs := c.flags("state delete", "KEY [--scope S --id ID] [--if-revision N]", "Delete one working-state entry.")
	sc := addScopeFlags(fs.FlagSet, "org")
	var rev revisionFlag
	fs.Var(&rev, "if-revision", "the entry's revision must be N")
	pos, err := c.parseConnect(fs, args, "state delete", "KEY")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.memoryClient().DeleteState(cctx, &agentmeshv1.DeleteStateRequest{Scope: *sc.scope, ScopeId: *sc.id, Key: pos[0], IfRevision: rev.ptr()})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	fmt.Fprintf(c.stdout, "deleted %s (revision %d)\n", pos[0], resp.GetEntry().GetRevision())
	return nil
}

func (c *cli) stateList(ctx context.Context, args []string) error {
	fs := c.flags("state list", "[--scope S --id ID] [--prefix P]", "List a scope's working-state entries, by key.")
	sc := addScopeFlags(fs.FlagSet, "org")
	prefix := fs.String("prefix", "", "only keys starting with this")
	token := fs.String("page-token", "", "continue from a previous listing")
	if _, err := c.parseConnect(fs, args, "state list"); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.memoryClient().ListState(cctx, &agentmeshv1.ListStateRequest{Scope: *sc.scope, ScopeId: *sc.id, Prefix: *prefix, PageToken: *token})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tREVISION\tEXPIRES\tPERSISTED\tVALUE")
	for _, e := range resp.GetEntries() {
		v, _ := protojson.Marshal(e.GetValue())
		fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%s\n", e.GetKey(), e.GetRevision(), when(e.GetExpiresAt()), e.GetPersisted(), clip(string(v), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.GetNextPageToken() != "" {
		fmt.Fprintf(c.stdout, "more: --page-token %s\n", resp.GetNextPageToken())
	}
	return nil
}

func (c *cli) memoriesCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "memories", `Usage: amctl memories COMMAND [flags]

Long-term memories: texts agents stored with the remember tool (and find
with recall), with their tags, scope and provenance (task, agent version).

Commands:
  list [--scope S --id ID] [--tag T]                 list memories, newest first
  get ID                                             show one
  delete ID                                          delete one (admin; audited)
  prune [--scope S --id ID] [--max-age D] [--max-items N] [--dry-run]
                                                     apply retention now (admin)

Run 'amctl memories COMMAND -h' for a command's flags.
`, args,
		subcommand{"list", c.memoryList},
		subcommand{"get", c.memoryGet},
		subcommand{"delete", c.memoryDelete},
		subcommand{"prune", c.memoryPrune},
	)
}

func (c *cli) memoryList(ctx context.Context, args []string) error {
	fs := c.flags("memories list", "[--scope S --id ID] [--tag T]", "List your org's memories, newest first.")
	sc := addScopeFlags(fs.FlagSet, "")
	tag := fs.String("tag", "", "only memories carrying this tag")
	limit := fs.Int("limit", 0, "at most this many (1-1000; default 50)")
	token := fs.String("page-token", "", "continue from a previous listing")
	if _, err := c.parseConnect(fs, args, "memories list"); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.memoryClient().ListMemories(cctx, &agentmeshv1.ListMemoriesRequest{Scope: *sc.scope, ScopeId: *sc.id, Tag: *tag, PageSize: int32(*limit), PageToken: *token})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMORY\tSCOPE\tCREATED\tTAGS\tFROM\tTEXT")
	for _, m := range resp.GetMemories() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.GetId(), strings.TrimSuffix(m.GetScope()+"/"+m.GetScopeId(), "/"), when(m.GetCreatedAt()),
			strings.Join(m.GetTags(), ","), provenance(m.GetProvenance()), clip(m.GetText(), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.GetNextPageToken() != "" {
		fmt.Fprintf(c.stdout, "more: --page-token %s\n", resp.GetNextPageToken())
	}
	return nil
}

func (c *cli) memoryGet(ctx context.Context, args []string) error {
	fs := c.flags("memories get", "ID", "Show one memory.")
	pos, err := c.parseConnect(fs, args, "memories get", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.memoryClient().GetMemory(cctx, &agentmeshv1.GetMemoryRequest{Id: pos[0]})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp.GetMemory(), true)
	}
	m := resp.GetMemory()
	fmt.Fprintf(c.stdout, "memory %s (%s/%s), %s, by %s\ntags: %s\nembedding: %s, %d dimensions\n\n%s\n", m.GetId(), m.GetScope(), m.GetScopeId(),
		when(m.GetCreatedAt()), provenance(m.GetProvenance()), strings.Join(m.GetTags(), ", "), m.GetEmbeddingModel(), m.GetDimensions(), m.GetText())
	return nil
}

func (c *cli) memoryDelete(ctx context.Context, args []string) error {
	fs := c.flags("memories delete", "ID", "Delete one memory (admin). The deletion is audited.")
	pos, err := c.parseConnect(fs, args, "memories delete", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	if _, err := c.memoryClient().DeleteMemory(cctx, &agentmeshv1.DeleteMemoryRequest{Id: pos[0]}); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "memory %s deleted\n", pos[0])
	return nil
}

func (c *cli) memoryPrune(ctx context.Context, args []string) error {
	fs := c.flags("memories prune", "[--scope S --id ID] [--max-age D] [--max-items N] [--dry-run]",
		"Delete the memories older than --max-age and, per scope, all but the newest --max-items (admin).")
	sc := addScopeFlags(fs.FlagSet, "")
	age := fs.Duration("max-age", 0, "delete memories older than this")
	items := fs.Int("max-items", 0, "keep at most this many per scope")
	dry := fs.Bool("dry-run", false, "count, delete nothing")
	if _, err := c.parseConnect(fs, args, "memories prune"); err != nil {
		return err
	}
	if *age == 0 && *items == 0 {
		return usagef("memories prune: give --max-age, --max-items or both")
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.memoryClient().PruneMemories(cctx, &agentmeshv1.PruneMemoriesRequest{Scope: *sc.scope, ScopeId: *sc.id,
		MaxAge: durationpb.New(*age), MaxItems: int32(*items), DryRun: *dry})
	if err != nil {
		return err
	}
	verb := "deleted"
	if *dry {
		verb = "would be deleted"
	}
	fmt.Fprintf(c.stdout, "%d memories %s\n", resp.GetDeleted(), verb)
	return nil
}

func (c *cli) threadsCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "threads", `Usage: amctl threads COMMAND [flags]

Threads: conversations of tasks (amctl submit --thread ID), each continuing
the one before, one running at a time.

Commands:
  list          list your org's threads, most recently used first
  get ID        show a thread and its conversation
  delete ID     delete a thread and its tasks (none may be running)

Run 'amctl threads COMMAND -h' for a command's flags.
`, args,
		subcommand{"list", c.threadList},
		subcommand{"get", c.threadGet},
		subcommand{"delete", c.threadDelete},
	)
}

func (c *cli) threadList(ctx context.Context, args []string) error {
	fs := c.flags("threads list", "", "List your org's threads, most recently used first.")
	token := fs.String("page-token", "", "continue from a previous listing")
	if _, err := c.parseConnect(fs, args, "threads list"); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := agentmeshv1.NewThreadServiceClient(c.conn).ListThreads(cctx, &agentmeshv1.ListThreadsRequest{PageToken: *token})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "THREAD\tTASKS\tAGENT\tNEWEST TASK\tUPDATED")
	for _, th := range resp.GetThreads() {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", th.GetId(), th.GetTaskCount(), th.GetAgent(), th.GetHeadTaskId(), when(th.GetUpdatedAt()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.GetNextPageToken() != "" {
		fmt.Fprintf(c.stdout, "more: --page-token %s\n", resp.GetNextPageToken())
	}
	return nil
}

func (c *cli) threadGet(ctx context.Context, args []string) error {
	fs := c.flags("threads get", "ID", "Show a thread and its conversation, oldest first.")
	max := fs.Int("max-tasks", 20, "at most this many of its tasks, the newest (1-100)")
	pos, err := c.parseConnect(fs, args, "threads get", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := agentmeshv1.NewThreadServiceClient(c.conn).GetThread(cctx, &agentmeshv1.GetThreadRequest{Id: pos[0], MaxTasks: int32(*max)})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	th := resp.GetThread()
	fmt.Fprintf(c.stdout, "thread %s: %d tasks, agent %s, updated %s\n", th.GetId(), th.GetTaskCount(), th.GetAgent(), when(th.GetUpdatedAt()))
	for _, t := range resp.GetTasks() {
		out := t.GetResult()
		if out == "" {
			out = t.GetError()
		}
		fmt.Fprintf(c.stdout, "\n%s  %s  %s\n  > %s\n  < %s\n", t.GetId(), taskstate.Name(t.GetStatus()), when(t.GetCreatedAt()), clip(t.GetInput(), 200), clip(out, 200))
	}
	return nil
}

func (c *cli) threadDelete(ctx context.Context, args []string) error {
	fs := c.flags("threads delete", "ID", "Delete a thread and its tasks (none may be running).")
	pos, err := c.parseConnect(fs, args, "threads delete", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := agentmeshv1.NewThreadServiceClient(c.conn).DeleteThread(cctx, &agentmeshv1.DeleteThreadRequest{Id: pos[0]})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "thread %s deleted with its %d tasks\n", pos[0], resp.GetDeletedTasks())
	return nil
}

// agentMemoryFlags are the memory and cache flags of agents create and
// update.
type agentMemoryFlags struct {
	write, read stringList
	cacheTTL    *time.Duration
}

func addAgentMemoryFlags(fs *flag.FlagSet) *agentMemoryFlags {
	m := &agentMemoryFlags{}
	fs.Var(&m.write, "memory-write", "a scope the agent's memory tools may write: task-tree, agent, org (repeat; default task-tree)")
	fs.Var(&m.read, "memory-read", "a scope the agent's memory tools may read (repeat; default task-tree and agent)")
	m.cacheTTL = fs.Duration("cache-ttl", 0, "answer a task from the result of an identical one completed within this long, e.g. 1h (0: no cache)")
	return m
}

// apply sets the setting of flag name on a (other flags: nothing).
func (m *agentMemoryFlags) apply(name string, a *agentmeshv1.Agent) error {
	switch name {
	case "memory-write", "memory-read":
		if a.Memory == nil {
			a.Memory = &agentmeshv1.MemoryPolicy{}
		}
		a.Memory.WriteScopes, a.Memory.ReadScopes = append([]string(nil), m.write...), append([]string(nil), m.read...)
	case "cache-ttl":
		if *m.cacheTTL == 0 {
			a.Cache = nil
			return nil
		}
		if *m.cacheTTL < time.Second || *m.cacheTTL > memory.MaxCacheTTL {
			return usagef("--cache-ttl: %s is out of range (1s to %s; 0 = no cache)", *m.cacheTTL, memory.MaxCacheTTL)
		}
		a.Cache = &agentmeshv1.CachePolicy{Ttl: durationpb.New(*m.cacheTTL)}
	}
	return nil
}
