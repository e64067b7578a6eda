package state

// Threads: SubmitTask's thread_id groups tasks into a conversation, each
// continuing the one before (continue_from, which the executor already
// carries), and a thread runs one task at a time. The thread record (the
// store's Threads) names its head — the newest task — and is changed by
// compare-and-set on its revision, so two submits racing on one thread are
// ordered: the first moves the head to its new task (whose id is chosen
// before, so the thread never names a task it did not plan), the second
// reads the thread again and finds it busy.
//
// A new task on a thread whose unfinished tasks are U (the head and the
// unfinished tasks it continues) and whose last finished one is F:
//
//	U empty    continue from the head
//	reject     refused: FailedPrecondition naming the busy task
//	enqueue    continue from the head, after it (depends_on the head,
//	           run anyway): messages queue up in order
//	interrupt  continue from the head, after U (depends_on U, run
//	           anyway); U are cancelled right after the new task is
//	           committed — their steps so far are its context
//	rollback   continue from F, after U; U are cancelled and, being in
//	           nobody's continue_from, dropped from the conversation
//
// The new task is committed before anything is cancelled (accepted means
// durable; a failed create cancels nothing), and it cannot start before
// the tasks it waits on have ended. A crash between the thread's write and
// the task's leaves a head that names no task: the next submit passes over
// it to the head before (previous_head_task_id). Every task of a thread
// carries the reserved tag "thread:<id>", which DeleteThread lists.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/memory"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// ThreadTag is the reserved tag of a thread's tasks.
func ThreadTag(id string) string { return "thread:" + id }

const (
	// threadPatience bounds how long a submit keeps trying: its
	// compare-and-set losing to other submits, or the head it read not
	// recorded yet.
	threadPatience = 5 * time.Second
	// pendingHead: a head written this recently whose task is not found
	// is being created (its submit wrote the thread first); older, it is
	// the remnant of a crash between the two writes, passed over.
	pendingHead = 10 * time.Second
	// maxUnfinished bounds the unfinished tasks a new one may wait on.
	maxUnfinished = 64
)

var (
	policyReject    = agentmeshv1.ThreadPolicy_THREAD_POLICY_REJECT
	policyEnqueue   = agentmeshv1.ThreadPolicy_THREAD_POLICY_ENQUEUE
	policyInterrupt = agentmeshv1.ThreadPolicy_THREAD_POLICY_INTERRUPT
	policyRollback  = agentmeshv1.ThreadPolicy_THREAD_POLICY_ROLLBACK
)

// threadPlan is what a new task on a thread does.
type threadPlan struct {
	continueFrom string
	dependsOn    []string
	cancel       []*agentmeshv1.Task
}

