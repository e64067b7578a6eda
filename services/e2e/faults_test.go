package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/grpcretry"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// With Postgres stopped, the API answers UNAVAILABLE with a RetryInfo
// detail (not INTERNAL), so a client that retries UNAVAILABLE — amctl's
// interceptor, grpcretry.Unary — keeps trying and succeeds once Postgres is
// back; a submit retried that way with an idempotency key creates one task.
func TestPostgresDownIsUnavailableAndRetrySucceeds(t *testing.T) {
	c := pgtest.Own(t)
	if err := c.CreateDatabase("faults"); err != nil {
		t.Fatal(err)
	}
	e := start(t, opts{postgres: c.URL("faults")})
	e.createAgent(t, "helper", "general")
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "before the outage", Agent: "helper"})
	e.waitStatus(t, task.Id, taskstate.Completed, 60*time.Second)

	if err := c.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = c.Resume()
		}
	})

	// A plain client sees UNAVAILABLE with retry info, at once.
	_, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: task.Id})
	if status.Code(err) != codes.Unavailable || grpcretry.Pushback(err) <= 0 {
		t.Fatalf("GetTask with Postgres down: got %v (retry info %v), want Unavailable with retry info", err, grpcretry.Pushback(err))
	}
	_, serr := e.tasks.SubmitTask(ctxT(t), &agentmeshv1.SubmitTaskRequest{Input: "during the outage", Agent: "helper"})
	if status.Code(serr) != codes.Unavailable {
		t.Fatalf("SubmitTask with Postgres down: got %v, want Unavailable", serr)
	}
	// The caller is told the database is unavailable, not its user, name
	// or address (those are the operator's).
	pgURL, perr := url.Parse(c.URL("faults"))
	if perr != nil {
		t.Fatal(perr)
	}
	for _, got := range []error{err, serr} {
		msg := status.Convert(got).Message()
		for _, secret := range []string{pgURL.User.Username(), "faults", pgURL.Hostname(), pgURL.Port()} {
			if strings.Contains(msg, secret) {
				t.Errorf("UNAVAILABLE message %q names %q of the database", msg, secret)
			}
		}
	}

	// A retrying client (amctl's interceptor) keeps trying while Postgres
	// is down and succeeds after it returns.
	var tries atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		tries.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient(e.stack.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpcretry.Unary(bus.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Tries: 1000}), count))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	type result struct {
		resp *agentmeshv1.SubmitTaskResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		resp, err := agentmeshv1.NewTaskServiceClient(conn).SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{
			Input: "across the outage", Agent: "helper", IdempotencyKey: "faults-1",
		})
		done <- result{resp, err}
	}()
	poll.Until(t, 60*time.Second, func() error {
		if n := tries.Load(); n < 3 {
			return fmt.Errorf("%d tries so far", n)
		}
		return nil
	})
	if err := c.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	var res result
	select {
	case res = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the retried submit did not return")
	}
	if res.err != nil {
		t.Fatalf("retried submit: %v after %d tries", res.err, tries.Load())
	}
	e.waitStatus(t, res.resp.GetTask().GetId(), taskstate.Completed, 60*time.Second)
	list, err := e.tasks.ListTasks(ctxT(t), &agentmeshv1.ListTasksRequest{PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tk := range list.Tasks {
		if tk.Input == "across the outage" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d tasks from the retried submit, want 1", n)
	}
}
