package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The planning functions below decide what a write does; the stores only
// persist their output atomically. Keeping the decision here keeps the two
// stores' semantics identical.

var (
	entropyMu sync.Mutex
	entropy   = ulid.Monotonic(rand.Reader, 0)
)

// NewID returns a new ULID: unique, and sorting by creation time.
func NewID(now time.Time) string {
	entropyMu.Lock()
	defer entropyMu.Unlock()
	return ulid.MustNew(ulid.Timestamp(now), entropy).String()
}

// PlanCreate returns the task to insert and its first two events
// (created, then queued). t is not modified. t's id is kept when set (the
// state service chooses a thread's next task's id before it records the
// thread; threads.go), else a new one is made.
func PlanCreate(t *agentmeshv1.Task, now time.Time) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent) {
	task := proto.Clone(t).(*agentmeshv1.Task)
	if task.Id == "" {
		task.Id = NewID(now)
	}
	task.Status = agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED
	task.Attempt = 0
	task.LastEventSeq = 0
	task.StepCount = 0
	task.Usage = nil
	task.Result, task.Error, task.Node, task.Isolation = "", "", "", ""
	task.StartedAt, task.FinishedAt = nil, nil
	ts := timestamppb.New(now)
	created := &agentmeshv1.TaskEvent{
		TaskId: task.Id, Seq: 1, Type: agentmeshv1.EventType_EVENT_TYPE_CREATED,
		Time: ts, Status: taskstate.Created, Org: task.Org,
		Created: createdSummary(task),
	}
	task = taskstate.Apply(task, created)
	queued := &agentmeshv1.TaskEvent{
		TaskId: task.Id, Seq: 2, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS,
		Time: ts, FromStatus: taskstate.Created, Status: taskstate.Queued, Org: task.Org,
	}
	planProposalCreate(t, task, queued, now)
	planCachedCreate(t, task, queued) // cache.go
	taskstate.StampStatusEvent(queued, task)
	task = taskstate.Apply(task, queued)
	return task, []*agentmeshv1.TaskEvent{created, queued}
}

// createdSummary is what the created event tells a live task list of the
// new task (WatchTasks, taps), so it need not read the task. A root task's
// root_task_id is left empty: it is its own (its id may still change,
// setID).
func createdSummary(t *agentmeshv1.Task) *agentmeshv1.TaskCreated {
	c := &agentmeshv1.TaskCreated{
		Title: t.Title, Tags: slices.Clone(t.Tags), ParentTaskId: t.ParentTaskId, Depth: t.Depth,
		CreatedBy: t.CreatedBy, DependsOn: slices.Clone(t.DependsOn),
	}
	if t.ParentTaskId != "" {
		c.RootTaskId = t.RootTaskId
	}
	return c
}

// PlanTransition validates tr against the task's current state and returns
// the event to append and the task after it.
func PlanTransition(cur *agentmeshv1.Task, tr Transition, now time.Time) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	if tr.To == agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
		return nil, nil, bus.FieldError("to", "a target status is required")
	}
	if tr.From != agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED && cur.Status != tr.From {
		return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s is %s, not %s",
			cur.Id, taskstate.Name(cur.Status), taskstate.Name(tr.From))
	}
	if tr.Attempt > 0 && cur.Attempt != tr.Attempt {
		return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s: stale attempt %d (current %d)",
			cur.Id, tr.Attempt, cur.Attempt)
	}
	if err := taskstate.Check(cur.Status, tr.To); err != nil {
		return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s: %v", cur.Id, err)
	}
	attempt := cur.Attempt
	if tr.NextAttempt {
		attempt++
	}
	approval, err := planApproval(cur, tr, now)
	if err != nil {
		return nil, nil, err
	}
	proposal, err := planProposal(cur, tr, now)
	if err != nil {
		return nil, nil, err
	}
	ev := &agentmeshv1.TaskEvent{
		TaskId: cur.Id, Seq: cur.LastEventSeq + 1, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS,
		Time: timestamppb.New(now), FromStatus: cur.Status, Status: tr.To,
		Reason: tr.Reason, Attempt: attempt, Result: tr.Result, Org: cur.Org, Node: tr.Node,
		Approval: approval, Isolation: tr.Isolation, Proposal: proposal,
	}
	if tr.To == taskstate.Failed {
		ev.FailureKind = tr.FailureKind
		planRetry(cur, ev, now)
	}
	if tr.To == taskstate.Queued && !tr.NotBefore.IsZero() {
		ev.NotBefore = timestamppb.New(tr.NotBefore)
	}
	taskstate.StampStatusEvent(ev, cur)
	return taskstate.Apply(cur, ev), ev, nil
}

