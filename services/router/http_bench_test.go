package router

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// BenchmarkSubmitDoors: SubmitTask through the gRPC door and through the
// REST door of the same router (the test bus behind it), one call at a
// time, over loopback. Besides the wall time it reports the CPU of this
// process (client, router and the bus responders together) per call,
// which a shared machine disturbs much less.
//
//	go test -run '^$' -bench SubmitDoors -benchtime 5000x ./services/router/
func BenchmarkSubmitDoors(b *testing.B) {
	e := start(b, Config{HTTPListen: "127.0.0.1:0", APIKeys: map[string]string{"k": "acme:operator"}, OrgRate: -1})
	ctx := withKey(context.Background(), "authorization", "Bearer k")
	hc := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + e.svc.HTTPAddr() + "/v1/tasks"
	body := []byte(`{"input": "hello", "agent": "helper"}`)
	calls := map[string]func() error{
		"grpc": func() error {
			_, err := e.tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: "hello", Agent: "helper"})
			return err
		},
		"rest": func() error {
			req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer k")
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("HTTP %d", resp.StatusCode)
			}
			return nil
		},
	}
	for _, door := range []string{"grpc", "rest"} {
		b.Run(door, func(b *testing.B) {
			call := calls[door]
			for range 100 { // warm connections and caches
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			cpu0 := processCPU()
			b.ResetTimer()
			for range b.N {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is this process's user and system CPU so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
