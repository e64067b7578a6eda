package state_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/schedule"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/pgstore"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// both runs fn on a state service over the embedded store and over
// Postgres.
func both(t *testing.T, fn func(t *testing.T, r *running)) {
	t.Run("kvstore", func(t *testing.T) { fn(t, startKV(t)) })
	t.Run("postgres", func(t *testing.T) {
		st, err := pgstore.Open(context.Background(), pgtest.NewDatabase(t))
		if err != nil {
			t.Fatalf("pgstore.Open: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		srv := natstest.Start(t)
		fn(t, startService(t, natstest.ConnectAs(t, srv, subjects.ServiceState), natstest.Connect(t, srv), st))
	})
}

var scheduleSeq int

func newSchedule(t *testing.T, r *running, org string, overlap agentmeshv1.OverlapPolicy) *agentmeshv1.Schedule {
	t.Helper()
	scheduleSeq++
	sc := &agentmeshv1.Schedule{
		Id: fmt.Sprintf("sch_%d%d", time.Now().UnixNano(), scheduleSeq), Name: "nightly",
		Spec:      &agentmeshv1.ScheduleSpec{Cron: "* * * * *", Overlap: overlap},
		Template:  &agentmeshv1.TaskTemplate{Input: "report", Agent: "writer"},
		CreatedBy: "ci", CreatorRole: "operator",
	}
	return mustCall(t, r.nc, subjects.StateCreateSchedule, &busv1.PutScheduleRequest{Org: org, Schedule: sc}, &busv1.ScheduleResponse{}).Schedule
}

// slotFire is the request the scheduler's leader makes for a slot.
func slotFire(sc *agentmeshv1.Schedule, slot time.Time) *busv1.FireScheduleRequest {
	return &busv1.FireScheduleRequest{ScheduleId: sc.Id, Org: sc.Org, Slot: timestamppb.New(slot),
		Task: schedule.RunTask(sc, &agentmeshv1.Agent{Name: "writer"}, nil)}
}

func fire(t *testing.T, r *running, fs ...*busv1.FireScheduleRequest) []*busv1.FireScheduleResult {
	t.Helper()
	return mustCall(t, r.nc, subjects.StateFireSchedules, &busv1.FireSchedulesRequest{Fires: fs}, &busv1.FireSchedulesResponse{}).Results
}

func runsOf(t *testing.T, r *running, sc *agentmeshv1.Schedule) []*agentmeshv1.Task {
	t.Helper()
	return mustCall(t, r.nc, subjects.StateListTasks, &busv1.ListTasksRequest{Org: sc.Org, Tag: schedule.Tag(sc.Id)}, &busv1.ListTasksResponse{}).Tasks
}

// A slot fired again — in the same request, in concurrent requests, after
// it was recorded — creates one task; the schedule records it once.
func TestScheduleSlotFiresOnce(t *testing.T) {
	both(t, func(t *testing.T, r *running) {
		sc := newSchedule(t, r, "acme", agentmeshv1.OverlapPolicy_OVERLAP_POLICY_ALLOW)
		slot := sc.HandledThrough.AsTime().Truncate(time.Minute).Add(time.Minute)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for _, res := range fire(t, r, slotFire(sc, slot), slotFire(sc, slot)) {
					if res.Error != nil {
						t.Errorf("fire: %v", res.Error)
					}
				}
			})
		}
		wg.Wait()
		again := fire(t, r, slotFire(sc, slot))[0].Response
		if !again.Already {
			t.Errorf("a recorded slot fired again: got a new run %v", again.Run)
		}
		runs := runsOf(t, r, sc)
		if len(runs) != 1 {
			t.Fatalf("runs of one slot fired 9 times: %d, want 1", len(runs))
		}
		if want := schedule.IdempotencyKey(sc.Id, slot, false); runs[0].IdempotencyKey != want || runs[0].Org != "acme" || runs[0].CreatedBy != "ci" {
			t.Errorf("run: key %q org %q created_by %q, want %q acme ci", runs[0].IdempotencyKey, runs[0].Org, runs[0].CreatedBy, want)
		}
		got := mustCall(t, r.nc, subjects.StateGetSchedule, &busv1.GetScheduleRequest{Id: sc.Id, Org: "acme"}, &busv1.ScheduleResponse{}).Schedule
		if got.Runs != 1 || got.LastTaskId != runs[0].Id || !got.HandledThrough.AsTime().Equal(slot) {
			t.Errorf("schedule: runs %d last task %q handled through %s, want 1 %s %s", got.Runs, got.LastTaskId, got.HandledThrough.AsTime(), runs[0].Id, slot)
		}
		// A trigger is a run of its own.
		trig := mustCall(t, r.nc, subjects.StateTriggerSchedule, slotFire(sc, time.Time{}), &busv1.FireScheduleResponse{})
		if trig.Task == nil || trig.Task.Id == runs[0].Id || !trig.Run.Manual {
			t.Errorf("trigger: %v", trig)
		}
	})
}

