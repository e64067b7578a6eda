package e2e

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func (e *env) graph() agentmeshv1.TaskGraphServiceClient {
	return agentmeshv1.NewTaskGraphServiceClient(e.conn)
}

func gt(ref, input string, deps ...string) *agentmeshv1.GraphTask {
	return &agentmeshv1.GraphTask{Ref: ref, Task: &agentmeshv1.SubmitTaskRequest{Title: ref, Input: input, Agent: "helper", DependsOn: deps}}
}

// statusTimes returns when the task first reached each status, from its
// history.
func (e *env) statusTimes(t *testing.T, id string) map[agentmeshv1.TaskStatus]time.Time {
	t.Helper()
	out := map[agentmeshv1.TaskStatus]time.Time{}
	for _, ev := range e.history(t, id) {
		if ev.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS {
			continue
		}
		if _, ok := out[ev.Status]; !ok {
			out[ev.Status] = ev.Time.AsTime()
		}
	}
	return out
}

// checkOrder fails unless child started running no earlier than every
// parent completed (both read from the histories).
func (e *env) checkOrder(t *testing.T, child string, parents ...string) {
	t.Helper()
	ct := e.statusTimes(t, child)
	started, ok := ct[taskstate.Running]
	if !ok {
		t.Fatalf("task %s never ran", child)
	}
	for _, p := range parents {
		done, ok := e.statusTimes(t, p)[taskstate.Completed]
		if !ok {
			t.Fatalf("parent %s never completed", p)
		}
		if started.Before(done) {
			t.Errorf("task %s started at %s, before its parent %s completed at %s", child, started.Format(time.RFC3339Nano), p, done.Format(time.RFC3339Nano))
		}
	}
}

func wantStatus(t *testing.T, what string, err error, code codes.Code, mention string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || !strings.Contains(st.Message(), mention) {
		t.Fatalf("%s: got %v, want %s mentioning %q", what, err, code, mention)
	}
}

func TestDiamondGraphRunsInOrder(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		e := start(t, o)
		e.createAgent(t, "helper", "general")
		resp, err := e.graph().SubmitTasks(ctxT(t), &agentmeshv1.SubmitTasksRequest{Tasks: []*agentmeshv1.GraphTask{
			gt("d", "join them", "ref:b", "ref:c"),
			gt("b", "left", "ref:a"),
			gt("c", "right", "ref:a"),
			gt("a", "root"),
		}})
		if err != nil {
			t.Fatalf("SubmitTasks: %v", err)
		}
		d, b, c, a := resp.Tasks[0], resp.Tasks[1], resp.Tasks[2], resp.Tasks[3]
		if d.Status != taskstate.Blocked || d.BlockedOn != agentmeshv1.BlockedOn_BLOCKED_ON_DEPENDENCIES || len(d.WaitingOn) != 2 {
			t.Errorf("d at submit: %s on %v waiting %v, want blocked on its two parents", taskstate.Name(d.Status), d.BlockedOn, d.WaitingOn)
		}
		done := e.waitStatus(t, d.Id, taskstate.Completed, 60*time.Second)
		e.checkOrder(t, b.Id, a.Id)
		e.checkOrder(t, c.Id, a.Id)
		e.checkOrder(t, d.Id, b.Id, c.Id)
		// The parents' results reach the dependent before its input.
		for _, want := range []string{"Results of the tasks this task depends on", b.Id, c.Id, "final answer: ", "--- your task ---", "join them"} {
			if !strings.Contains(done.Result, want) {
				t.Errorf("d's result does not show %q:\n%s", want, done.Result)
			}
		}
		if len(done.DependencyResults) != 2 || done.QueueWait == nil || done.RunTime == nil {
			t.Errorf("d: dependency results %v, queue wait %v, run time %v", done.DependencyResults, done.QueueWait, done.RunTime)
		}
	})
}

