package state_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/pgstore"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// onBothStores runs fn against a state service on the embedded store and
// on Postgres.
func onBothStores(t *testing.T, fn func(t *testing.T, r *running)) {
	t.Run("kvstore", func(t *testing.T) { fn(t, startKV(t)) })
	t.Run("pgstore", func(t *testing.T) {
		st, err := pgstore.Open(context.Background(), pgtest.NewDatabase(t))
		if err != nil {
			t.Fatalf("pgstore.Open: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		srv := natstest.Start(t)
		fn(t, startService(t, natstest.ConnectAs(t, srv, subjects.ServiceState), natstest.Connect(t, srv), st))
	})
}

// runningTask creates a task of agent (with its memory policy) and moves
// it to running; parent makes it a sub-task.
func runningTask(t *testing.T, r *running, org, agent, parent string, policy *agentmeshv1.MemoryPolicy) *agentmeshv1.Task {
	t.Helper()
	created := mustCall(t, r.nc, subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{
		Org: org, Agent: agent, Input: "work", ParentTaskId: parent,
		AgentSpec: &agentmeshv1.Agent{Name: agent, Version: 4, Memory: policy},
	}}, &busv1.CreateTaskResponse{})
	id := created.Task.Id
	mustCall(t, r.nc, subjects.StateDispatch, &busv1.TransitionRequest{TaskId: id, From: taskstate.Queued, NextAttempt: true}, &busv1.TransitionResponse{})
	got := mustCall(t, r.nc, subjects.StateStart, &busv1.TransitionRequest{TaskId: id, From: taskstate.Assigned, Attempt: 1, Node: "n1"}, &busv1.TransitionResponse{})
	return got.Task
}

func tool(task *agentmeshv1.Task, call string) *busv1.MemoryOrigin {
	return &busv1.MemoryOrigin{TaskId: task.Id, Attempt: 1, IdempotencyKey: task.Id + ":" + call}
}

func api() *busv1.MemoryOrigin { return &busv1.MemoryOrigin{KeyName: "ops"} }

func setOp(org string, o *busv1.MemoryOrigin, req *agentmeshv1.SetStateRequest) *busv1.StateOp {
	return &busv1.StateOp{Org: org, Origin: o, Op: &busv1.StateOp_Set{Set: req}}
}

func getOp(org string, o *busv1.MemoryOrigin, scope, scopeID, key string) *busv1.StateOp {
	return &busv1.StateOp{Org: org, Origin: o, Op: &busv1.StateOp_Get{Get: &agentmeshv1.GetStateRequest{Scope: scope, ScopeId: scopeID, Key: key}}}
}

func set(t *testing.T, r *running, op *busv1.StateOp) (*agentmeshv1.StateEntry, error) {
	t.Helper()
	resp, err := call(t, r.nc, subjects.StateSetState, op, &agentmeshv1.SetStateResponse{})
	return resp.GetEntry(), err
}

func get(t *testing.T, r *running, op *busv1.StateOp) (*agentmeshv1.StateEntry, error) {
	t.Helper()
	resp, err := call(t, r.nc, subjects.StateGetState, op, &agentmeshv1.GetStateResponse{})
	return resp.GetEntry(), err
}

func wantErr(t *testing.T, what string, err error, want *bus.Error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %s", what, err, want.Code)
	}
}

func i64(n int64) *int64 { return &n }

var writeAgentTree = &agentmeshv1.MemoryPolicy{WriteScopes: []string{"task-tree", "agent"}}

