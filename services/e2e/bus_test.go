package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// syncBuffer is a log sink tests read while the stack writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// busClient is a NATS connection to the stack's loopback listener whose
// asynchronous errors (the server's refusals) are collected.
type busClient struct {
	nc   *nats.Conn
	mu   sync.Mutex
	errs []error
}

func (c *busClient) refused(subject string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range c.errs {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
			return nil
		}
	}
	return fmt.Errorf("no permissions violation for %q yet (errors: %v)", subject, c.errs)
}

func (c *busClient) clean() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) > 0 {
		return fmt.Errorf("refused: %v", c.errs)
	}
	return nil
}

// dial connects to the stack's NATS port with creds (nil: none) as
// service (its inbox prefix; "" for none).
func dial(t testing.TB, url string, creds []byte, service string) (*busClient, error) {
	t.Helper()
	c := &busClient{}
	opts := []nats.Option{nats.Name(t.Name()), nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		c.mu.Lock()
		c.errs = append(c.errs, err)
		c.mu.Unlock()
	})}
	if creds != nil {
		auth, err := busauth.ClientOptions(creds, service, nil)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, auth...)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	return c, nil
}

func dialAs(t *testing.T, e *env, service string) *busClient {
	t.Helper()
	creds, err := e.stack.Auth().Creds(service)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dial(t, e.stack.NATSURL(), creds, service)
	if err != nil {
		t.Fatalf("connect as %s: %v", service, err)
	}
	return c
}

// Connections without credentials or with wrong ones are refused, and each
// refusal is logged once per client however often it retries.
func TestBusRefusesUnauthenticated(t *testing.T) {
	logs := &syncBuffer{}
	e := start(t, opts{log: logs})
	e.createAgent(t, "assistant")
	url := e.stack.NATSURL()

	names := subjects.Must("")
	other, err := busauth.New(names) // another operator: a forged identity
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := other.Creds(subjects.ServiceRouter)
	real, _ := e.stack.Auth().Creds(subjects.ServiceRouter)
	// The real JWT with another key's seed: the nonce signature fails.
	otherSeed, _ := other.Creds(subjects.ServiceState)
	mixed := []byte(strings.SplitAfter(string(real), "------END NATS USER JWT------")[0] + strings.SplitAfterN(string(otherSeed), "------END NATS USER JWT------", 2)[1])

	for _, tc := range []struct {
		name  string
		creds []byte
	}{
		{"no credentials", nil},
		{"another operator's credentials", forged},
		{"a real JWT with the wrong seed", mixed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 { // a client that keeps retrying
				if _, err := dial(t, url, tc.creds, ""); err == nil {
					t.Fatal("connected, want refused")
				} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
					t.Fatalf("got %v, want an authorization violation", err)
				}
			}
		})
	}
	poll.Until(t, 10*time.Second, func() error {
		if n := strings.Count(logs.String(), "authentication error"); n == 0 {
			return errors.New("no refusal logged yet")
		}
		return nil
	})
	// The server names a refused client by host and port only: all nine
	// tries come from 127.0.0.1, so one line.
	if n := strings.Count(logs.String(), "authentication error"); n != 1 {
		t.Errorf("refusals logged %d times for 9 tries from one host, want once:\n%s", n, logs.String())
	}
	// The services still work.
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "still fine"})
	e.waitStatus(t, task.Id, taskstate.Completed, 60*time.Second)
}

