// Package state is the system of record: the one service that writes tasks,
// their histories and the agent catalogue, through a store.Store (pgstore in
// production, kvstore in dev). Every status change goes through the one
// transition table (pkg/taskstate) with compare-and-set.
//
// It serves, as the nats.go micro service "agentmesh-state" in queue group
// "state", protobuf requests (agentmesh.bus.v1) on <p>.state.<op>:
//
//	task.create task.get task.list task.step task.history task.usage
//	task.history.batch                             (router's WatchTask streams)
//	task.dispatch task.expire                      (scheduler's intents)
//	task.dispatch.batch                            (scheduler: many dispatches; batch.go)
//	task.start task.complete task.fail task.block task.requeue
//	                                               (executor's, fenced)
//	task.cancel task.decide                        (router's, org-scoped)
//	taps.create                                    (router: mint a tap)
//	task.create_graph task.update task.delete task.metrics
//	                                               (router; graph.go, metrics.go)
//	task.resolve                                   (scheduler's resolver)
//	task.settle                                    (scheduler's tree keeper; tree.go)
//	kv.get kv.set kv.delete kv.list                (working state; wstate.go)
//	memory.remember memory.search memory.get memory.list memory.delete
//	memory.prune                                   (memories; memories.go)
//	thread.list thread.get thread.delete           (threads; threads.go)
//	agent.put agent.get agent.list agent.delete agent.stats
//	key.* schedule.* webhook.*                     (keys, schedules, webhooks:
//	                                               keys.go, schedules.go, webhooks.go)
//
// There is no generic transition: each intent may make only the status
// changes of its table (intents.go), and the bus lets only one service
// identity publish it.
//
// It publishes, through JetStream and only after the commit, the public
// events as JSON (protojson; the type in the Am-Type header):
//
//	<p>.evt.<org>.task.<id>.<type>  agentmesh.v1.TaskEvent, Nats-Msg-Id <id>:<seq>
//	<p>.evt.<org>.agent.<name>      agentmesh.bus.v1.AgentEvent
//	<p>.evt.<org>.key|schedule|webhook.<id>  their changes (records.go)
//
// and relays the executors' streamed model output (<p>.token.>, core NATS)
// to the public <p>.live.<org>.task.<id>.token of tasks that run there
// (live.go): no other identity may publish on <p>.live.>.
//
// It replies after the publish acks, but a failed publish does not fail a
// request: the record is the truth. An event whose publish failed for a
// passing reason (the events stream electing a leader, a reconnect, a lost
// acknowledgement) is handed to an outbox that sends it again, with the
// same Msg-Id, until the stream has stored it (once: the Msg-Id
// de-duplicates), so a blip of the bus loses no event. At start-up the
// latest event of every unfinished task is republished (de-duplicated by
// Msg-Id) too, for what a stopped state service still held.
package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ServiceName is the micro service name ($SRV.INFO.agentmesh-state).
const ServiceName = "agentmesh-state"

// Version of the service as micro reports it.
const Version = "0.1.0"

// drainTimeout bounds how long Run waits for requests in flight at stop.
const drainTimeout = 10 * time.Second

// Deps are the service's required dependencies.
type Deps struct {
	NC    *nats.Conn
	Store store.Store
	Log   *slog.Logger
}

// Service is a ready state service.
type Service struct {
	names subjects.Names
	nc    *nats.Conn
	js    jetstream.JetStream
	store store.Store
	log   *slog.Logger
	sem   chan struct{}
	svc   micro.Service
	audit *bus.Auditor
	taps  *busauth.TapSigner
	// events sends again the events whose first publish failed.
	events *bus.Outbox
	// live relays the executors' streamed output to the public live
	// subjects (live.go).
	live *nats.Subscription

	retention, retentionEvery time.Duration

	limits  DelegationLimits
	spawnMu [spawnStripes]sync.Mutex

	// ops keeps keys, schedules and webhooks (records.go); nil when the
	// store does not.
	ops store.Ops
	// keep serves what agents keep (keep.go).
	keep *keeper
	// cacheables are the cacheable tasks this process created (cache.go).
	cacheables cacheables
}