func TestWorkingState(t *testing.T) {
	onBothStores(t, func(t *testing.T, r *running) {
		task := runningTask(t, r, "acme", "writer", "", writeAgentTree)
		// A tool writes its agent's scope; the scope id is its agent's,
		// whatever the request says.
		e, err := set(t, r, setOp("acme", tool(task, "c1"), &agentmeshv1.SetStateRequest{Scope: "agent", ScopeId: "someone-else", Key: "plan.step",
			Value: structpb.NewStringValue("draft"), Persist: true}))
		if err != nil || e.GetRevision() != 1 || e.GetScopeId() != "writer" || e.GetProvenance().GetTaskId() != task.Id || e.GetProvenance().GetAgentVersion() != 4 {
			t.Fatalf("tool set: got %v, %v", e, err)
		}
		got, err := get(t, r, getOp("acme", api(), "agent", "writer", "plan.step"))
		if err != nil || got.GetValue().GetStringValue() != "draft" || !got.GetPersisted() {
			t.Errorf("API get of the tool's entry: got %v, %v", got, err)
		}
		// Isolation: another org, another agent, another scope.
		for _, op := range []*busv1.StateOp{
			getOp("globex", api(), "agent", "writer", "plan.step"),
			getOp("acme", api(), "agent", "reader", "plan.step"),
			getOp("acme", api(), "org", "", "plan.step"),
		} {
			_, err := get(t, r, op)
			wantErr(t, fmt.Sprintf("get %s/%s/%s", op.Org, op.GetGet().Scope, op.GetGet().ScopeId), err, bus.ErrNotFound)
		}
		_, err = get(t, r, getOp("globex", tool(task, "c2"), "agent", "", "plan.step"))
		wantErr(t, "a tool call naming another org", err, bus.ErrNotFound)
		// Policy: the agent may not write the org scope (nor read it).
		_, err = set(t, r, setOp("acme", tool(task, "c3"), &agentmeshv1.SetStateRequest{Scope: "org", Key: "k", Value: structpb.NewBoolValue(true)}))
		wantErr(t, "tool set into org", err, bus.ErrPermissionDenied)
		_, err = get(t, r, getOp("acme", tool(task, "c4"), "org", "", "k"))
		wantErr(t, "tool get of org", err, bus.ErrPermissionDenied)
		// Compare-and-set.
		_, err = set(t, r, setOp("acme", api(), &agentmeshv1.SetStateRequest{Scope: "agent", ScopeId: "writer", Key: "plan.step", Value: structpb.NewStringValue("x"), IfRevision: i64(0)}))
		wantErr(t, "create-only set of an existing key", err, bus.ErrConflict)
		e, err = set(t, r, setOp("acme", api(), &agentmeshv1.SetStateRequest{Scope: "agent", ScopeId: "writer", Key: "plan.step", Value: structpb.NewStringValue("final"), IfRevision: i64(1)}))
		if err != nil || e.GetRevision() != 2 || !e.GetPersisted() || e.GetProvenance().GetKeyName() != "ops" {
			t.Errorf("set at revision 1: got %v, %v; want revision 2, still persisted", e, err)
		}
		_, err = set(t, r, setOp("acme", api(), &agentmeshv1.SetStateRequest{Scope: "agent", ScopeId: "writer", Key: "plan.step", Value: structpb.NewStringValue("late"), IfRevision: i64(1)}))
		wantErr(t, "set at a stale revision", err, bus.ErrConflict)
		// The same tool call again (an attempt resumed after a crash)
		// writes nothing twice: it gets the entry it wrote.
		t2 := runningTask(t, r, "acme", "writer", "", writeAgentTree)
		first, err := set(t, r, setOp("acme", tool(t2, "c9"), &agentmeshv1.SetStateRequest{Scope: "task-tree", Key: "n", Value: structpb.NewNumberValue(1)}))
		if err != nil {
			t.Fatal(err)
		}
		again, err := set(t, r, setOp("acme", tool(t2, "c9"), &agentmeshv1.SetStateRequest{Scope: "task-tree", Key: "n", Value: structpb.NewNumberValue(1)}))
		if err != nil || again.GetRevision() != first.GetRevision() {
			t.Errorf("the same call again: got revision %d, %v; want %d", again.GetRevision(), err, first.GetRevision())
		}
		// Size limit, named.
		big := structpb.NewStringValue(strings.Repeat("x", 70<<10))
		_, err = set(t, r, setOp("acme", api(), &agentmeshv1.SetStateRequest{Scope: "org", Key: "big", Value: big}))
		if !errors.Is(err, bus.ErrResourceExhausted) || !strings.Contains(err.Error(), "65536") {
			t.Errorf("a 70 KiB value: got %v, want resource_exhausted naming 65536", err)
		}
		// Delete.
		del, err := call(t, r.nc, subjects.StateDeleteState, &busv1.StateOp{Org: "acme", Origin: api(),
			Op: &busv1.StateOp_Delete{Delete: &agentmeshv1.DeleteStateRequest{Scope: "agent", ScopeId: "writer", Key: "plan.step", IfRevision: i64(2)}}}, &agentmeshv1.DeleteStateResponse{})
		if err != nil || del.GetEntry().GetValue().GetStringValue() != "final" {
			t.Errorf("delete: got %v, %v", del, err)
		}
		_, err = get(t, r, getOp("acme", api(), "agent", "writer", "plan.step"))
		wantErr(t, "get after delete", err, bus.ErrNotFound)
	})
}