// A slot whose task was created but not recorded (the state service died
// between the two writes) is fired again by the next leader: the task its
// idempotency key names is found, not made twice, and the slot recorded
// with it.
func TestScheduleSlotAfterACrashBetweenTaskAndRecord(t *testing.T) {
	r := startKV(t)
	sc := newSchedule(t, r, "acme", agentmeshv1.OverlapPolicy_OVERLAP_POLICY_SKIP)
	slot := sc.HandledThrough.AsTime().Truncate(time.Minute).Add(time.Minute)
	// The first write of the slot, alone: its task.
	orphan := slotFire(sc, slot).Task
	orphan.IdempotencyKey = schedule.IdempotencyKey(sc.Id, slot, false)
	made := mustCall(t, r.nc, subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: orphan}, &busv1.CreateTaskResponse{}).Task
	res := fire(t, r, slotFire(sc, slot))[0].Response
	if res.GetTask().GetId() != made.Id || res.Run.Outcome != agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_STARTED {
		t.Fatalf("the slot fired again: run %v task %v, want the task made before (%s)", res.Run, res.Task, made.Id)
	}
	if n := len(runsOf(t, r, sc)); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// Each overlap policy, with the first run still queued when the next slot
// fires.
func TestScheduleOverlapPolicies(t *testing.T) {
	r := startKV(t)
	tests := []struct {
		policy    agentmeshv1.OverlapPolicy
		outcome   agentmeshv1.ScheduleRunOutcome
		runs      int
		firstEnds agentmeshv1.TaskStatus // the first run's status after the second slot
		second    agentmeshv1.TaskStatus
	}{
		{agentmeshv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED, agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_SKIPPED, 1, taskstate.Queued, 0},
		{agentmeshv1.OverlapPolicy_OVERLAP_POLICY_SKIP, agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_SKIPPED, 1, taskstate.Queued, 0},
		{agentmeshv1.OverlapPolicy_OVERLAP_POLICY_ALLOW, agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_STARTED, 2, taskstate.Queued, taskstate.Queued},
		{agentmeshv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_PREVIOUS, agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_STARTED, 2, taskstate.Cancelled, taskstate.Queued},
		{agentmeshv1.OverlapPolicy_OVERLAP_POLICY_ENQUEUE, agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_STARTED, 2, taskstate.Queued, taskstate.Blocked},
	}
	for _, tc := range tests {
		t.Run(tc.policy.String(), func(t *testing.T) {
			sc := newSchedule(t, r, "acme", tc.policy)
			slot := sc.HandledThrough.AsTime().Truncate(time.Minute).Add(time.Minute)
			first := fire(t, r, slotFire(sc, slot))[0].Response
			if first.GetTask() == nil {
				t.Fatalf("first slot: %v", first)
			}
			second := fire(t, r, slotFire(sc, slot.Add(time.Minute)))[0].Response
			if second.Run.Outcome != tc.outcome {
				t.Fatalf("second slot: %v (%s), want %v", second.Run.Outcome, second.Run.Reason, tc.outcome)
			}
			if n := len(runsOf(t, r, sc)); n != tc.runs {
				t.Errorf("runs: %d, want %d", n, tc.runs)
			}
			if got := getTask(t, r, first.Task.Id).Status; got != tc.firstEnds {
				t.Errorf("first run: %v, want %v", got, tc.firstEnds)
			}
			if tc.second != 0 {
				got := getTask(t, r, second.Task.Id)
				if got.Status != tc.second {
					t.Errorf("second run: %v, want %v", got.Status, tc.second)
				}
				if tc.second == taskstate.Blocked && (len(got.WaitingOn) != 1 || got.WaitingOn[0] != first.Task.Id) {
					t.Errorf("enqueued run waits on %v, want the first run", got.WaitingOn)
				}
			}
		})
	}
}