// New validates cfg and deps, ensures the bus streams, republishes the
// latest event of every unfinished task and registers the micro service.
// When it returns, the service answers requests.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	switch {
	case deps.NC == nil:
		return nil, errors.New("state: Deps.NC is required")
	case deps.Store == nil:
		return nil, errors.New("state: Deps.Store is required")
	case deps.Log == nil:
		return nil, errors.New("state: Deps.Log is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	names, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	// Every async publish is answered within the try timeout (an ack lost
	// to a leader change included), so a failed one goes to the outbox.
	js, err := jetstream.New(deps.NC, jetstream.WithPublishAsyncTimeout(bus.PublishTryTimeout))
	if err != nil {
		return nil, fmt.Errorf("state: jetstream: %w", err)
	}
	reps, err := bus.EnsureStreams(ctx, js, names, cfg.Streams)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	bus.LogReplication(deps.Log.With("service", "state"), reps)
	s := &Service{
		names: names, nc: deps.NC, js: js, store: store.Instrument(deps.Store), limits: cfg.Delegation,
		log: deps.Log.With("service", "state"), sem: make(chan struct{}, cfg.Concurrency),
		taps:      cfg.Taps,
		events:    bus.NewOutbox(js, deps.Log.With("service", "state"), "event"),
		retention: cfg.Retention, retentionEvery: cfg.RetentionInterval,
	}
	s.ops, _ = deps.Store.(store.Ops)
	if s.keep, err = openKeeper(ctx, js, names, cfg, deps.Store, s.log); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if err := s.republish(ctx); err != nil {
		return nil, fmt.Errorf("state: republish: %w", err)
	}
	svc, err := micro.AddService(deps.NC, micro.Config{
		Name:        ServiceName,
		Version:     Version,
		Description: "agentmesh system of record: tasks, histories, agents",
		QueueGroup:  subjects.QueueState,
	})
	if err != nil {
		return nil, fmt.Errorf("state: add micro service: %w", err)
	}
	s.svc = svc
	s.audit = bus.NewAuditor(deps.NC, s.names.AuditService(subjects.ServiceState))
	if err := s.addEndpoints(); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("state: %w", err)
	}
	if s.live, err = s.startLiveRelay(); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("state: live relay: %w", err)
	}
	// The server has the subscriptions once the flush returns: a request
	// from another connection right after New is answered.
	if err := deps.NC.FlushTimeout(10 * time.Second); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("state: flush subscriptions: %w", err)
	}
	return s, nil
}