func TestFanInAndFailurePropagation(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		e := start(t, o)
		e.createAgent(t, "helper", "general")
		var parents []string
		for _, in := range []string{"one", "two", "three"} {
			parents = append(parents, e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: in, Agent: "helper"}).Id)
		}
		fan := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "sum up", Agent: "helper", DependsOn: parents, Tags: []string{"fan-in"}})
		e.waitStatus(t, fan.Id, taskstate.Completed, 60*time.Second)
		e.checkOrder(t, fan.Id, parents...)

		// A slow parent holds its dependents in blocked, naming it.
		slow := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow parent", Agent: "helper"})
		strict := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "after slow", Agent: "helper", DependsOn: []string{slow.Id}})
		anyway := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "after slow anyway", Agent: "helper", DependsOn: []string{slow.Id},
			DependencyPolicy: agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_RUN_ANYWAY})
		got, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: strict.Id})
		if err != nil {
			t.Fatal(err)
		}
		if got.Task.Status != taskstate.Blocked || got.Task.BlockedOn != agentmeshv1.BlockedOn_BLOCKED_ON_DEPENDENCIES || len(got.Task.WaitingOn) != 1 || got.Task.WaitingOn[0] != slow.Id {
			t.Fatalf("dependent of a slow task: %v", got.Task)
		}
		e.waitStatus(t, slow.Id, taskstate.Running, 30*time.Second)
		if _, err := e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: slow.Id, Reason: "changed my mind"}); err != nil {
			t.Fatal(err)
		}
		failed := e.waitStatus(t, strict.Id, taskstate.Failed, 30*time.Second)
		if failed.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_DEPENDENCY || !strings.Contains(failed.Error, slow.Id) || !strings.Contains(failed.Error, "cancelled") {
			t.Errorf("dependent of a cancelled task: %v %q, want a dependency failure naming %s", failed.FailureKind, failed.Error, slow.Id)
		}
		if _, ok := e.statusTimes(t, strict.Id)[taskstate.Running]; ok {
			t.Errorf("the failed dependent ran")
		}
		ran := e.waitStatus(t, anyway.Id, taskstate.Completed, 60*time.Second)
		if !strings.Contains(ran.Result, "changed my mind") {
			t.Errorf("run-anyway dependent did not get its parent's outcome: %q", ran.Result)
		}
	})
}

func TestSubmitTasksRefusedCreatesNothing(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.apiKeys = map[string]string{"key-a": "org-a", "key-b": "org-b"}
		e := start(t, o)
		as := func(key string) context.Context {
			return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+key)
		}
		// Agents belong to orgs: each org defines its own "helper".
		for _, key := range []string{"key-a", "key-b"} {
			if _, err := e.agents.CreateAgent(as(key), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "helper", Tools: []string{"echo"}}}); err != nil {
				t.Fatal(err)
			}
		}
		theirs, err := e.tasks.SubmitTask(as("key-b"), &agentmeshv1.SubmitTaskRequest{Input: "b's", Agent: "helper"})
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name    string
			tasks   []*agentmeshv1.GraphTask
			code    codes.Code
			mention string
		}{
			{"cycle", []*agentmeshv1.GraphTask{gt("root", "r"), gt("x", "x", "ref:root", "ref:z"), gt("y", "y", "ref:x"), gt("z", "z", "ref:y")}, codes.InvalidArgument, "dependency cycle"},
			{"unknown id", []*agentmeshv1.GraphTask{gt("a", "a"), gt("b", "b", "01JNOSUCHTASKNOSUCHTASK000")}, codes.NotFound, "01JNOSUCHTASKNOSUCHTASK000"},
			{"other org's id", []*agentmeshv1.GraphTask{gt("a", "a"), gt("b", "b", theirs.Task.Id)}, codes.NotFound, theirs.Task.Id},
			{"unknown ref", []*agentmeshv1.GraphTask{gt("a", "a", "ref:nope")}, codes.InvalidArgument, "ref:nope"},
			{"bad task", []*agentmeshv1.GraphTask{gt("a", "a"), gt("b", "")}, codes.InvalidArgument, "tasks[1].task.input"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := e.graph().SubmitTasks(as("key-a"), &agentmeshv1.SubmitTasksRequest{Tasks: tc.tasks})
				wantStatus(t, "SubmitTasks", err, tc.code, tc.mention)
				if tc.name == "cycle" {
					for _, r := range []string{"x", "y", "z"} {
						if !strings.Contains(err.Error(), r) {
							t.Errorf("cycle error %q does not name %s", err, r)
						}
					}
				}
				list, err := e.tasks.ListTasks(as("key-a"), &agentmeshv1.ListTasksRequest{})
				if err != nil {
					t.Fatal(err)
				}
				if len(list.Tasks) != 0 {
					t.Errorf("a refused SubmitTasks created %d tasks", len(list.Tasks))
				}
			})
		}
		// SubmitTask is refused the same way.
		_, err = e.tasks.SubmitTask(as("key-a"), &agentmeshv1.SubmitTaskRequest{Input: "x", Agent: "helper", DependsOn: []string{theirs.Task.Id}})
		wantStatus(t, "SubmitTask with another org's parent", err, codes.NotFound, theirs.Task.Id)
		// Other orgs' metrics do not leak: org-a has no tasks.
		m, err := agentmeshv1.NewMetricsServiceClient(e.conn).GetMetrics(as("key-a"), &agentmeshv1.GetMetricsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if m.Org != "org-a" || m.Overall.Submitted != 0 || m.Overall.Queued+m.Overall.Running+m.Overall.Completed != 0 || len(m.Agents) != 0 {
			t.Errorf("org-a's metrics show another org's work: %v", m)
		}
	})
}