// Rights only narrow: a run is the schedule's org's whatever the request
// says, and a schedule whose creator may not submit records a failed run.
func TestScheduleRunsNarrow(t *testing.T) {
	r := startKV(t)
	sc := newSchedule(t, r, "acme", agentmeshv1.OverlapPolicy_OVERLAP_POLICY_ALLOW)
	slot := sc.HandledThrough.AsTime().Truncate(time.Minute).Add(time.Minute)
	f := slotFire(sc, slot)
	f.Task.Org, f.Task.ParentTaskId = "globex", "someone-elses"
	res := fire(t, r, f)[0].Response
	if res.GetTask().GetOrg() != "acme" || res.GetTask().GetParentTaskId() != "" {
		t.Errorf("run: org %q parent %q, want acme and none", res.GetTask().GetOrg(), res.GetTask().GetParentTaskId())
	}

	reader := &agentmeshv1.Schedule{Id: "sch_reader", Spec: &agentmeshv1.ScheduleSpec{Cron: "@hourly"},
		Template: &agentmeshv1.TaskTemplate{Agent: "writer"}, CreatedBy: "ro", CreatorRole: "reader"}
	reader = mustCall(t, r.nc, subjects.StateCreateSchedule, &busv1.PutScheduleRequest{Org: "acme", Schedule: reader}, &busv1.ScheduleResponse{}).Schedule
	res = fire(t, r, slotFire(reader, reader.HandledThrough.AsTime().Truncate(time.Hour).Add(time.Hour)))[0].Response
	if res.Run.Outcome != agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_FAILED || res.Task != nil || res.Schedule.Failed != 1 {
		t.Errorf("a reader's schedule: %v (%s), want a failed run and no task", res.Run.Outcome, res.Run.Reason)
	}
	// A slot whose agent is gone (the scheduler found no match) is a
	// failed run, recorded.
	gone := slotFire(sc, slot.Add(time.Minute))
	gone.Task, gone.Failure = nil, `agent "writer" not found`
	res = fire(t, r, gone)[0].Response
	if res.Run.Outcome != agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_FAILED || res.Run.Reason != gone.Failure {
		t.Errorf("agent gone: %v", res.Run)
	}
}