func (s *Service) addEndpoints() error {
	eps := []struct {
		op string
		h  micro.Handler
	}{
		{subjects.StateCreateTask, bus.Handler(s.log, func() *busv1.CreateTaskRequest { return &busv1.CreateTaskRequest{} }, s.createTask)},
		{subjects.StateGetTask, bus.Handler(s.log, func() *busv1.GetTaskRequest { return &busv1.GetTaskRequest{} }, s.getTask)},
		{subjects.StateListTasks, bus.Handler(s.log, func() *busv1.ListTasksRequest { return &busv1.ListTasksRequest{} }, s.listTasks)},
		{subjects.StateCreateTap, bus.Handler(s.log, func() *busv1.CreateTapRequest { return &busv1.CreateTapRequest{} }, s.createTap)},
		{subjects.StateAppendStep, bus.Handler(s.log, func() *busv1.AppendStepRequest { return &busv1.AppendStepRequest{} }, s.appendStep)},
		{subjects.StateHistory, bus.Handler(s.log, func() *busv1.HistoryRequest { return &busv1.HistoryRequest{} }, s.history)},
		{subjects.StateUsage, bus.Handler(s.log, func() *busv1.UsageRequest { return &busv1.UsageRequest{} }, s.usage)},
		{subjects.StateHistoryBatch, bus.Handler(s.log, func() *busv1.HistoryBatchRequest { return &busv1.HistoryBatchRequest{} }, s.historyBatch)},
		{subjects.StateDispatchBatch, bus.Handler(s.log, func() *busv1.DispatchBatchRequest { return &busv1.DispatchBatchRequest{} }, s.dispatchBatch)},
		{subjects.StatePutAgent, bus.Handler(s.log, func() *busv1.PutAgentRequest { return &busv1.PutAgentRequest{} }, s.putAgent)},
		{subjects.StateGetAgent, bus.Handler(s.log, func() *busv1.GetAgentRequest { return &busv1.GetAgentRequest{} }, s.getAgent)},
		{subjects.StateListAgents, bus.Handler(s.log, func() *busv1.ListAgentsRequest { return &busv1.ListAgentsRequest{} }, s.listAgents)},
		{subjects.StateDeleteAgent, bus.Handler(s.log, func() *busv1.DeleteAgentRequest { return &busv1.DeleteAgentRequest{} }, s.deleteAgent)},
		{subjects.StateAgentStats, bus.Handler(s.log, func() *busv1.AgentStatsRequest { return &busv1.AgentStatsRequest{} }, s.agentStats)},
	}
	for _, in := range intents {
		eps = append(eps, struct {
			op string
			h  micro.Handler
		}{in.op, bus.Handler(s.log, func() *busv1.TransitionRequest { return &busv1.TransitionRequest{} }, s.intentHandler(in))})
	}
	eps = append(eps, []struct {
		op string
		h  micro.Handler
	}{
		{subjects.StateCreateTasks, bus.Handler(s.log, func() *busv1.CreateTasksRequest { return &busv1.CreateTasksRequest{} }, s.createTasks)},
		{subjects.StateResolveDependency, bus.Handler(s.log, func() *busv1.ResolveDependencyRequest { return &busv1.ResolveDependencyRequest{} }, s.resolveDependency)},
		{subjects.StateUpdateTask, bus.Handler(s.log, func() *busv1.UpdateTaskRequest { return &busv1.UpdateTaskRequest{} }, s.updateTask)},
		{subjects.StateDeleteTask, bus.Handler(s.log, func() *busv1.DeleteTaskRequest { return &busv1.DeleteTaskRequest{} }, s.deleteTask)},
		{subjects.StateMetrics, bus.Handler(s.log, func() *busv1.MetricsRequest { return &busv1.MetricsRequest{} }, s.metrics)},
		{subjects.StateSpawn, bus.Handler(s.log, func() *busv1.SpawnSubtaskRequest { return &busv1.SpawnSubtaskRequest{} }, s.spawn)},
		{subjects.StateWait, bus.Handler(s.log, func() *busv1.WaitSubtasksRequest { return &busv1.WaitSubtasksRequest{} }, s.waitSubtasks)},
		{subjects.StateWaitExpired, bus.Handler(s.log, func() *busv1.ReleaseSubtaskWaitRequest { return &busv1.ReleaseSubtaskWaitRequest{} }, s.releaseWait)},
		{subjects.StateSettleTask, bus.Handler(s.log, func() *busv1.SettleTaskRequest { return &busv1.SettleTaskRequest{} }, s.settleTask)},
	}...)
	eps = append(eps, s.skillEndpoints()...)
	eps = append(eps, s.opsEndpoints()...)
	eps = append(eps, s.memoryEndpoints()...)
	for _, ep := range eps {
		name := strings.ReplaceAll(ep.op, ".", "-")
		if err := s.svc.AddEndpoint(name, bus.Async(s.nc, s.sem, s.audit.Wrap(ep.h)), micro.WithEndpointSubject(s.names.State(ep.op))); err != nil {
			return fmt.Errorf("add endpoint %s: %w", ep.op, err)
		}
	}
	return nil
}

