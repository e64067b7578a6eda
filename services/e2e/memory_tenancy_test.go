package e2e

import (
	"fmt"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestMemoryTenancy: every MemoryService and ThreadService RPC, for org B
// against what org A keeps (working state, a memory its agent remembered,
// a thread) and for each role: another org's scope, key, memory or thread
// is not found (or absent from its lists), a role below the RPC's is
// PermissionDenied, a platform key (no org) is refused — and nothing of
// A's changes. On both stores.
func TestMemoryTenancy(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.keysFile = tenancyKeysFile(t)
		o.script = memoryScript
		e := start(t, o)
		mem := agentmeshv1.NewMemoryServiceClient(e.conn)
		threads := agentmeshv1.NewThreadServiceClient(e.conn)

		// Org A: a state entry, a memory its agent remembered, a thread.
		if _, err := mem.SetState(as(t, "a-op"), &agentmeshv1.SetStateRequest{Scope: "org", Key: "plan", Value: structpb.NewStringValue("A's plan"), Persist: true}); err != nil {
			t.Fatalf("A sets state: %v", err)
		}
		if _, err := e.agents.CreateAgent(as(t, "a-admin"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "assistant", Tools: memoryTools, Memory: &agentmeshv1.MemoryPolicy{WriteScopes: []string{"agent"}},
		}}); err != nil {
			t.Fatal(err)
		}
		sub, err := e.tasks.SubmitTask(as(t, "a-op"), &agentmeshv1.SubmitTaskRequest{Agent: "assistant", Input: "remember: A's secret colour is teal", ThreadId: "a-chat"})
		if err != nil {
			t.Fatal(err)
		}
		waitAs(t, e, "a-reader", sub.Task.Id, taskstate.Completed)
		list, err := mem.ListMemories(as(t, "a-reader"), &agentmeshv1.ListMemoriesRequest{})
		if err != nil || len(list.GetMemories()) != 1 {
			t.Fatalf("A lists its memories: %v, %v", list, err)
		}
		memID := list.GetMemories()[0].GetId()
		query := scriptedmodel.HashEmbed("secret colour", scriptedmodel.DefaultEmbeddingDimensions)

		type rpc struct {
			name string
			who  string
			call func(who string) error
			want codes.Code
		}
		set := func(who string) error {
			_, err := mem.SetState(as(t, who), &agentmeshv1.SetStateRequest{Scope: "org", Key: "plan", Value: structpb.NewStringValue("overwritten"), IfRevision: ptr(int64(1))})
			return err
		}
		del := func(who string) error {
			_, err := mem.DeleteState(as(t, who), &agentmeshv1.DeleteStateRequest{Scope: "org", Key: "plan"})
			return err
		}
		delMem := func(who string) error {
			_, err := mem.DeleteMemory(as(t, who), &agentmeshv1.DeleteMemoryRequest{Id: memID})
			return err
		}
		prune := func(who string) error {
			_, err := mem.PruneMemories(as(t, who), &agentmeshv1.PruneMemoriesRequest{MaxItems: 0, MaxAge: durationpb.New(time.Nanosecond)})
			return err
		}
		delThread := func(who string) error {
			_, err := threads.DeleteThread(as(t, who), &agentmeshv1.DeleteThreadRequest{Id: "a-chat"})
			return err
		}
		rpcs := []rpc{
			{"GetState", "b-admin", func(who string) error {
				_, err := mem.GetState(as(t, who), &agentmeshv1.GetStateRequest{Scope: "org", Key: "plan"})
				return err
			}, codes.NotFound},
			{"SetState (compare-and-set on A's revision)", "b-admin", set, codes.Aborted}, // B's own key does not exist: revision 1 is not there
			{"SetState by a reader", "a-reader", set, codes.PermissionDenied},
			{"DeleteState", "b-admin", del, codes.NotFound},
			{"DeleteState by a reader", "a-reader", del, codes.PermissionDenied},
			{"GetMemory", "b-admin", func(who string) error {
				_, err := mem.GetMemory(as(t, who), &agentmeshv1.GetMemoryRequest{Id: memID})
				return err
			}, codes.NotFound},
			{"DeleteMemory", "b-admin", delMem, codes.NotFound},
			{"DeleteMemory by an operator", "a-op", delMem, codes.PermissionDenied},
			{"PruneMemories by an operator", "a-op", prune, codes.PermissionDenied},
			{"GetThread", "b-admin", func(who string) error {
				_, err := threads.GetThread(as(t, who), &agentmeshv1.GetThreadRequest{Id: "a-chat"})
				return err
			}, codes.NotFound},
			{"DeleteThread", "b-admin", delThread, codes.NotFound},
			{"DeleteThread by a reader", "a-reader", delThread, codes.PermissionDenied},
			{"ListState by the platform key", "ops", func(who string) error {
				_, err := mem.ListState(as(t, who), &agentmeshv1.ListStateRequest{Scope: "org"})
				return err
			}, codes.PermissionDenied},
			{"ListMemories by the platform key", "ops", func(who string) error {
				_, err := mem.ListMemories(as(t, who), &agentmeshv1.ListMemoriesRequest{})
				return err
			}, codes.PermissionDenied},
			{"ListThreads by the platform key", "ops", func(who string) error {
				_, err := threads.ListThreads(as(t, who), &agentmeshv1.ListThreadsRequest{})
				return err
			}, codes.PermissionDenied},
		}
		for _, r := range rpcs {
			if err := r.call(r.who); status.Code(err) != r.want {
				t.Errorf("%s as %s: got %v, want %v", r.name, r.who, err, r.want)
			}
		}
		// B's lists and searches see nothing of A's; B's prune deletes
		// nothing of A's.
		if l, err := mem.ListState(as(t, "b-admin"), &agentmeshv1.ListStateRequest{Scope: "org"}); err != nil || len(l.GetEntries()) != 0 {
			t.Errorf("B lists org state: %v, %v", l, err)
		}
		if l, err := mem.ListMemories(as(t, "b-admin"), &agentmeshv1.ListMemoriesRequest{}); err != nil || len(l.GetMemories()) != 0 {
			t.Errorf("B lists memories: %v, %v", l, err)
		}
		if s, err := mem.SearchMemories(as(t, "b-admin"), &agentmeshv1.SearchMemoriesRequest{Embedding: query, EmbeddingModel: "scripted-embedding"}); err != nil || len(s.GetHits()) != 0 {
			t.Errorf("B searches: %v, %v", s, err)
		}
		if p, err := mem.PruneMemories(as(t, "b-admin"), &agentmeshv1.PruneMemoriesRequest{MaxAge: durationpb.New(time.Nanosecond)}); err != nil || p.GetDeleted() != 0 {
			t.Errorf("B prunes everything: %v, %v; want nothing of A's deleted", p, err)
		}
		if l, err := threads.ListThreads(as(t, "b-admin"), &agentmeshv1.ListThreadsRequest{}); err != nil || len(l.GetThreads()) != 0 {
			t.Errorf("B lists threads: %v, %v", l, err)
		}
		// B's message with A's thread id starts B's own thread.
		if _, err := e.agents.CreateAgent(as(t, "b-admin"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "b-echo", Tools: []string{"echo"}}}); err != nil {
			t.Fatal(err)
		}
		bsub, err := e.tasks.SubmitTask(as(t, "b-op"), &agentmeshv1.SubmitTaskRequest{Agent: "b-echo", Input: "hello", ThreadId: "a-chat"})
		if err != nil || bsub.GetTask().GetContinueFrom() != "" {
			t.Errorf("B's message on a thread id A uses: %v, %v; want a new thread of B's", bsub, err)
		}
		// Nothing of A's changed, and A's own calls work.
		if g, err := mem.GetState(as(t, "a-reader"), &agentmeshv1.GetStateRequest{Scope: "org", Key: "plan"}); err != nil || g.GetEntry().GetValue().GetStringValue() != "A's plan" || g.GetEntry().GetRevision() != 1 {
			t.Errorf("A's entry after B's tries: %v, %v", g, err)
		}
		s, err := mem.SearchMemories(as(t, "a-reader"), &agentmeshv1.SearchMemoriesRequest{Embedding: query, EmbeddingModel: "scripted-embedding"})
		if err != nil || len(s.GetHits()) != 1 || s.GetHits()[0].GetMemory().GetId() != memID {
			t.Errorf("A's search after B's tries: %v, %v", s, err)
		}
		bad := make([]float32, 32)
		bad[0] = 1
		if _, err := mem.SearchMemories(as(t, "a-reader"), &agentmeshv1.SearchMemoriesRequest{Embedding: bad, EmbeddingModel: "scripted-embedding"}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("a query of the wrong dimension: got %v, want InvalidArgument", err)
		}
		g, err := threads.GetThread(as(t, "a-reader"), &agentmeshv1.GetThreadRequest{Id: "a-chat"})
		if err != nil || fmt.Sprint(len(g.GetTasks())) != "1" {
			t.Errorf("A's thread after B's tries: %v, %v", g, err)
		}
		if _, err := mem.DeleteMemory(as(t, "a-admin"), &agentmeshv1.DeleteMemoryRequest{Id: memID}); err != nil {
			t.Errorf("A's admin deletes its memory: %v", err)
		}
	})
}

func ptr[T any](v T) *T { return &v }