// The state service checks the org of every key, schedule, endpoint and
// delivery: another org's answers not_found and changes nothing.
func TestOpsCheckTheOrg(t *testing.T) {
	r := startKV(t)
	sc := newSchedule(t, r, "acme", 0)
	key := &busv1.KeyRecord{Key: &agentmeshv1.ApiKey{Id: "key_1", Org: "acme", Name: "ci", Role: "operator"}, Sha256: make([]byte, sha256.Size)}
	mustCall(t, r.nc, subjects.StateCreateKey, &busv1.CreateKeyRequest{Record: key}, &busv1.KeyResponse{})
	ep := &busv1.WebhookEndpointRecord{Endpoint: &agentmeshv1.WebhookEndpoint{Id: "ep_1", Url: "https://example.com/h"},
		Secrets: []*busv1.WebhookSecret{{Secret: "whsec_AAAA"}}}
	mustCall(t, r.nc, subjects.StateCreateWebhook, &busv1.PutWebhookEndpointRequest{Org: "acme", Record: ep}, &busv1.WebhookEndpointResponse{})
	mustCall(t, r.nc, subjects.StateRecordDeliveries, &busv1.RecordDeliveriesRequest{Deliveries: []*agentmeshv1.WebhookDelivery{
		{Id: "msg_1", Org: "acme", EndpointId: "ep_1", Attempts: 1}}}, &busv1.RecordDeliveriesResponse{})

	tests := []struct {
		name string
		op   string
		req  proto.Message
		resp proto.Message
	}{
		{"get schedule", subjects.StateGetSchedule, &busv1.GetScheduleRequest{Id: sc.Id, Org: "globex"}, &busv1.ScheduleResponse{}},
		{"update schedule", subjects.StateUpdateSchedule, &busv1.PutScheduleRequest{Org: "globex", Schedule: &agentmeshv1.Schedule{Id: sc.Id, Spec: sc.Spec, Template: sc.Template}}, &busv1.ScheduleResponse{}},
		{"pause schedule", subjects.StatePauseSchedule, &busv1.PauseScheduleRequest{Id: sc.Id, Org: "globex", Paused: true}, &busv1.ScheduleResponse{}},
		{"delete schedule", subjects.StateDeleteSchedule, &busv1.GetScheduleRequest{Id: sc.Id, Org: "globex"}, &busv1.ScheduleResponse{}},
		{"trigger schedule", subjects.StateTriggerSchedule, &busv1.FireScheduleRequest{ScheduleId: sc.Id, Org: "globex", Task: slotFire(sc, time.Now()).Task}, &busv1.FireScheduleResponse{}},
		{"fire schedule", subjects.StateFireSchedules, nil, nil},
		{"get key", subjects.StateGetKey, &busv1.GetKeyRequest{Id: "key_1", Org: "globex"}, &busv1.KeyResponse{}},
		{"revoke key", subjects.StateRevokeKey, &busv1.RevokeKeyRequest{Id: "key_1", Org: "globex"}, &busv1.KeyResponse{}},
		{"rotate key", subjects.StateRotateKey, &busv1.RotateKeyRequest{Id: "key_1", Org: "globex", Sha256: make([]byte, sha256.Size)}, &busv1.KeyResponse{}},
		{"get endpoint", subjects.StateGetWebhook, &busv1.GetWebhookEndpointRequest{Id: "ep_1", Org: "globex"}, &busv1.WebhookEndpointResponse{}},
		{"update endpoint", subjects.StateUpdateWebhook, &busv1.PutWebhookEndpointRequest{Org: "globex", Record: &busv1.WebhookEndpointRecord{Endpoint: &agentmeshv1.WebhookEndpoint{Id: "ep_1", Url: "https://evil.example/"}}}, &busv1.WebhookEndpointResponse{}},
		{"rotate endpoint", subjects.StateRotateWebhook, &busv1.PutWebhookEndpointRequest{Org: "globex", Record: &busv1.WebhookEndpointRecord{Endpoint: &agentmeshv1.WebhookEndpoint{Id: "ep_1"}, Secrets: []*busv1.WebhookSecret{{Secret: "whsec_BBBB"}}}}, &busv1.WebhookEndpointResponse{}},
		{"delete endpoint", subjects.StateDeleteWebhook, &busv1.GetWebhookEndpointRequest{Id: "ep_1", Org: "globex"}, &busv1.WebhookEndpointResponse{}},
		{"list deliveries", subjects.StateListDeliveries, &busv1.ListDeliveriesRequest{EndpointId: "ep_1", Org: "globex"}, &busv1.ListDeliveriesResponse{}},
		{"redeliver", subjects.StateRedeliver, &busv1.RedeliverRequest{DeliveryId: "msg_1", Org: "globex"}, &busv1.RedeliverResponse{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.op == subjects.StateFireSchedules {
				f := slotFire(sc, time.Now().Add(time.Minute))
				f.Org = "globex"
				if res := fire(t, r, f)[0]; res.Error != nil {
					err = bus.FromProto(res.Error)
				}
			} else {
				_, err = call(t, r.nc, tc.op, tc.req, tc.resp)
			}
			if !errors.Is(err, bus.ErrNotFound) {
				t.Fatalf("got %v, want not_found", err)
			}
		})
	}
	if got := mustCall(t, r.nc, subjects.StateGetSchedule, &busv1.GetScheduleRequest{Id: sc.Id, Org: "acme"}, &busv1.ScheduleResponse{}).Schedule; got.Version != sc.Version || got.Paused || got.Runs != 0 {
		t.Errorf("acme's schedule changed: %v", got)
	}
	if got := mustCall(t, r.nc, subjects.StateGetKey, &busv1.GetKeyRequest{Id: "key_1", Org: "acme"}, &busv1.KeyResponse{}).Record; got.Key.Version != 1 || got.Key.RevokedAt != nil {
		t.Errorf("acme's key changed: %v", got)
	}
	if got := mustCall(t, r.nc, subjects.StateGetWebhook, &busv1.GetWebhookEndpointRequest{Id: "ep_1", Org: "acme"}, &busv1.WebhookEndpointResponse{}).Record; got.Endpoint.Version != 1 || got.Secrets != nil {
		t.Errorf("acme's endpoint changed, or its secret shown: %v", got)
	}
}

