package e2e

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/pkg/telemetry/otlptest"
)

// BenchmarkTaskTracing runs tasks through the whole stack in this process
// (8 at a time; the scripted model's echo call, then the answer), with
// tracing off and on — exporting over OTLP (http/protobuf, then grpc) to
// an in-process receiver that counts the spans. Besides the time per task
// it reports the allocations per task of the whole process (all five
// services): a cost the machine's other load does not blur
// (docs/benchmarks.md).
//
//	go test -run '^$' -bench TaskTracing -benchtime 400x ./services/e2e/
func BenchmarkTaskTracing(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchTasks(b) })
	for _, proto := range []string{telemetry.ProtocolHTTP, telemetry.ProtocolGRPC} {
		b.Run("on/"+proto, func(b *testing.B) {
			r, err := otlptest.New(true)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			endpoint := r.HTTPURL
			if proto == telemetry.ProtocolGRPC {
				endpoint = "http://" + r.GRPCAddr
			}
			b.Setenv(telemetry.EnvEndpoint, endpoint)
			b.Setenv(telemetry.EnvProtocol, proto)
			shutdown, err := telemetry.Setup(context.Background(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			before := r.Count()
			benchTasks(b)
			shutdown()
			b.ReportMetric(float64(r.Count()-before)/float64(b.N+benchWarmup), "spans/task")
		})
	}
}

const benchWarmup = 20

func benchTasks(b *testing.B) {
	e := start(b, opts{})
	if _, err := e.agents.CreateAgent(b.Context(), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "assistant", Tools: []string{"echo"}}}); err != nil {
		b.Fatal(err)
	}
	run := func(n int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 8 {
			wg.Go(func() {
				for range next {
					if err := runTask(b.Context(), e); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	run(benchWarmup)
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	e.stop()
}

// runTask submits a task and follows it to its end.
func runTask(ctx context.Context, e *env) error {
	resp, err := e.tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: "bench", Agent: "assistant"})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := e.tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: resp.Task.Id})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return errors.New("watch ended before the task")
		}
		if err != nil {
			return err
		}
		if st := ev.GetEvent().GetStatus(); taskstate.Terminal(st) {
			if st != taskstate.Completed {
				return errors.New("task " + taskstate.Name(st))
			}
			return nil
		}
	}
}
