package mcpserver

import (
	"context"
	"slices"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/metadata"
)

// BenchmarkDelegateVisible: an MCP client's delegate (the Go SDK's client,
// streamable HTTP, a 2025-11-25 session) until GetTask over gRPC finds the
// task — the door's overhead plus the commit (accepted means durable).
// Beside it, the same through gRPC's SubmitTask alone. Reports p50 and p99
// per op. The tasks' text makes the scripted model wait 60 s, so the
// executors are busy but idle while the benchmark runs.
//
//	go test -run XXX -bench DelegateVisible -benchtime 500x ./services/router/mcpserver/
func BenchmarkDelegateVisible(b *testing.B) {
	e := start(b)
	cs, _ := e.connect(b, "a-op", "2025-11-25")
	reader := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+doortest.Secret(b, "a-reader"))
	op := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+doortest.Secret(b, "a-op"))
	visible := func(b *testing.B, id string) {
		if _, err := e.stack.Tasks.GetTask(reader, &agentmeshv1.GetTaskRequest{Id: id}); err != nil {
			b.Fatalf("GetTask %s: %v", id, err)
		}
	}
	b.Run("mcp", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolDelegate,
				Arguments: map[string]any{"task": "slow bench", "agent": doortest.AgentPlain}})
			if err != nil || res.IsError {
				b.Fatalf("delegate: %v %v", err, res)
			}
			var v taskView
			structured(b, res, &v)
			visible(b, v.TaskID)
			lat = append(lat, time.Since(t0))
		}
		report(b, lat)
	})
	b.Run("grpc", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			resp, err := e.stack.Tasks.SubmitTask(op, &agentmeshv1.SubmitTaskRequest{Input: "slow bench", Agent: doortest.AgentPlain})
			if err != nil {
				b.Fatal(err)
			}
			visible(b, resp.Task.Id)
			lat = append(lat, time.Since(t0))
		}
		report(b, lat)
	})
}

func report(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