// planApproval checks the approval a transition carries and fills in what
// the record sets (id, times, task, org, attempt). A task blocked on an
// approval leaves blocked only with its decision, or by cancel or failure.
func planApproval(cur *agentmeshv1.Task, tr Transition, now time.Time) (*agentmeshv1.Approval, error) {
	pending := cur.PendingApproval
	a := tr.Approval
	switch {
	case tr.To == taskstate.Blocked && a != nil:
		if a.Status != agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING {
			return nil, bus.FieldError("approval.status", "a requested approval must be pending")
		}
		if a.Tool == "" || a.ToolCallId == "" {
			return nil, bus.FieldError("approval", "tool and tool_call_id are required")
		}
		out := proto.Clone(a).(*agentmeshv1.Approval)
		out.Id = taskstate.ApprovalID(cur.Id, cur.LastEventSeq+1)
		out.TaskId, out.Org, out.Agent = cur.Id, cur.Org, cur.Agent
		// The record fixes what is approved: the tool and the SHA-256 of
		// these exact arguments (a resumed call must match both).
		sum := sha256.Sum256([]byte(out.Arguments))
		out.ArgumentsSha256 = hex.EncodeToString(sum[:])
		out.CreatedAt = timestamppb.New(now)
		if out.Deadline == nil {
			out.Deadline = timestamppb.New(now.Add(DefaultApprovalTimeout))
		}
		if out.Attempt == 0 {
			out.Attempt = cur.Attempt
		}
		return out, nil
	case cur.Status == taskstate.Blocked && pending != nil:
		if a == nil {
			if tr.To == taskstate.Cancelled || tr.To == taskstate.Failed {
				return nil, nil
			}
			return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s waits for approval %s; decide it first", cur.Id, pending.Id)
		}
		if a.Id != pending.Id {
			return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s waits for approval %s, not %s", cur.Id, pending.Id, a.Id)
		}
		switch a.Status {
		case agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED, agentmeshv1.ApprovalStatus_APPROVAL_STATUS_REJECTED:
			if tr.To != taskstate.Queued {
				return nil, bus.FieldError("to", "a decided approval resumes the task: to must be queued")
			}
		case agentmeshv1.ApprovalStatus_APPROVAL_STATUS_EXPIRED:
			if tr.To != taskstate.Failed {
				return nil, bus.FieldError("to", "an expired approval fails the task: to must be failed")
			}
		default:
			return nil, bus.FieldError("approval.status", "a decision must be approved, rejected or expired")
		}
		out := proto.Clone(pending).(*agentmeshv1.Approval)
		out.Status = a.Status
		out.DecidedAt = timestamppb.New(now)
		out.DecidedBy = a.DecidedBy
		out.Comment = a.Comment
		return out, nil
	case a != nil:
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s waits for no approval", cur.Id)
	}
	return nil, nil
}

// DefaultApprovalTimeout is how long a pending approval waits when the
// agent sets no approval_timeout.
const DefaultApprovalTimeout = time.Hour

// PlanStep validates a step checkpoint and returns its event and the task
// after it. Only a running task's current attempt may append steps.
func PlanStep(cur *agentmeshv1.Task, attempt int32, step *agentmeshv1.Step, now time.Time) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	if step == nil {
		return nil, nil, bus.FieldError("step", "a step is required")
	}
	if cur.Status != taskstate.Running {
		return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s is %s, not running", cur.Id, taskstate.Name(cur.Status))
	}
	if attempt != cur.Attempt {
		return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s: stale attempt %d (current %d)", cur.Id, attempt, cur.Attempt)
	}
	s := proto.Clone(step).(*agentmeshv1.Step)
	s.Attempt = attempt
	ev := &agentmeshv1.TaskEvent{
		TaskId: cur.Id, Seq: cur.LastEventSeq + 1, Type: agentmeshv1.EventType_EVENT_TYPE_STEP,
		Time: timestamppb.New(now), Status: cur.Status, Attempt: attempt, Step: s, Org: cur.Org, Node: cur.Node,
	}
	return taskstate.Apply(cur, ev), ev, nil
}