func TestUpdateAndDeleteTasks(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		e := start(t, o)
		e.createAgent(t, "helper", "general")
		slow := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow one", Agent: "helper"})
		child := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "later", Agent: "helper", DependsOn: []string{slow.Id}})
		mask := func(p ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: p} }

		// A waiting task's priority, title and tags change.
		up, err := e.graph().UpdateTask(ctxT(t), &agentmeshv1.UpdateTaskRequest{Id: child.Id,
			Task:       &agentmeshv1.Task{Priority: agentmeshv1.Priority_PRIORITY_CRITICAL, Title: "renamed", Tags: []string{"urgent"}},
			UpdateMask: mask("priority", "title", "tags")})
		if err != nil {
			t.Fatalf("UpdateTask: %v", err)
		}
		if up.Task.Priority != agentmeshv1.Priority_PRIORITY_CRITICAL || up.Task.Title != "renamed" || up.Task.Tags[0] != "urgent" || up.Task.Status != taskstate.Blocked {
			t.Errorf("updated: %v", up.Task)
		}
		hist := e.history(t, child.Id)
		if last := hist[len(hist)-1]; last.Type != agentmeshv1.EventType_EVENT_TYPE_UPDATED || last.Update.GetPriority() != agentmeshv1.Priority_PRIORITY_CRITICAL {
			t.Errorf("last event %v, want the update", last)
		}
		// Once it runs, its priority and dependencies are fixed.
		e.waitStatus(t, slow.Id, taskstate.Running, 30*time.Second)
		_, err = e.graph().UpdateTask(ctxT(t), &agentmeshv1.UpdateTaskRequest{Id: slow.Id, Task: &agentmeshv1.Task{Priority: agentmeshv1.Priority_PRIORITY_LOW}, UpdateMask: mask("priority")})
		wantStatus(t, "UpdateTask priority of a running task", err, codes.FailedPrecondition, "priority")
		_, err = e.graph().UpdateTask(ctxT(t), &agentmeshv1.UpdateTaskRequest{Id: slow.Id, Task: &agentmeshv1.Task{DependsOn: []string{child.Id}}, UpdateMask: mask("depends_on")})
		wantStatus(t, "UpdateTask depends_on of a running task", err, codes.FailedPrecondition, "depends_on")
		_, err = e.graph().UpdateTask(ctxT(t), &agentmeshv1.UpdateTaskRequest{Id: slow.Id, Task: &agentmeshv1.Task{}, UpdateMask: mask("input")})
		wantStatus(t, "UpdateTask of input", err, codes.InvalidArgument, "update_mask")
		// A cycle through an update is refused naming it.
		other := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "other", Agent: "helper", DependsOn: []string{child.Id}})
		_, err = e.graph().UpdateTask(ctxT(t), &agentmeshv1.UpdateTaskRequest{Id: child.Id, Task: &agentmeshv1.Task{DependsOn: []string{slow.Id, other.Id}}, UpdateMask: mask("depends_on")})
		wantStatus(t, "UpdateTask closing a cycle", err, codes.InvalidArgument, child.Id+" → "+other.Id+" → "+child.Id)

		// Only finished tasks are deleted; their history goes with them.
		_, err = e.graph().DeleteTask(ctxT(t), &agentmeshv1.DeleteTaskRequest{Id: slow.Id})
		wantStatus(t, "DeleteTask of a running task", err, codes.FailedPrecondition, "running")
		n, err := e.graph().CancelTasks(ctxT(t), &agentmeshv1.CancelTasksRequest{Agent: "helper"})
		if err != nil || n.Cancelled != 3 {
			t.Fatalf("CancelTasks: %v %v, want 3 cancelled", n, err)
		}
		e.waitStatus(t, slow.Id, taskstate.Cancelled, 30*time.Second)
		if _, err := e.graph().DeleteTask(ctxT(t), &agentmeshv1.DeleteTaskRequest{Id: slow.Id}); err != nil {
			t.Fatalf("DeleteTask: %v", err)
		}
		_, err = e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: slow.Id})
		wantStatus(t, "GetTask of a deleted task", err, codes.NotFound, slow.Id)
		_, err = e.tasks.GetTaskHistory(ctxT(t), &agentmeshv1.GetTaskHistoryRequest{Id: slow.Id})
		wantStatus(t, "GetTaskHistory of a deleted task", err, codes.NotFound, slow.Id)
	})
}

