package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// BenchmarkMemory (docs/benchmarks.md): on the whole stack as agentmesh dev
// runs it (embedded NATS and store; and on Postgres), what the memory
// tools cost the executor — state_set and state_get as the executor sends
// them to the state service (its bus identity, a task's origin), recall's
// search over MEMORY_BENCH_N memories of one org (100,000 by default; the
// executor's embedding call to the model is not included) — and a cache
// hit, SubmitTask to completed through the gRPC API. Each reports p50 and
// p99.
func BenchmarkMemory(b *testing.B) {
	o := opts{script: memoryScript, state: state.Config{Memory: state.MemoryConfig{MaxPerScope: -1}}}
	b.Run("embedded", func(b *testing.B) { benchMemory(b, o) })
	b.Run("postgres", func(b *testing.B) { o.postgres = pgtest.NewDatabase(b); benchMemory(b, o) })
}

// measureCalls runs call b.N times as sub-benchmark name and reports the
// p50 and p99 of one call.
func measureCalls(b *testing.B, name string, call func(i int) error) {
	b.Run(name, func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := call(i); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
	})
}

func benchMemory(b *testing.B, o opts) {
	e := start(b, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if _, err := e.agents.CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "keeper", Tools: memoryTools, Memory: &agentmeshv1.MemoryPolicy{WriteScopes: []string{"task-tree", "agent"}},
		Cache: &agentmeshv1.CachePolicy{Ttl: durationpb.New(time.Hour)},
	}}); err != nil {
		b.Fatal(err)
	}
	sub, err := e.tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Agent: "keeper", Input: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	task := sub.GetTask()
	creds, err := e.stack.Auth().Creds(subjects.ServiceExecutor)
	if err != nil {
		b.Fatal(err)
	}
	copts, err := busauth.ClientOptions(creds, subjects.ServiceExecutor, nil)
	if err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(e.stack.NATSURL(), copts...)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	names := subjects.Must("")
	request := func(op string, req, resp proto.Message) error {
		return bus.Request(ctx, nc, names.State(op), req, resp)
	}
	origin := func(i int) *busv1.MemoryOrigin {
		return &busv1.MemoryOrigin{TaskId: task.GetId(), Attempt: 1, IdempotencyKey: fmt.Sprintf("%s:bench-%d", task.GetId(), i)}
	}
	measure := func(name string, call func(i int) error) { measureCalls(b, name, call) }
	value := structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"step": structpb.NewNumberValue(3), "note": structpb.NewStringValue("half way")}})
	measure("state_set", func(i int) error {
		return request(subjects.StateSetState, &busv1.StateOp{Org: task.GetOrg(), Origin: origin(i), Op: &busv1.StateOp_Set{Set: &agentmeshv1.SetStateRequest{
			Scope: "agent", Key: fmt.Sprintf("k%03d", i%100), Value: value}}}, &agentmeshv1.SetStateResponse{})
	})
	measure("state_get", func(i int) error {
		return request(subjects.StateGetState, &busv1.StateOp{Org: task.GetOrg(), Origin: origin(i), Op: &busv1.StateOp_Get{Get: &agentmeshv1.GetStateRequest{
			Scope: "agent", Key: fmt.Sprintf("k%03d", i%100)}}}, &agentmeshv1.GetStateResponse{})
	})
	for { // the first "bench" task completes, and fills the cache
		got, err := e.tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: task.GetId()})
		if err != nil {
			b.Fatal(err)
		}
		if got.GetTask().GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	measure("cache_hit_submit", func(i int) error {
		resp, err := e.tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Agent: "keeper", Input: "bench"})
		if err == nil && resp.GetTask().GetCachedFrom() == "" {
			err = fmt.Errorf("submit %d was not answered from the cache (status %v)", i, resp.GetTask().GetStatus())
		}
		return err
	})
	seedMemories(b, ctx, request, task, memoryBenchN())
	query := scriptedmodel.HashEmbed("what is fact number 4242 about the deployment", scriptedmodel.DefaultEmbeddingDimensions)
	measure(fmt.Sprintf("recall_%d", memoryBenchN()), func(i int) error {
		var resp agentmeshv1.SearchMemoriesResponse
		err := request(subjects.StateSearchMemories, &busv1.MemoryOp{Org: task.GetOrg(), Origin: origin(i), Op: &busv1.MemoryOp_Search{Search: &agentmeshv1.SearchMemoriesRequest{
			Embedding: query, EmbeddingModel: "scripted-embedding", K: 5}}}, &resp)
		if err == nil && resp.GetSearched() < int64(memoryBenchN()) {
			err = fmt.Errorf("searched %d memories, want %d", resp.GetSearched(), memoryBenchN())
		}
		return err
	})
}

// memoryBenchN is how many memories the recall benchmark searches
// (MEMORY_BENCH_N, 100,000 by default).
func memoryBenchN() int {
	if n, err := strconv.Atoi(os.Getenv("MEMORY_BENCH_N")); err == nil && n > 0 {
		return n
	}
	return 100000
}

// seedMemories remembers n facts in task's agent's scope, 16 at a time,
// as the executor's remember does (each embedded by the scripted model's
// hashed bag of words, computed here).
func seedMemories(b *testing.B, ctx context.Context, request func(string, proto.Message, proto.Message) error, task *agentmeshv1.Task, n int) {
	words := []string{"deployment", "database", "latency", "customer", "invoice", "cluster", "release", "incident", "backup", "schema",
		"queue", "budget", "contract", "meeting", "roadmap", "sensor", "battery", "forecast", "pipeline", "ticket"}
	var wg sync.WaitGroup
	var failed sync.Once
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				text := fmt.Sprintf("fact number %d about the %s and the %s: value %d", i, words[i%len(words)], words[(i/7)%len(words)], i*31%997)
				err := request(subjects.StateRemember, &busv1.MemoryOp{Org: task.GetOrg(),
					Origin: &busv1.MemoryOrigin{TaskId: task.GetId(), Attempt: 1, IdempotencyKey: fmt.Sprintf("%s:seed-%d", task.GetId(), i)},
					Op: &busv1.MemoryOp_Remember{Remember: &busv1.RememberRequest{Scope: "agent", Text: text,
						Embedding: scriptedmodel.HashEmbed(text, scriptedmodel.DefaultEmbeddingDimensions), EmbeddingModel: "scripted-embedding"}}}, &busv1.RememberResponse{})
				if err != nil {
					failed.Do(func() { b.Errorf("remember %d: %v", i, err) })
				}
			}
		})
	}
	t0 := time.Now()
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	b.Logf("%d memories remembered in %s", n, time.Since(t0).Round(time.Millisecond))
}