// A redelivery names one delivery by its id: an id that is a pattern of
// keys ('*', '>', a dot) or no delivery id at all is invalid_argument
// naming delivery_id, whoever on the bus asks, and nothing is queued.
func TestRedeliverRefusesAPatternID(t *testing.T) {
	r := startKV(t)
	ep := &busv1.WebhookEndpointRecord{Endpoint: &agentmeshv1.WebhookEndpoint{Id: "ep_1", Url: "https://example.com/h"},
		Secrets: []*busv1.WebhookSecret{{Secret: "whsec_AAAA"}}}
	mustCall(t, r.nc, subjects.StateCreateWebhook, &busv1.PutWebhookEndpointRequest{Org: "acme", Record: ep}, &busv1.WebhookEndpointResponse{})
	mustCall(t, r.nc, subjects.StateRecordDeliveries, &busv1.RecordDeliveriesRequest{Deliveries: []*agentmeshv1.WebhookDelivery{
		{Id: "msg_1", Org: "acme", EndpointId: "ep_1", Attempts: 1}}}, &busv1.RecordDeliveriesResponse{})
	for _, id := range []string{"*", ">", "msg_*", "ep_1.msg_1", "msg_1.>", "", "msg 1"} {
		resp := &busv1.RedeliverResponse{}
		_, err := call(t, r.nc, subjects.StateRedeliver, &busv1.RedeliverRequest{DeliveryId: id, Org: "acme"}, resp)
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeInvalidArgument || be.Field != "delivery_id" {
			t.Errorf("redeliver %q: got %v (%v), want invalid_argument naming delivery_id", id, resp.GetDelivery(), err)
		}
	}
}

// Key changes are announced once each, without the hash; a second
// revocation changes nothing and announces nothing.
func TestKeyEvents(t *testing.T) {
	r := startKV(t)
	c := collect(t, r.nc, names.KeyEvents())
	key := &busv1.KeyRecord{Key: &agentmeshv1.ApiKey{Id: "key_7", Org: "acme", Name: "ci", Role: "operator"}, Sha256: make([]byte, sha256.Size)}
	mustCall(t, r.nc, subjects.StateCreateKey, &busv1.CreateKeyRequest{Record: key}, &busv1.KeyResponse{})
	for range 2 {
		mustCall(t, r.nc, subjects.StateRevokeKey, &busv1.RevokeKeyRequest{Id: "key_7", Org: "acme", By: "boss"}, &busv1.KeyResponse{})
	}
	// A marker: each reply comes after its event was published, so a
	// second revocation's event would come before the marker's.
	marker := &busv1.KeyRecord{Key: &agentmeshv1.ApiKey{Id: "key_8", Org: "acme", Name: "marker", Role: "reader"}, Sha256: make([]byte, sha256.Size)}
	mustCall(t, r.nc, subjects.StateCreateKey, &busv1.CreateKeyRequest{Record: marker}, &busv1.KeyResponse{})
	msgs := c.wait(t, 3)
	if len(msgs) != 3 || msgs[2].Subject != names.KeyEvent("acme", "key_8") {
		t.Fatalf("key events: %d, the last on %s; want created, revoked, then the marker's", len(msgs), msgs[len(msgs)-1].Subject)
	}
	for i, action := range []string{"created", "revoked"} {
		var ev agentmeshv1.KeyEvent
		if err := bus.DecodeEvent(msgs[i].Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Action != action || ev.Key.Id != "key_7" || msgs[i].Subject != names.KeyEvent("acme", "key_7") {
			t.Errorf("event %d: %s %v on %s", i, ev.Action, ev.Key, msgs[i].Subject)
		}
		if action == "revoked" && (ev.Key.RevokedBy != "boss" || ev.Key.RevokedAt == nil) {
			t.Errorf("revocation event: %v", ev.Key)
		}
	}
}