func TestListTasksFilters(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		e := start(t, o)
		e.createAgent(t, "helper", "general")
		parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow parent", Agent: "helper"})
		a := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow a", Agent: "helper", Tags: []string{"etl", "nightly"}, Priority: agentmeshv1.Priority_PRIORITY_HIGH, ParentTaskId: parent.Id})
		b := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow b", Agent: "helper", Tags: []string{"etl"}, Priority: agentmeshv1.Priority_PRIORITY_LOW})
		list := func(req *agentmeshv1.ListTasksRequest) []string {
			resp, err := e.tasks.ListTasks(ctxT(t), req)
			if err != nil {
				t.Fatalf("ListTasks: %v", err)
			}
			var ids []string
			for _, t := range resp.Tasks {
				ids = append(ids, t.Id)
			}
			return ids
		}
		for _, tc := range []struct {
			name string
			req  *agentmeshv1.ListTasksRequest
			want []string
		}{
			{"tag", &agentmeshv1.ListTasksRequest{Tag: "nightly"}, []string{a.Id}},
			{"tag of two", &agentmeshv1.ListTasksRequest{Tag: "etl"}, []string{b.Id, a.Id}},
			{"priority", &agentmeshv1.ListTasksRequest{Priorities: []agentmeshv1.Priority{agentmeshv1.Priority_PRIORITY_LOW}}, []string{b.Id}},
			{"parent", &agentmeshv1.ListTasksRequest{ParentTaskId: parent.Id}, []string{a.Id}},
		} {
			if got := list(tc.req); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
		_, err := e.tasks.SubmitTask(ctxT(t), &agentmeshv1.SubmitTaskRequest{Input: "x", Agent: "helper", ParentTaskId: "01JNOSUCHTASKNOSUCHTASK000"})
		wantStatus(t, "SubmitTask with an unknown parent_task_id", err, codes.NotFound, "parent_task_id")
		_, err = e.tasks.ListTasks(ctxT(t), &agentmeshv1.ListTasksRequest{Priorities: []agentmeshv1.Priority{99}})
		wantStatus(t, "ListTasks with a bad priority", err, codes.InvalidArgument, "priorities[0]")
		if _, err := e.graph().CancelTasks(ctxT(t), &agentmeshv1.CancelTasksRequest{Tag: "etl"}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: parent.Id}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRetentionPurgesFinishedTasks(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.state = state.Config{Retention: time.Second, RetentionInterval: 100 * time.Millisecond}
		e := start(t, o)
		e.createAgent(t, "helper", "general")
		done := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "quick", Agent: "helper"})
		live := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow and alive", Agent: "helper"})
		e.waitStatus(t, done.Id, taskstate.Completed, 30*time.Second)
		poll.Until(t, 30*time.Second, func() error {
			_, err := e.tasks.GetTask(ctxShort(t), &agentmeshv1.GetTaskRequest{Id: done.Id})
			if status.Code(err) == codes.NotFound {
				return nil
			}
			return errStatus{taskstate.Completed, taskstate.Cancelled}
		})
		got, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: live.Id})
		if err != nil || taskstate.Terminal(got.Task.Status) {
			t.Fatalf("an unfinished task was purged or ended: %v %v", got, err)
		}
		if _, err := e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: live.Id}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestGetMetricsOfAKnownWorkload(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		e := start(t, o)
		if _, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "helper", Tools: []string{"echo"}, MaxConcurrency: 4,
		}}); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		var done []string
		for _, in := range []string{"a", "b", "c"} {
			done = append(done, e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: in, Agent: "helper"}).Id)
		}
		running := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow keeps running", Agent: "helper"})
		blocked := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "waits", Agent: "helper", DependsOn: []string{running.Id}})
		cancelled := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow then cancelled", Agent: "helper"})
		failed := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "fails", Agent: "helper", DependsOn: []string{cancelled.Id}})
		for _, id := range done {
			e.waitStatus(t, id, taskstate.Completed, 30*time.Second)
		}
		e.waitStatus(t, running.Id, taskstate.Running, 30*time.Second)
		// The cancelled task is cancelled while it runs (its queue wait and
		// run time are counted below): cancelled before it started, it
		// would count in neither.
		e.waitStatus(t, cancelled.Id, taskstate.Running, 30*time.Second)
		if _, err := e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: cancelled.Id}); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(t, failed.Id, taskstate.Failed, 30*time.Second)
		_ = blocked
		end := time.Now().Add(time.Second)
		start := begin.Add(-time.Minute)
		m, err := agentmeshv1.NewMetricsServiceClient(e.conn).GetMetrics(ctxT(t), &agentmeshv1.GetMetricsRequest{
			Start: timestamppb.New(start), End: timestamppb.New(end),
		})
		if err != nil {
			t.Fatalf("GetMetrics: %v", err)
		}
		all := m.Overall
		if all.Completed != 3 || all.Failed != 1 || all.Cancelled != 1 || all.Submitted != 7 {
			t.Errorf("finished: completed %d failed %d cancelled %d submitted %d, want 3 1 1 7", all.Completed, all.Failed, all.Cancelled, all.Submitted)
		}
		if math.Abs(all.CompletionRate-0.6) > 1e-9 || math.Abs(all.FailureRate-0.2) > 1e-9 {
			t.Errorf("rates: completion %v failure %v, want 0.6 and 0.2", all.CompletionRate, all.FailureRate)
		}
		if want := 3 / end.Sub(start).Minutes(); math.Abs(all.ThroughputPerMinute-want) > 1e-6 {
			t.Errorf("throughput %v/min, want %v", all.ThroughputPerMinute, want)
		}
		if all.Running != 1 || all.Blocked != 1 || all.Backlog != 1 || all.Queued != 0 {
			t.Errorf("now: running %d blocked %d backlog %d queued %d, want 1 1 1 0", all.Running, all.Blocked, all.Backlog, all.Queued)
		}
		// Queue wait is measured for the 3 that ran to the end and the
		// cancelled one that ran; run time for those 4.
		if all.QueueWait.Count != 4 || all.RunTime.Count != 4 || all.RunTime.P50.AsDuration() <= 0 || all.RunTime.P99.AsDuration() < all.RunTime.P50.AsDuration() {
			t.Errorf("percentiles: wait %v run %v", all.QueueWait, all.RunTime)
		}
		if all.AverageRunning <= 0 {
			t.Errorf("average running %v, want > 0", all.AverageRunning)
		}
		if len(m.Agents) != 1 || m.Agents[0].Agent != "helper" || m.Agents[0].MaxConcurrency != 4 {
			t.Fatalf("agents: %v", m.Agents)
		}
		if u := m.Agents[0].Metrics.Utilization; math.Abs(u-m.Agents[0].Metrics.AverageRunning/4) > 1e-9 || u <= 0 {
			t.Errorf("utilization %v, want average running / 4 = %v", u, m.Agents[0].Metrics.AverageRunning/4)
		}
		_, err = agentmeshv1.NewMetricsServiceClient(e.conn).GetMetrics(ctxT(t), &agentmeshv1.GetMetricsRequest{Start: timestamppb.New(end), End: timestamppb.New(start)})
		wantStatus(t, "GetMetrics with start after end", err, codes.InvalidArgument, "start")
		if _, err := e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: running.Id}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPrometheusEndpointOverHTTP(t *testing.T) {
	e := start(t, opts{})
	srv, err := metrics.Listen(context.Background(), "127.0.0.1:0", logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	e.createAgent(t, "helper", "general")
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "count me", Agent: "helper"})
	e.waitStatus(t, task.Id, taskstate.Completed, 30*time.Second)
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	text := string(body)
	for _, want := range []string{
		`agentmesh_tasks_finished_total{agent="helper",status="completed"}`,
		`agentmesh_tasks_created_total{agent="helper"}`,
		`agentmesh_task_run_seconds_count{agent="helper"}`,
		`agentmesh_task_queue_wait_seconds_bucket{agent="helper",le=`,
		`agentmesh_bus_request_seconds_count{code="ok",op="state.task.create"}`,
		`agentmesh_store_seconds_count{code="ok",op="create_task"}`,
		`agentmesh_task_events_total{status="completed",type="status"}`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