// With the router's, scheduler's or executor's identity a forged
// transition (another service's intent, or the old generic one) and a read
// of another service's subjects are refused by the server; nothing is
// changed or consumed, while each identity's own subjects work.
func TestBusPermissions(t *testing.T) {
	e := start(t, opts{})
	e.createAgent(t, "assistant")
	names := subjects.Must("")
	// A task that stays running (its model turn takes 30 s).
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow and steady"})
	running := e.waitStatus(t, task.Id, taskstate.Running, 60*time.Second)

	approve := &busv1.TransitionRequest{TaskId: task.Id, Org: running.Org, From: taskstate.Blocked, To: taskstate.Queued,
		Approval: &agentmeshv1.Approval{Id: task.Id + "-a1", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED}}
	complete := &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Running, To: taskstate.Completed, Attempt: running.Attempt, Result: "forged"}
	cancel := &busv1.TransitionRequest{TaskId: task.Id, Org: running.Org, To: taskstate.Cancelled}
	generic := &busv1.TransitionRequest{TaskId: task.Id, To: taskstate.Cancelled}

	type attempt struct {
		what    string
		subject string
		pub     *busv1.TransitionRequest // publish this; else subscribe
	}
	cases := map[string][]attempt{
		subjects.ServiceRouter: {
			{"the old generic transition", names.State("task.transition"), generic},
			{"the executor's complete", names.State(subjects.StateComplete), complete},
			{"the scheduler's dispatch", names.State(subjects.StateDispatch), complete},
			{"read the work queue", names.WorkAll(), nil},
			{"read state's requests", names.StateAll(), nil},
			{"read the executor's replies", subjects.InboxPrefix(subjects.ServiceExecutor) + ".>", nil},
			{"read the store's KV bucket", "$JS.API.DIRECT.GET.KV_" + names.StoreBucket("tasks") + ".$KV." + names.StoreBucket("tasks") + "." + task.Id, generic},
		},
		subjects.ServiceScheduler: {
			{"the router's approval decision", names.State(subjects.StateDecide), approve},
			{"the router's cancel", names.State(subjects.StateCancel), cancel},
			{"the executor's complete", names.State(subjects.StateComplete), complete},
			{"read the router's replies", subjects.InboxPrefix(subjects.ServiceRouter) + ".>", nil},
			{"read the registry's requests", names.RegistryAll(), nil},
			{"pull the executors' work", "$JS.API.CONSUMER.MSG.NEXT." + names.WorkStream() + "." + subjects.ConsumerExecutors, generic},
		},
		subjects.ServiceExecutor: {
			{"the router's approval decision", names.State(subjects.StateDecide), approve},
			{"the router's cancel", names.State(subjects.StateCancel), cancel},
			{"the scheduler's dispatch", names.State(subjects.StateDispatch), complete},
			{"create a task", names.State(subjects.StateCreateTask), generic},
			{"read every event", names.Events(), nil},
			{"read state's requests", names.StateAll(), nil},
			{"pull the scheduler's events", "$JS.API.CONSUMER.MSG.NEXT." + names.EventsStream() + "." + subjects.ConsumerScheduler, generic},
			{"create a stream", "$JS.API.STREAM.CREATE.EVIL", generic},
		},
	}
	for service, attempts := range cases {
		t.Run(service, func(t *testing.T) {
			c := dialAs(t, e, service)
			for _, a := range attempts {
				if a.pub != nil {
					msg, err := bus.NewMsg(context.Background(), a.subject, a.pub)
					if err != nil {
						t.Fatal(err)
					}
					msg.Reply = c.nc.NewRespInbox()
					if err := c.nc.PublishMsg(msg); err != nil {
						t.Fatal(err)
					}
				} else if _, err := c.nc.SubscribeSync(a.subject); err != nil {
					t.Fatal(err)
				}
				_ = c.nc.Flush()
				poll.Until(t, 5*time.Second, func() error {
					if err := c.refused(a.subject); err != nil {
						return fmt.Errorf("%s: %w", a.what, err)
					}
					return nil
				})
			}
		})
	}
	// Nothing changed: the task still runs its first attempt, its history
	// has no forged event.
	got, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: task.Id})
	if err != nil {
		t.Fatal(err)
	}
	if got.Task.Status != taskstate.Running || got.Task.Attempt != running.Attempt || got.Task.Result != "" {
		t.Errorf("after forged transitions: %s attempt %d result %q, want running attempt %d", taskstate.Name(got.Task.Status), got.Task.Attempt, got.Task.Result, running.Attempt)
	}
	for _, ev := range e.history(t, task.Id) {
		if ev.Seq > running.LastEventSeq && ev.Type != agentmeshv1.EventType_EVENT_TYPE_STEP {
			t.Errorf("history grew by %v after the forged transitions", ev)
		}
	}

	// Each identity's own subjects work (the whole stack runs on them; this
	// checks the test's own detection has no false positives).
	for _, own := range []struct{ service, subject string }{
		{subjects.ServiceRouter, names.TaskEvents(running.Org, task.Id)},
		{subjects.ServiceExecutor, names.TaskEventsOfType("cancelled")},
	} {
		c := dialAs(t, e, own.service)
		if _, err := c.nc.SubscribeSync(own.subject); err != nil {
			t.Fatal(err)
		}
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		var resp busv1.GetTaskResponse
		if own.service == subjects.ServiceRouter {
			if err := bus.Request(ctxT(t), c.nc, names.State(subjects.StateGetTask), &busv1.GetTaskRequest{Id: task.Id, Org: running.Org}, &resp); err != nil {
				t.Errorf("router's own task.get: %v", err)
			}
		}
		if err := c.clean(); err != nil {
			t.Errorf("%s on its own subjects: %v", own.service, err)
		}
	}
}