// The hot bucket lost (a NATS restart): persisted entries are read back
// from the record, the others are gone; a TTL ends an entry.
func TestWorkingStatePersistAndTTL(t *testing.T) {
	onBothStores(t, func(t *testing.T, r *running) {
		for key, persist := range map[string]bool{"kept": true, "hot": false} {
			if _, err := set(t, r, setOp("acme", api(), &agentmeshv1.SetStateRequest{Scope: "org", Key: key, Value: structpb.NewStringValue(key), Persist: persist})); err != nil {
				t.Fatal(err)
			}
		}
		js, _ := jetstream.New(r.nc)
		st, err := js.Stream(context.Background(), "KV_"+names.WorkingStateBucket())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Purge(context.Background()); err != nil {
			t.Fatal(err)
		}
		if e, err := get(t, r, getOp("acme", api(), "org", "", "kept")); err != nil || e.GetValue().GetStringValue() != "kept" || e.GetRevision() != 1 {
			t.Errorf("persisted entry after the hot copy was lost: got %v, %v", e, err)
		}
		_, err = get(t, r, getOp("acme", api(), "org", "", "hot"))
		wantErr(t, "hot-only entry after the hot copy was lost", err, bus.ErrNotFound)
		// The next write continues the revisions.
		if e, err := set(t, r, setOp("acme", api(), &agentmeshv1.SetStateRequest{Scope: "org", Key: "kept", Value: structpb.NewStringValue("v2"), IfRevision: i64(1)})); err != nil || e.GetRevision() != 2 {
			t.Errorf("set after reload: got %v, %v", e, err)
		}
		list, err := call(t, r.nc, subjects.StateListState, &busv1.StateOp{Org: "acme", Origin: api(),
			Op: &busv1.StateOp_List{List: &agentmeshv1.ListStateRequest{Scope: "org"}}}, &agentmeshv1.ListStateResponse{})
		if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetKey() != "kept" {
			t.Errorf("list: got %v, %v; want [kept]", list.GetEntries(), err)
		}
		if _, err := set(t, r, setOp("acme", api(), &agentmeshv1.SetStateRequest{Scope: "org", Key: "brief", Value: structpb.NewStringValue("x"),
			Ttl: durationpb.New(time.Second), Persist: true})); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, func() error {
			if _, err := get(t, r, getOp("acme", api(), "org", "", "brief")); !errors.Is(err, bus.ErrNotFound) {
				return fmt.Errorf("an entry with a 1s TTL: got %v, want not_found", err)
			}
			return nil
		})
		_, err = set(t, r, setOp("acme", api(), &agentmeshv1.SetStateRequest{Scope: "org", Key: "x", Value: structpb.NewStringValue("x"), Ttl: durationpb.New(400 * 24 * time.Hour)}))
		wantErr(t, "a TTL over a year", err, bus.ErrInvalidArgument)
	})
}

func rememberOp(org string, o *busv1.MemoryOrigin, scope, text string, tags ...string) *busv1.MemoryOp {
	return &busv1.MemoryOp{Org: org, Origin: o, Op: &busv1.MemoryOp_Remember{Remember: &busv1.RememberRequest{
		Scope: scope, Text: text, Tags: tags, Embedding: scriptedmodel.HashEmbed(text, 64), EmbeddingModel: "scripted"}}}
}