// createInThread records t as the thread's next task.
func (s *Service) createInThread(ctx context.Context, t *agentmeshv1.Task) (*busv1.CreateTaskResponse, error) {
	if err := memory.CheckThreadID(t.ThreadId); err != nil {
		return nil, bus.FieldError("task.thread_id", "%v", err)
	}
	if t.ContinueFrom != "" || len(t.DependsOn) > 0 {
		return nil, bus.FieldError("task.thread_id", "a thread's task continues the thread: not with continue_from or depends_on")
	}
	if t.ThreadPolicy == agentmeshv1.ThreadPolicy_THREAD_POLICY_UNSPECIFIED {
		t.ThreadPolicy = policyReject
	}
	deadline := s.keep.now().Add(threadPatience)
	for s.keep.now().Before(deadline) {
		th, err := s.keep.store.GetThread(ctx, t.Org, t.ThreadId)
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return nil, err
		}
		plan, err := s.planThread(ctx, th, t)
		if errors.Is(err, errHeadPending) {
			if !backoff.Sleep(ctx, 5*time.Millisecond) {
				return nil, ctx.Err()
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		next := &agentmeshv1.Thread{Id: t.ThreadId, Org: t.Org, HeadTaskId: store.NewID(s.keep.now()),
			PreviousHeadTaskId: th.GetHeadTaskId(), Agent: t.Agent, TaskCount: th.GetTaskCount() + 1, CreatedAt: th.GetCreatedAt()}
		written, err := s.keep.store.PutThread(ctx, next, th.GetRevision())
		if errors.Is(err, bus.ErrConflict) {
			continue // another submit moved the head: plan again
		}
		if err != nil {
			return nil, err
		}
		in := proto.Clone(t).(*agentmeshv1.Task)
		in.Id, in.ContinueFrom, in.DependsOn = next.HeadTaskId, plan.continueFrom, plan.dependsOn
		if len(plan.dependsOn) > 0 {
			in.DependencyPolicy = agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_RUN_ANYWAY
		}
		if !slices.Contains(in.Tags, ThreadTag(t.ThreadId)) {
			in.Tags = append(in.Tags, ThreadTag(t.ThreadId))
		}
		resp, err := s.commitCreate(ctx, in)
		if err != nil || !resp.GetCreated() {
			// Nothing new in the thread (a failure, or an idempotent
			// submit answered with its first task): put the head back.
			s.restoreThread(ctx, th, written)
			return resp, err
		}
		for _, u := range plan.cancel {
			s.cancelForThread(ctx, u, in)
		}
		if len(plan.cancel) > 0 {
			resp.Task = s.recheckParents(ctx, resp.Task)
		}
		return resp, nil
	}
	return nil, &bus.Error{Code: bus.CodeConflict, Field: "task.thread_id", Message: "thread " + t.ThreadId + ": too many submits at once; retry"}
}

// restoreThread puts back the thread as it was before written (deleting a
// thread that did not exist), unless it moved on since.
func (s *Service) restoreThread(ctx context.Context, before, written *agentmeshv1.Thread) {
	var err error
	if before == nil {
		err = s.keep.store.DeleteThread(ctx, written.Org, written.Id, written.Revision)
	} else {
		back := proto.Clone(before).(*agentmeshv1.Thread)
		_, err = s.keep.store.PutThread(ctx, back, written.Revision)
	}
	if err != nil && !errors.Is(err, bus.ErrConflict) {
		s.log.Warn("thread head not put back", "thread", written.Id, "org", written.Org, "err", err)
	}
}

// planThread decides, from the thread as it stands (nil: new), what t
// continues and waits for.
func (s *Service) planThread(ctx context.Context, th *agentmeshv1.Thread, t *agentmeshv1.Task) (threadPlan, error) {
	head, err := s.threadHead(ctx, th)
	if err != nil || head == nil {
		return threadPlan{}, err
	}
	var unfinished []*agentmeshv1.Task
	last := head // the last finished task once the loop ends (nil: none)
	for last != nil && !taskstate.Terminal(last.Status) && len(unfinished) < maxUnfinished {
		unfinished = append(unfinished, last)
		last, err = s.threadTask(ctx, t.Org, last.ContinueFrom, t.ThreadId)
		if err != nil {
			return threadPlan{}, err
		}
	}
	if len(unfinished) == 0 {
		return threadPlan{continueFrom: head.Id}, nil
	}
	ids := make([]string, len(unfinished))
	for i, u := range unfinished {
		ids[i] = u.Id
	}
	switch t.ThreadPolicy {
	case policyEnqueue:
		return threadPlan{continueFrom: head.Id, dependsOn: []string{head.Id}}, nil
	case policyInterrupt:
		return threadPlan{continueFrom: head.Id, dependsOn: ids, cancel: unfinished}, nil
	case policyRollback:
		p := threadPlan{dependsOn: ids, cancel: unfinished}
		if last != nil {
			p.continueFrom = last.Id
		}
		return p, nil
	case policyReject:
		if retried(unfinished, t) {
			// A submit sent again (its reply was lost): planned as if
			// enqueued, the store answers it with its first task by its
			// idempotency key, and the head is put back.
			return threadPlan{continueFrom: head.Id, dependsOn: []string{head.Id}}, nil
		}
		return threadPlan{}, &bus.Error{Code: bus.CodeFailedPrecondition, Field: "thread_id",
			Message: fmt.Sprintf("thread %s is busy: task %s is %s (policy reject; submit with enqueue, interrupt or rollback to act on it)", t.ThreadId, head.Id, taskstate.Name(head.Status))}
	}
	return threadPlan{}, bus.FieldError("thread_policy", "unknown thread policy %v", t.ThreadPolicy)
}

// errHeadPending: the thread's head was written moments ago and its task
// is not recorded yet (its submit is between the two writes).
var errHeadPending = errors.New("thread head not recorded yet")

// retried reports whether t is a submit sent again of one of the tasks
// (same idempotency key).
func retried(tasks []*agentmeshv1.Task, t *agentmeshv1.Task) bool {
	for _, u := range tasks {
		if t.IdempotencyKey != "" && u.IdempotencyKey == t.IdempotencyKey {
			return true
		}
	}
	return false
}

// threadHead is the thread's newest recorded task: its head, or the head
// before it when the head was never recorded (nil: a new or empty thread);
// errHeadPending while the head may still be being recorded.
func (s *Service) threadHead(ctx context.Context, th *agentmeshv1.Thread) (*agentmeshv1.Task, error) {
	for i, id := range []string{th.GetHeadTaskId(), th.GetPreviousHeadTaskId()} {
		t, err := s.threadTask(ctx, th.GetOrg(), id, th.GetId())
		if t != nil || err != nil {
			return t, err
		}
		if i == 0 && id != "" && s.keep.now().Sub(th.GetUpdatedAt().AsTime()) < pendingHead {
			return nil, errHeadPending
		}
	}
	return nil, nil
}

// threadTask reads a task of the thread (nil when id is empty, not found
// or not the org's thread's).
func (s *Service) threadTask(ctx context.Context, org, id, thread string) (*agentmeshv1.Task, error) {
	if id == "" {
		return nil, nil
	}
	t, err := s.store.GetTask(ctx, id)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if t.Org != org || t.ThreadId != thread {
		return nil, nil
	}
	return t, nil
}

// cancelForThread cancels an unfinished task of a thread for the task
// that interrupts or rolls it back.
func (s *Service) cancelForThread(ctx context.Context, u, by *agentmeshv1.Task) {
	how := "interrupted"
	if by.ThreadPolicy == policyRollback {
		how = "rolled back"
	}
	_, err := s.transition(ctx, &busv1.TransitionRequest{TaskId: u.Id, Org: u.Org, To: taskstate.Cancelled,
		Reason: fmt.Sprintf("%s by task %s on thread %s", how, by.Id, by.ThreadId)})
	if err != nil && !errors.Is(err, bus.ErrFailedPrecondition) { // one that ended meanwhile stays as it ended
		s.log.Warn("thread task not cancelled", "task", u.Id, "by", by.Id, "err", err)
	}
}

// ---- the API ----

func (s *Service) listThreads(ctx context.Context, op *busv1.ThreadOp) (*agentmeshv1.ListThreadsResponse, error) {
	if err := checkOrg(op.GetOrg()); err != nil {
		return nil, err
	}
	req := op.GetList()
	ths, next, err := s.keep.store.ListThreads(ctx, op.GetOrg(), int(req.GetPageSize()), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.ListThreadsResponse{Threads: ths, NextPageToken: next}, nil
}

// maxThreadTasks bounds the conversation GetThread returns.
const maxThreadTasks = 100

func (s *Service) getThread(ctx context.Context, op *busv1.ThreadOp) (*agentmeshv1.GetThreadResponse, error) {
	req := op.GetGet()
	if err := checkOrg(op.GetOrg()); err != nil {
		return nil, err
	}
	if err := memory.CheckThreadID(req.GetId()); err != nil {
		return nil, bus.FieldError("id", "%v", err)
	}
	n := int(req.GetMaxTasks())
	switch {
	case n < 0 || n > maxThreadTasks:
		return nil, bus.FieldError("max_tasks", "0 to %d", maxThreadTasks)
	case n == 0:
		n = 20
	}
	th, err := s.keep.store.GetThread(ctx, op.GetOrg(), req.GetId())
	if err != nil {
		return nil, err
	}
	var tasks []*agentmeshv1.Task
	t, err := s.threadHead(ctx, th)
	for ; t != nil && err == nil && len(tasks) < n; t, err = s.threadTask(ctx, th.Org, t.ContinueFrom, th.Id) {
		c := proto.Clone(t).(*agentmeshv1.Task)
		c.AgentSpec = nil
		tasks = append(tasks, c)
	}
	if err != nil {
		return nil, err
	}
	slices.Reverse(tasks)
	return &agentmeshv1.GetThreadResponse{Thread: th, Tasks: tasks}, nil
}

func (s *Service) deleteThread(ctx context.Context, op *busv1.ThreadOp) (*agentmeshv1.DeleteThreadResponse, error) {
	id := op.GetDelete().GetId()
	if err := checkOrg(op.GetOrg()); err != nil {
		return nil, err
	}
	if err := memory.CheckThreadID(id); err != nil {
		return nil, bus.FieldError("id", "%v", err)
	}
	th, err := s.keep.store.GetThread(ctx, op.GetOrg(), id)
	if err != nil {
		return nil, err
	}
	var ids []string
	q := store.TaskQuery{Org: op.GetOrg(), Tag: ThreadTag(id), PageSize: store.MaxPageSize}
	for {
		ts, next, err := s.store.ListTasks(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if !taskstate.Terminal(t.Status) {
				return nil, bus.Errorf(bus.CodeFailedPrecondition, "thread %s: task %s is %s; cancel it or wait for it to end first", id, t.Id, taskstate.Name(t.Status))
			}
			ids = append(ids, t.Id)
		}
		if q.PageToken = next; next == "" {
			break
		}
	}
	// The thread first: a submit racing the delete then starts a new
	// thread instead of continuing a task about to go.
	if err := s.keep.store.DeleteThread(ctx, op.GetOrg(), id, th.Revision); err != nil {
		return nil, err
	}
	var deleted int64
	for _, tid := range ids {
		if _, err := s.deleteTask(ctx, &busv1.DeleteTaskRequest{Id: tid, Org: op.GetOrg()}); err != nil && !errors.Is(err, bus.ErrNotFound) {
			return nil, fmt.Errorf("thread %s deleted, but its task %s: %w", id, tid, err)
		}
		deleted++
	}
	s.log.Info("thread deleted", "org", op.GetOrg(), "thread", id, "tasks", deleted, "by", op.GetKeyName())
	return &agentmeshv1.DeleteThreadResponse{Thread: th, DeletedTasks: deleted}, nil
}