func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
}

// An org's tap sees its own org's events, as JSON, and none of another
// org's; it can subscribe to nothing else and publish nothing.
func TestTapSeesOnlyItsOrg(t *testing.T) {
	e := start(t, opts{apiKeys: map[string]string{"key-acme": "acme", "key-globex": "globex"}})
	taps := agentmeshv1.NewTapServiceClient(e.conn)
	// Agents belong to orgs: each org defines its own default agent.
	for _, key := range []string{"key-acme", "key-globex"} {
		if _, err := e.agents.CreateAgent(withKey(ctxT(t), key), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "assistant", Tools: []string{"echo"},
		}}); err != nil {
			t.Fatal(err)
		}
	}

	// Only the org's own admin gets its tap.
	_, err := taps.CreateTap(withKey(ctxT(t), "key-globex"), &agentmeshv1.CreateTapRequest{Org: "acme"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("globex asking for acme's tap: %v, want PermissionDenied", err)
	}
	_, err = taps.CreateTap(ctxT(t), &agentmeshv1.CreateTapRequest{Org: "acme"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v, want Unauthenticated", err)
	}
	_, err = taps.CreateTap(withKey(ctxT(t), "key-acme"), &agentmeshv1.CreateTapRequest{Ttl: durationpb.New(-time.Hour)})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative ttl: %v, want InvalidArgument", err)
	}
	resp, err := taps.CreateTap(withKey(ctxT(t), "key-acme"), &agentmeshv1.CreateTapRequest{Org: "acme", Ttl: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatalf("create tap: %v", err)
	}
	if resp.GetOrg() != "acme" || len(resp.GetSubjects()) != 2 || time.Until(resp.GetExpiresAt().AsTime()) > time.Hour {
		t.Errorf("tap: %v, want acme's, two subjects, valid at most an hour", resp)
	}

	c, err := dial(t, e.stack.NATSURL(), []byte(resp.GetCreds()), "")
	if err != nil {
		t.Fatalf("connect with the tap: %v", err)
	}
	var mu sync.Mutex
	var got []*nats.Msg
	if _, err := c.nc.Subscribe("am.evt.acme.>", func(m *nats.Msg) {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"am.evt.globex.>", "am.evt.>", "am.work.>", "am.state.>"} {
		if _, err := c.nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.nc.Publish("am.evt.acme.task.x.completed", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_ = c.nc.Flush()
	for _, subj := range []string{"am.evt.globex.>", "am.evt.>", "am.work.>", "am.state.>", "am.evt.acme.task.x.completed"} {
		poll.Until(t, 5*time.Second, func() error { return c.refused(subj) })
	}

	submit := func(key, input string) *agentmeshv1.Task {
		r, err := e.tasks.SubmitTask(withKey(ctxT(t), key), &agentmeshv1.SubmitTaskRequest{Input: input})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		return r.Task
	}
	theirs := submit("key-globex", "globex secret")
	ours := submit("key-acme", "acme hello")
	poll.Until(t, 60*time.Second, func() error {
		r, err := e.tasks.GetTask(withKey(ctxShort(t), "key-globex"), &agentmeshv1.GetTaskRequest{Id: theirs.Id})
		if err != nil {
			return err
		}
		if r.Task.Status != taskstate.Completed {
			return errStatus{r.Task.Status, taskstate.Completed}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range got {
			if strings.HasSuffix(m.Subject, ".completed") && strings.Contains(m.Subject, ours.Id) {
				return nil
			}
		}
		return errors.New("acme's completed event not seen yet")
	})
	mu.Lock()
	defer mu.Unlock()
	for _, m := range got {
		var ev agentmeshv1.TaskEvent
		if err := bus.DecodeEvent(m.Data, &ev); err != nil {
			t.Fatalf("event %s is not JSON of agentmesh.v1.TaskEvent: %v (%s)", m.Subject, err, m.Data)
		}
		if m.Header.Get(bus.HeaderType) != "agentmesh.v1.TaskEvent" || m.Header.Get(bus.HeaderContentType) != bus.ContentTypeJSON {
			t.Errorf("event %s headers: %v", m.Subject, m.Header)
		}
		if ev.Org != "acme" || ev.TaskId == theirs.Id || strings.Contains(string(m.Data), "globex") {
			t.Errorf("acme's tap saw %s: %s", m.Subject, m.Data)
		}
	}
}