// PlanAgent returns the agent to store for a create or replace.
func PlanAgent(cur, next *agentmeshv1.Agent, create bool, expectedVersion int64, now time.Time) (*agentmeshv1.Agent, error) {
	if create && cur != nil {
		return nil, bus.Errorf(bus.CodeAlreadyExists, "agent %q already exists", next.Name)
	}
	if !create && cur == nil {
		return nil, bus.Errorf(bus.CodeNotFound, "agent %q not found", next.Name)
	}
	if !create && expectedVersion > 0 && cur.Version != expectedVersion {
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "agent %q is at version %d, not %d", next.Name, cur.Version, expectedVersion)
	}
	a := proto.Clone(next).(*agentmeshv1.Agent)
	ts := timestamppb.New(now)
	a.UpdatedAt = ts
	if create {
		a.CreatedAt = ts
		a.Version = 1
	} else {
		a.CreatedAt = cur.CreatedAt
		a.Version = cur.Version + 1
	}
	return a, nil
}

// TaskNotFound is the error for an unknown task id.
func TaskNotFound(id string) error {
	return bus.Errorf(bus.CodeNotFound, "task %q not found", id)
}

// AgentNotFound is the error for an unknown agent.
func AgentNotFound(name string) error {
	return bus.Errorf(bus.CodeNotFound, "agent %q not found", name)
}

// Internal wraps a storage failure as an internal error.
func Internal(op string, err error) error {
	return &bus.Error{Code: bus.CodeInternal, Message: fmt.Sprintf("%s: %v", op, err)}
}

// HasSkill reports whether a offers skill.
func HasSkill(a *agentmeshv1.Agent, skill string) bool {
	for _, s := range a.Skills {
		if s == skill {
			return true
		}
	}
	return false
}

// MatchesQuery reports whether t passes q's filters (not the page token).
func MatchesQuery(t *agentmeshv1.Task, q TaskQuery) bool {
	if q.Org != "" && t.Org != q.Org {
		return false
	}
	if q.Agent != "" && t.Agent != q.Agent {
		return false
	}
	if len(q.Statuses) > 0 {
		ok := false
		for _, s := range q.Statuses {
			if s == t.Status {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	created := t.CreatedAt.AsTime()
	if !q.CreatedAfter.IsZero() && !created.After(q.CreatedAfter) {
		return false
	}
	if !q.CreatedBefore.IsZero() && !created.Before(q.CreatedBefore) {
		return false
	}
	if !q.UpdatedBefore.IsZero() && !t.UpdatedAt.AsTime().Before(q.UpdatedBefore) {
		return false
	}
	return matchesGraphQuery(t, q)
}

// EncodeToken makes an opaque page token of the last key of a page.
func EncodeToken(lastKey string) string {
	if lastKey == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte("k:" + lastKey))
}

// DecodeToken returns the key a page token carries, or invalid_argument.
func DecodeToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 3 || string(b[:2]) != "k:" {
		return "", bus.FieldError("page_token", "malformed page token")
	}
	return string(b[2:]), nil
}

// planRetry turns a planned failure of an assigned or running task into a
// retry (back to queued, with the failure, the retry count and the time
// before which it is not dispatched) when the task's retry policy says so.
func planRetry(cur *agentmeshv1.Task, ev *agentmeshv1.TaskEvent, now time.Time) {
	retry, wait := taskstate.PlanRetry(cur, ev.FailureKind)
	if !retry {
		return
	}
	ev.Status = taskstate.Queued
	ev.Reason = taskstate.RetryReason(cur, ev.FailureKind, ev.Reason, wait)
	ev.RetryCount = cur.RetryCount + 1
	ev.NotBefore = timestamppb.New(now.Add(wait))
	ev.Node = ""
}