// Run serves until ctx ends, then stops taking requests, waits (bounded)
// for those in flight and returns nil.
func (s *Service) Run(ctx context.Context) error {
	var loops sync.WaitGroup
	loops.Go(func() { s.gaugeLoop(ctx) })
	loops.Go(func() { s.memoryLoop(ctx) })
	if s.retention > 0 {
		loops.Go(func() { s.retentionLoop(ctx) })
	}
	// The outbox outlives intake by the drain, so the events of the last
	// requests still get their tries.
	outCtx, stopOut := context.WithCancel(context.WithoutCancel(ctx))
	loops.Go(func() { s.events.Run(outCtx) })
	defer loops.Wait()
	defer stopOut()
	// After the drain: the last requests' records go out together (a
	// handler past the drain's bound publishes its own at once).
	defer s.audit.Close()
	<-ctx.Done()
	if err := s.svc.Stop(); err != nil {
		s.log.Warn("stop micro service", "err", err)
	}
	_ = s.live.Unsubscribe()
	timeout := time.After(drainTimeout)
	for range cap(s.sem) {
		select {
		case s.sem <- struct{}{}:
		case <-timeout:
			s.log.Warn("requests still in flight at stop")
			return nil
		}
	}
	for range cap(s.sem) {
		<-s.sem
	}
	for s.events.Len() > 0 {
		select {
		case <-timeout:
			return nil // the outbox reports what it drops
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// ---- publishing ----

// eventToken is the last subject token of a task event.
func eventToken(ev *agentmeshv1.TaskEvent) string {
	switch ev.Type {
	case agentmeshv1.EventType_EVENT_TYPE_CREATED:
		return "created"
	case agentmeshv1.EventType_EVENT_TYPE_STEP:
		return subjects.EventStep
	case agentmeshv1.EventType_EVENT_TYPE_DEPENDENCY:
		return subjects.EventDependency
	case agentmeshv1.EventType_EVENT_TYPE_UPDATED:
		return subjects.EventUpdated
	case agentmeshv1.EventType_EVENT_TYPE_SUBTASK:
		return subjects.EventSubtask
	case agentmeshv1.EventType_EVENT_TYPE_PROPOSAL:
		return subjects.EventProposal
	}
	return subjects.StatusToken(ev.Status)
}

// publishEvents publishes committed events in order and waits for their
// acks. A publish that fails for a passing reason goes to the outbox,
// which sends it again until it is stored; failures are not returned: the
// record is the truth.
func (s *Service) publishEvents(ctx context.Context, events ...*agentmeshv1.TaskEvent) {
	futures := make([]jetstream.PubAckFuture, 0, len(events))
	for _, ev := range events {
		msg, err := bus.NewEventMsg(ctx, s.names.TaskEvent(ev.Org, ev.TaskId, eventToken(ev)), ev)
		if err != nil {
			s.log.ErrorContext(ctx, "event not published", "task_id", ev.TaskId, "seq", ev.Seq, "err", err)
			continue
		}
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s:%d", ev.TaskId, ev.Seq))
		if s.unfollowed(ctx, ev) {
			msg.Header.Set(bus.HeaderFollowers, bus.FollowersNone)
		}
		if f := s.publishAsync(msg); f != nil {
			futures = append(futures, f)
		}
	}
	s.await(ctx, futures)
}

// publishAsync starts the publish of msg; one that cannot start goes to
// the outbox (nil).
func (s *Service) publishAsync(msg *nats.Msg) jetstream.PubAckFuture {
	f, err := s.js.PublishMsgAsync(msg)
	if err != nil {
		s.retryLater(msg, err)
		return nil
	}
	return f
}

// retryLater hands a message whose publish failed to the outbox, unless
// the failure is final.
func (s *Service) retryLater(msg *nats.Msg, err error) {
	if !bus.PublishRetryable(err) {
		s.log.Error("event refused by the bus", "subject", msg.Subject, "err", err)
		return
	}
	s.log.Debug("event not stored yet; the outbox sends it again", "subject", msg.Subject, "err", err)
	if err := s.events.Add(msg, nil); err != nil {
		s.log.Error("event not published", "subject", msg.Subject, "err", err)
	}
}

// unfollowed reports whether ev ends a task that nothing follows (see
// bus.HeaderFollowers and store.Tree's Unfollowed). It is asked after the
// end was committed: publishEvents runs after the write.
func (s *Service) unfollowed(ctx context.Context, ev *agentmeshv1.TaskEvent) bool {
	if ev.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS || !taskstate.Terminal(ev.Status) {
		return false
	}
	none, _, err := s.store.Unfollowed(ctx, ev.TaskId)
	if err != nil {
		s.log.DebugContext(ctx, "followers of an ended task unknown; the scheduler settles it", "task_id", ev.TaskId, "err", err)
		return false
	}
	return none
}

// await waits for each publish's acknowledgement; one that fails, or is
// still unanswered when ctx ends, goes to the outbox (a second copy of a
// stored one is a duplicate the stream drops).
func (s *Service) await(ctx context.Context, futures []jetstream.PubAckFuture) {
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			s.retryLater(f.Msg(), err)
		case <-ctx.Done():
			for _, f := range futures[i:] {
				s.retryLater(f.Msg(), ctx.Err())
			}
			return
		}
	}
}

func (s *Service) publishAgent(ctx context.Context, ev *busv1.AgentEvent) {
	msg, err := bus.NewEventMsg(ctx, s.names.AgentEvent(agentOrg(ev.GetAgent()), ev.GetAgent().GetName()), ev)
	if err != nil {
		s.log.Error("agent event not published", "agent", ev.GetAgent().GetName(), "err", err)
		return
	}
	msg.Header.Set(jetstream.MsgIDHeader, agentEventID(ev))
	if f := s.publishAsync(msg); f != nil {
		s.await(ctx, []jetstream.PubAckFuture{f})
	}
}

// agentEventID is the Nats-Msg-Id of an agent event: the org, the name,
// the version and the time of the change (a deleted and re-created agent
// starts again at version 1), and whether it is the deletion — one id per
// change, the same for a retry of that change.
func agentEventID(ev *busv1.AgentEvent) string {
	a := ev.GetAgent()
	id := fmt.Sprintf("agent:%s:%s:%d:%d", a.GetOrg(), a.GetName(), a.GetVersion(), a.GetUpdatedAt().AsTime().UnixNano())
	if ev.Deleted {
		id += ":deleted"
	}
	return id
}

// republish publishes the latest event of every unfinished task. Msg-Id
// de-duplication makes this harmless for events the bus already has.
func (s *Service) republish(ctx context.Context) error {
	q := store.TaskQuery{
		Statuses: []agentmeshv1.TaskStatus{taskstate.Created, taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked},
		PageSize: store.MaxPageSize,
	}
	n := 0
	for {
		tasks, next, err := s.store.ListTasks(ctx, q)
		if err != nil {
			return err
		}
		var last []*agentmeshv1.TaskEvent
		for _, t := range tasks {
			evs, err := s.store.History(ctx, t.Id, t.LastEventSeq-1, 1)
			if err != nil {
				s.log.WarnContext(ctx, "republish: read history", "task_id", t.Id, "err", err)
				continue
			}
			last = append(last, evs...)
		}
		s.publishEvents(ctx, last...)
		n += len(last)
		if next == "" {
			break
		}
		q.PageToken = next
	}
	if n > 0 {
		s.log.Info("republished the latest event of unfinished tasks", "tasks", n)
	}
	return nil
}

// ---- handlers ----

func (s *Service) createTask(ctx context.Context, req *busv1.CreateTaskRequest) (*busv1.CreateTaskResponse, error) {
	t := req.GetTask()
	switch {
	case t == nil:
		return nil, bus.FieldError("task", "a task is required")
	case t.Agent == "":
		return nil, bus.FieldError("task.agent", "an agent is required")
	case !subjects.ValidToken(t.Agent):
		return nil, bus.FieldError("task.agent", "%q is not a valid agent name", t.Agent)
	}
	t.Id = "" // ids are the record's
	if t.ThreadId != "" {
		return s.createInThread(ctx, t) // threads.go
	}
	return s.commitCreate(ctx, t)
}

// commitCreate records a new task (an id set by the caller in this
// service is kept) and publishes its events.
func (s *Service) commitCreate(ctx context.Context, t *agentmeshv1.Task) (*busv1.CreateTaskResponse, error) {
	s.placeInTree(ctx, t)
	if t.Traceparent == "" {
		t.Traceparent = telemetry.Traceparent(ctx) // the router sets the API call's
	}
	s.lookUpCache(ctx, t) // cache.go
	task, events, created, err := s.store.CreateTask(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("create task: %w", err)
	}
	if created {
		for _, ev := range events {
			observe(task, ev)
		}
		s.cacheables.note(task) // cache.go
		s.publishTaskEvents(ctx, task, events...)
		if task.PendingProposal != nil {
			task = s.recordProposal(ctx, task)
		}
		task = s.recheckParents(ctx, task)
		task = s.spawned(ctx, task)
	}
	return &busv1.CreateTaskResponse{Task: task, Created: created}, nil
}

// taskOf returns the task, not_found when org is set and is not its org.
func (s *Service) taskOf(ctx context.Context, id, org string) (*agentmeshv1.Task, error) {
	if id == "" {
		return nil, bus.FieldError("id", "a task id is required")
	}
	t, err := s.store.GetTask(ctx, id)
	if err != nil {
		return nil, err
	}
	if org != "" && t.Org != org {
		return nil, store.TaskNotFound(id)
	}
	return t, nil
}

func (s *Service) getTask(ctx context.Context, req *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
	t, err := s.taskOf(ctx, req.Id, req.Org)
	if err != nil {
		return nil, err
	}
	return &busv1.GetTaskResponse{Task: t}, nil
}

func validStatus(st agentmeshv1.TaskStatus) bool {
	_, ok := agentmeshv1.TaskStatus_name[int32(st)]
	return ok && st != agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED
}

func (s *Service) listTasks(ctx context.Context, req *busv1.ListTasksRequest) (*busv1.ListTasksResponse, error) {
	if req.PageSize < 0 {
		return nil, bus.FieldError("page_size", "must not be negative")
	}
	for _, st := range req.Statuses {
		if !validStatus(st) {
			return nil, bus.FieldError("statuses", "%v is not a task status", st)
		}
	}
	q := store.TaskQuery{Org: req.Org, Statuses: req.Statuses, Agent: req.Agent, PageSize: int(req.PageSize), PageToken: req.PageToken,
		Tag: req.Tag, Priorities: req.Priorities, ParentTaskID: req.ParentTaskId, WaitingOn: req.WaitingOn,
		RootTaskID: req.RootTaskId}
	if req.UpdatedAfter != nil {
		if err := req.UpdatedAfter.CheckValid(); err != nil {
			return nil, bus.FieldError("updated_after", "%v", err)
		}
		q.UpdatedAfter = req.UpdatedAfter.AsTime()
	}
	for _, ts := range []struct {
		field string
		in    *timestamppb.Timestamp
		out   *time.Time
	}{
		{"created_after", req.CreatedAfter, &q.CreatedAfter},
		{"created_before", req.CreatedBefore, &q.CreatedBefore},
		{"updated_before", req.UpdatedBefore, &q.UpdatedBefore},
	} {
		if ts.in == nil {
			continue
		}
		if err := ts.in.CheckValid(); err != nil {
			return nil, bus.FieldError(ts.field, "%v", err)
		}
		*ts.out = ts.in.AsTime()
	}
	tasks, next, err := s.store.ListTasks(ctx, q)
	if err != nil {
		return nil, err
	}
	return fitPage(tasks, next), nil
}

// fitPage cuts a page of tasks so that its reply fits in one bus message
// (the rest comes with the next page: tokens are the last task's id in
// both stores).
func fitPage(tasks []*agentmeshv1.Task, next string) *busv1.ListTasksResponse {
	const budget = bus.MaxPayload - 64<<10 // room for headers and framing
	size := 0
	for i, t := range tasks {
		size += proto.Size(t) + 8
		if size > budget && i > 0 {
			return &busv1.ListTasksResponse{Tasks: tasks[:i], NextPageToken: store.EncodeToken(tasks[i-1].Id)}
		}
	}
	return &busv1.ListTasksResponse{Tasks: tasks, NextPageToken: next}
}

// transition applies a request an intent has checked.
func (s *Service) transition(ctx context.Context, req *busv1.TransitionRequest) (*busv1.TransitionResponse, error) {
	switch {
	case req.TaskId == "":
		return nil, bus.FieldError("task_id", "a task id is required")
	case !validStatus(req.To):
		return nil, bus.FieldError("to", "a target status is required")
	case req.From != agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED && !validStatus(req.From):
		return nil, bus.FieldError("from", "%v is not a task status", req.From)
	case req.Attempt < 0:
		return nil, bus.FieldError("attempt", "must not be negative")
	}
	if req.Org != "" {
		if _, err := s.taskOf(ctx, req.TaskId, req.Org); err != nil {
			return nil, err
		}
	}
	tr := store.Transition{
		TaskID: req.TaskId, From: req.From, To: req.To, Attempt: req.Attempt, NextAttempt: req.NextAttempt,
		Reason: req.Reason, Result: req.Result, Node: req.Node,
		Approval: req.Approval, FailureKind: req.FailureKind, Isolation: req.Isolation, Proposal: req.Proposal,
	}
	if nb := req.GetNotBefore(); nb != nil {
		tr.NotBefore = nb.AsTime() // the intent allowed it (intents.go)
	}
	if len(req.Steps) > 0 {
		// The steps and the move in one write (the intent allowed them).
		if err := checkSteps("steps", req.Steps, func(i int) string { return fmt.Sprintf("steps[%d]", i) }); err != nil {
			return nil, err
		}
		t, evs, err := s.store.Checkpoint(ctx, req.TaskId, req.Attempt, req.Steps, &tr)
		if err != nil {
			return nil, fmt.Errorf("transition task %s: %w", req.TaskId, err)
		}
		ev := evs[len(evs)-1]
		observe(t, ev)
		s.publishTaskEvents(ctx, t, evs...)
		return &busv1.TransitionResponse{Task: t, Event: ev, StepEvents: evs[:len(evs)-1]}, nil
	}
	t, ev, err := s.store.Transition(ctx, tr)
	if err != nil {
		return nil, fmt.Errorf("transition task %s: %w", req.TaskId, err)
	}
	observe(t, ev)
	s.publishTaskEvents(ctx, t, ev)
	traceApproval(ctx, t, ev)
	if ev.Proposal != nil {
		t = s.recordProposal(ctx, t)
	}
	return &busv1.TransitionResponse{Task: t, Event: ev}, nil
}

// MaxStepsPerWrite bounds the steps one request checkpoints together.
const MaxStepsPerWrite = 16

// checkSteps refuses a list of steps to write together that is too long,
// holds no step, or whose indexes do not increase; list names the list in
// the request, field its step i.
func checkSteps(list string, steps []*agentmeshv1.Step, field func(i int) string) error {
	if len(steps) > MaxStepsPerWrite {
		return bus.FieldError(list, "%d steps; at most %d in one write", len(steps), MaxStepsPerWrite)
	}
	for i, st := range steps {
		switch {
		case st == nil:
			return bus.FieldError(field(i), "a step is required")
		case st.Index < 0:
			return bus.FieldError(field(i)+".index", "must not be negative")
		case i > 0 && st.Index <= steps[i-1].Index:
			return bus.FieldError(field(i)+".index", "step indexes must increase (%d after %d)", st.Index, steps[i-1].Index)
		}
	}
	return nil
}

func (s *Service) appendStep(ctx context.Context, req *busv1.AppendStepRequest) (*busv1.AppendStepResponse, error) {
	switch {
	case req.TaskId == "":
		return nil, bus.FieldError("task_id", "a task id is required")
	case req.Attempt <= 0:
		return nil, bus.FieldError("attempt", "the attempt (fencing token) is required")
	case req.Step == nil:
		return nil, bus.FieldError("step", "a step is required")
	}
	if len(req.MoreSteps) == 0 {
		_, ev, err := s.store.AppendStep(ctx, req.TaskId, req.Attempt, req.Step)
		if err != nil {
			return nil, fmt.Errorf("append step to task %s: %w", req.TaskId, err)
		}
		s.publishEvents(ctx, ev)
		return &busv1.AppendStepResponse{Event: ev}, nil
	}
	steps := append([]*agentmeshv1.Step{req.Step}, req.MoreSteps...)
	if err := checkSteps("more_steps", steps, func(i int) string {
		if i == 0 {
			return "step"
		}
		return fmt.Sprintf("more_steps[%d]", i-1)
	}); err != nil {
		return nil, err
	}
	_, evs, err := s.store.Checkpoint(ctx, req.TaskId, req.Attempt, steps, nil)
	if err != nil {
		return nil, fmt.Errorf("append steps to task %s: %w", req.TaskId, err)
	}
	s.publishEvents(ctx, evs...)
	return &busv1.AppendStepResponse{Event: evs[0], MoreEvents: evs[1:]}, nil
}

// usage sums the tokens and cost of an org's tasks created in a range.
func (s *Service) usage(ctx context.Context, req *busv1.UsageRequest) (*busv1.UsageResponse, error) {
	if req.Org == "" {
		return nil, bus.FieldError("org", "an org is required")
	}
	var from, to time.Time
	for _, ts := range []struct {
		field string
		in    *timestamppb.Timestamp
		out   *time.Time
	}{
		{"created_after", req.CreatedAfter, &from},
		{"created_before", req.CreatedBefore, &to},
	} {
		if ts.in == nil {
			continue
		}
		if err := ts.in.CheckValid(); err != nil {
			return nil, bus.FieldError(ts.field, "%v", err)
		}
		*ts.out = ts.in.AsTime()
	}
	u, n, err := s.store.Usage(ctx, req.Org, req.Agent, from, to)
	if err != nil {
		return nil, fmt.Errorf("usage of org %s: %w", req.Org, err)
	}
	return &busv1.UsageResponse{Usage: u, Tasks: n}, nil
}

func (s *Service) history(ctx context.Context, req *busv1.HistoryRequest) (*busv1.HistoryResponse, error) {
	switch {
	case req.TaskId == "":
		return nil, bus.FieldError("task_id", "a task id is required")
	case req.AfterSeq < 0:
		return nil, bus.FieldError("after_seq", "must not be negative")
	case req.Limit < 0:
		return nil, bus.FieldError("limit", "must not be negative")
	}
	t, err := s.taskOf(ctx, req.TaskId, req.Org)
	if err != nil {
		return nil, err
	}
	events, err := s.store.History(ctx, req.TaskId, req.AfterSeq, int(req.Limit))
	if err != nil {
		return nil, err
	}
	resp := &busv1.HistoryResponse{Events: events, Status: t.Status, LastSeq: t.LastEventSeq}
	if n := len(events); n > 0 {
		resp.Status = events[n-1].Status
		resp.LastSeq = max(resp.LastSeq, events[n-1].Seq)
	}
	if req.AfterSeq > resp.LastSeq {
		// The cursor is past the task read above: the embedded store
		// appends an event before it rewrites the task, so a watcher may
		// have seen event AfterSeq on the bus while the task still says
		// AfterSeq-1. The events decide (WatchTask would refuse a cursor
		// it just handed out).
		at, err := s.store.History(ctx, req.TaskId, req.AfterSeq-1, 1)
		if err != nil {
			return nil, err
		}
		if len(at) == 1 && at[0].Seq == req.AfterSeq {
			resp.LastSeq, resp.Status = at[0].Seq, at[0].Status
		}
	}
	return resp, nil
}

func (s *Service) putAgent(ctx context.Context, req *busv1.PutAgentRequest) (*busv1.PutAgentResponse, error) {
	a := req.GetAgent()
	switch {
	case a == nil:
		return nil, bus.FieldError("agent", "an agent is required")
	case a.Org != "" && !subjects.ValidToken(a.Org):
		return nil, bus.FieldError("agent.org", "%q is not a valid org", a.Org)
	case req.ExpectedVersion < 0:
		return nil, bus.FieldError("expected_version", "must not be negative")
	case a.Ephemeral:
		return nil, bus.FieldError("agent.ephemeral", "an ephemeral agent (approved for one task) is never saved to the catalogue")
	}
	// The one rule for agents (the router and the registry check it too).
	if err := agentspec.Agent(a); err != nil {
		return nil, err
	}
	// Every skill offered is in the org's or the shared catalogue.
	if err := s.unknownSkills(ctx, a); err != nil {
		return nil, err
	}
	got, err := s.store.PutAgent(ctx, a, req.Create, req.ExpectedVersion)
	if errors.Is(err, bus.ErrNotFound) && !req.Create {
		err = s.sharedOnly(ctx, a.Org, a.Name, "change", err)
	}
	if err != nil {
		return nil, fmt.Errorf("put agent %q: %w", a.Name, err)
	}
	s.publishAgent(ctx, &busv1.AgentEvent{Agent: got})
	return &busv1.PutAgentResponse{Agent: got}, nil
}

// sharedOnly turns notFound, the answer for org's agent named name, into
// permission_denied when that name is a shared agent's: an org reads the
// shared agents but never changes them.
func (s *Service) sharedOnly(ctx context.Context, org, name, verb string, notFound error) error {
	if org == "" {
		return notFound
	}
	if _, err := s.store.GetAgent(ctx, "", name); err != nil {
		return notFound
	}
	return bus.Errorf(bus.CodePermissionDenied, "agent %q is shared: orgs may use it but not %s it (a platform key manages shared agents)", name, verb)
}

// getAgent answers the org's own agent of that name, else the shared one.
func (s *Service) getAgent(ctx context.Context, req *busv1.GetAgentRequest) (*busv1.GetAgentResponse, error) {
	if req.Name == "" {
		return nil, bus.FieldError("name", "a name is required")
	}
	a, err := s.store.GetAgent(ctx, req.Org, req.Name)
	if errors.Is(err, bus.ErrNotFound) && req.Org != "" {
		a, err = s.store.GetAgent(ctx, "", req.Name)
	}
	if err == nil && req.Version > 0 && req.Version != a.Version {
		// An earlier version of the agent found (skills.go).
		a, err = s.store.GetAgentVersion(ctx, a.Org, req.Name, req.Version)
	}
	if err != nil {
		return nil, err
	}
	return &busv1.GetAgentResponse{Agent: a}, nil
}

func (s *Service) listAgents(ctx context.Context, req *busv1.ListAgentsRequest) (*busv1.ListAgentsResponse, error) {
	if req.PageSize < 0 {
		return nil, bus.FieldError("page_size", "must not be negative")
	}
	agents, next, err := s.store.ListAgents(ctx, store.AgentQuery{Org: req.Org, Skill: req.Skill, PageSize: int(req.PageSize), PageToken: req.PageToken})
	if err != nil {
		return nil, err
	}
	return &busv1.ListAgentsResponse{Agents: agents, NextPageToken: next}, nil
}

func (s *Service) deleteAgent(ctx context.Context, req *busv1.DeleteAgentRequest) (*busv1.DeleteAgentResponse, error) {
	if req.Name == "" {
		return nil, bus.FieldError("name", "a name is required")
	}
	a, err := s.store.GetAgent(ctx, req.Org, req.Name)
	if errors.Is(err, bus.ErrNotFound) {
		err = s.sharedOnly(ctx, req.Org, req.Name, "delete", err)
	}
	if err != nil {
		return nil, err
	}
	if err := s.store.DeleteAgent(ctx, req.Org, req.Name); err != nil {
		return nil, fmt.Errorf("delete agent %q: %w", req.Name, err)
	}
	s.publishAgent(ctx, &busv1.AgentEvent{Agent: a, Deleted: true})
	return &busv1.DeleteAgentResponse{}, nil
}