func searchOp(org string, o *busv1.MemoryOrigin, scope, query string, k int32) *busv1.MemoryOp {
	return &busv1.MemoryOp{Org: org, Origin: o, Op: &busv1.MemoryOp_Search{Search: &agentmeshv1.SearchMemoriesRequest{
		Scope: scope, Embedding: scriptedmodel.HashEmbed(query, 64), EmbeddingModel: "scripted", K: k}}}
}

func hitTexts(resp *agentmeshv1.SearchMemoriesResponse) []string {
	var out []string
	for _, h := range resp.GetHits() {
		out = append(out, h.GetMemory().GetText())
	}
	return out
}

func TestRememberAndRecall(t *testing.T) {
	onBothStores(t, func(t *testing.T, r *running) {
		writer := runningTask(t, r, "acme", "writer", "", writeAgentTree)
		for i, fact := range []string{
			"The user's favourite colour is green.",
			"The user has a cat called Miso.",
			"Production runs Postgres 15 on two replicas.",
		} {
			resp, err := call(t, r.nc, subjects.StateRemember, rememberOp("acme", tool(writer, fmt.Sprint("r", i)), "agent", fact, "fact"), &busv1.RememberResponse{})
			if err != nil || !resp.GetCreated() || resp.GetMemory().GetScopeId() != "writer" || resp.GetMemory().GetProvenance().GetTaskId() != writer.Id {
				t.Fatalf("remember %q: got %v, %v", fact, resp, err)
			}
		}
		// The same call again writes nothing twice.
		again, err := call(t, r.nc, subjects.StateRemember, rememberOp("acme", tool(writer, "r0"), "agent", "The user's favourite colour is green."), &busv1.RememberResponse{})
		if err != nil || again.GetCreated() {
			t.Errorf("remember by the same call again: got created=%v, %v", again.GetCreated(), err)
		}
		// The next task of the agent recalls it: the relevant one first.
		next := runningTask(t, r, "acme", "writer", "", nil)
		res, err := call(t, r.nc, subjects.StateSearchMemories, searchOp("acme", tool(next, "q"), "", "what is my favourite colour", 2), &agentmeshv1.SearchMemoriesResponse{})
		if got := hitTexts(res); err != nil || len(got) == 0 || got[0] != "The user's favourite colour is green." || res.GetSearched() != 3 {
			t.Errorf("recall: got %v (searched %d), %v", got, res.GetSearched(), err)
		}
		// Another agent of the org, another org: nothing of the writer's.
		other := runningTask(t, r, "acme", "reader", "", nil)
		if res, err := call(t, r.nc, subjects.StateSearchMemories, searchOp("acme", tool(other, "q"), "", "favourite colour", 5), &agentmeshv1.SearchMemoriesResponse{}); err != nil || len(res.GetHits()) != 0 {
			t.Errorf("another agent's recall: got %v, %v; want nothing", hitTexts(res), err)
		}
		if res, err := call(t, r.nc, subjects.StateSearchMemories, searchOp("globex", api(), "", "favourite colour", 5), &agentmeshv1.SearchMemoriesResponse{}); err != nil || len(res.GetHits()) != 0 {
			t.Errorf("another org's search: got %v, %v; want nothing", hitTexts(res), err)
		}
		// Policy: remember into org is refused; a sub-task whose agent
		// may write org, under a parent that may not, may not either.
		_, err = call(t, r.nc, subjects.StateRemember, rememberOp("acme", tool(writer, "x1"), "org", "company fact"), &busv1.RememberResponse{})
		wantErr(t, "remember into org", err, bus.ErrPermissionDenied)
		sub := runningTask(t, r, "acme", "broad", writer.Id, &agentmeshv1.MemoryPolicy{WriteScopes: []string{"org"}, ReadScopes: []string{"org"}})
		_, err = call(t, r.nc, subjects.StateRemember, rememberOp("acme", tool(sub, "x2"), "org", "company fact"), &busv1.RememberResponse{})
		wantErr(t, "a sub-task's remember into a scope its parent may not write", err, bus.ErrPermissionDenied)
		// Bad input: the wrong dimension, too much text.
		bad := rememberOp("acme", tool(writer, "x3"), "agent", "short")
		bad.GetRemember().Embedding = scriptedmodel.HashEmbed("short", 32)
		_, err = call(t, r.nc, subjects.StateRemember, bad, &busv1.RememberResponse{})
		if !errors.Is(err, bus.ErrInvalidArgument) || !strings.Contains(err.Error(), "have 64") {
			t.Errorf("an embedding of 32 dimensions among 64: got %v", err)
		}
		q := searchOp("acme", api(), "", "colour", 3)
		q.GetSearch().Embedding = scriptedmodel.HashEmbed("colour", 32)
		_, err = call(t, r.nc, subjects.StateSearchMemories, q, &agentmeshv1.SearchMemoriesResponse{})
		wantErr(t, "a query of the wrong dimension", err, bus.ErrInvalidArgument)
		_, err = call(t, r.nc, subjects.StateRemember, rememberOp("acme", tool(writer, "x4"), "agent", strings.Repeat("word ", 2000)), &busv1.RememberResponse{})
		if !errors.Is(err, bus.ErrResourceExhausted) || !strings.Contains(err.Error(), "8192") {
			t.Errorf("a 10 KB memory: got %v, want resource_exhausted naming 8192", err)
		}
		// The API lists, deletes (then recall no longer finds it) and prunes.
		list, err := call(t, r.nc, subjects.StateListMemories, &busv1.MemoryOp{Org: "acme", Origin: api(),
			Op: &busv1.MemoryOp_List{List: &agentmeshv1.ListMemoriesRequest{Scope: "agent", ScopeId: "writer", Tag: "fact"}}}, &agentmeshv1.ListMemoriesResponse{})
		if err != nil || len(list.GetMemories()) != 3 {
			t.Fatalf("list: got %d, %v; want 3", len(list.GetMemories()), err)
		}
		colour := list.GetMemories()[2] // newest first
		_, err = call(t, r.nc, subjects.StateDeleteMemory, &busv1.MemoryOp{Org: "globex", Origin: api(),
			Op: &busv1.MemoryOp_Delete{Delete: &agentmeshv1.DeleteMemoryRequest{Id: colour.GetId()}}}, &agentmeshv1.DeleteMemoryResponse{})
		wantErr(t, "delete by another org", err, bus.ErrNotFound)
		if _, err := call(t, r.nc, subjects.StateDeleteMemory, &busv1.MemoryOp{Org: "acme", Origin: api(),
			Op: &busv1.MemoryOp_Delete{Delete: &agentmeshv1.DeleteMemoryRequest{Id: colour.GetId()}}}, &agentmeshv1.DeleteMemoryResponse{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		res, _ = call(t, r.nc, subjects.StateSearchMemories, searchOp("acme", tool(next, "q2"), "", "what is my favourite colour", 5), &agentmeshv1.SearchMemoriesResponse{})
		if got := hitTexts(res); len(got) != 2 || strings.Contains(strings.Join(got, "|"), "green") {
			t.Errorf("recall after delete: got %v", got)
		}
		pr, err := call(t, r.nc, subjects.StatePruneMemories, &busv1.MemoryOp{Org: "acme", Origin: api(),
			Op: &busv1.MemoryOp_Prune{Prune: &agentmeshv1.PruneMemoriesRequest{Scope: "agent", MaxItems: 1}}}, &agentmeshv1.PruneMemoriesResponse{})
		if err != nil || pr.GetDeleted() != 1 {
			t.Errorf("prune to 1 per scope: got %v, %v; want 1 deleted", pr, err)
		}
		_, err = call(t, r.nc, subjects.StateListMemories, &busv1.MemoryOp{Org: "acme", Origin: tool(writer, "l"),
			Op: &busv1.MemoryOp_List{List: &agentmeshv1.ListMemoriesRequest{}}}, &agentmeshv1.ListMemoriesResponse{})
		wantErr(t, "a tool listing memories", err, bus.ErrPermissionDenied)
	})
}
