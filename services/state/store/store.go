// Package store is the system of record's one interface. Two
// implementations satisfy it — pgstore (Postgres, production) and kvstore
// (JetStream KV and streams, the dev default) — and one conformance suite
// (storetest) runs against both.
//
// Every error a Store returns carries a bus code (pkg/bus): not_found,
// already_exists, failed_precondition (a transition the table forbids, a
// stale attempt), invalid_argument, or internal.
package store

import (
	"context"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// MaxPageSize bounds every list and history page.
const MaxPageSize = 1000

// DefaultPageSize is used when a query asks for 0.
const DefaultPageSize = 50

// Store is the system of record: tasks, their event history and agents.
type Store interface {
	// CreateTask records a new task and moves it to queued in the same
	// commit: two events, created (seq 1) and queued (seq 2). It sets the
	// id (a ULID, so ids sort by creation time), status, attempt and times.
	// When t.IdempotencyKey is set and the org already has a task with that
	// key, it returns that task, no events and created=false — unless both
	// carry a request digest and the digests differ (another request under
	// the same key): then already_exists naming idempotency_key
	// (SameRequest).
	CreateTask(ctx context.Context, t *agentmeshv1.Task) (task *agentmeshv1.Task, events []*agentmeshv1.TaskEvent, created bool, err error)
	// GetTask returns a task or not_found.
	GetTask(ctx context.Context, id string) (*agentmeshv1.Task, error)
	// ListTasks returns tasks newest first (by id), filtered, one page.
	ListTasks(ctx context.Context, q TaskQuery) (tasks []*agentmeshv1.Task, nextPageToken string, err error)
	// Transition changes a task's status with compare-and-set and appends
	// exactly one event. It checks the transition table (pkg/taskstate),
	// tr.From when set, and the attempt (fencing) when tr.Attempt > 0.
	Transition(ctx context.Context, tr Transition) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)
	// AppendStep checkpoints a step of a running task whose attempt equals
	// attempt, appending one step event. It is idempotent on (task,
	// attempt, step index): when the history already holds a step of this
	// attempt with step.Index, it returns the task and that event and
	// appends nothing (see CommittedStep).
	AppendStep(ctx context.Context, taskID string, attempt int32, step *agentmeshv1.Step) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)
	// Checkpoint appends steps of a running task's attempt, in order, then
	// applies tr when it is set, in one write: all of it is committed or
	// none. Each step is idempotent as in AppendStep (one committed by an
	// earlier try is returned, not appended again), so a retry of a
	// checkpoint whose answer was lost appends only what is missing. It
	// returns the task and one event per step, then tr's event.
	Checkpoint(ctx context.Context, taskID string, attempt int32, steps []*agentmeshv1.Step, tr *Transition) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error)
	// History returns the task's events with seq > afterSeq, oldest first,
	// at most limit (0 means MaxPageSize). not_found for an unknown task.
	History(ctx context.Context, taskID string, afterSeq int64, limit int) ([]*agentmeshv1.TaskEvent, error)
	// Usage sums the usage (tokens and cost, as Apply totals it from the
	// steps) of the tasks of org created after from and before to (zero
	// times do not bound; both ends exclusive, as in ListTasks), only
	// agent's when agent is set, and counts those tasks. An empty org
	// sums every org's.
	Usage(ctx context.Context, org, agent string, from, to time.Time) (*agentmeshv1.Usage, int64, error)

	// Agents are keyed by (org, name): a name is unique within its org, and
	// org "" holds the shared agents.

	// PutAgent creates (create=true; already_exists if present) or replaces
	// (not_found if absent; failed_precondition if expectedVersion > 0 and
	// differs) the agent a.Org owns named a.Name. It sets times and version.
	PutAgent(ctx context.Context, a *agentmeshv1.Agent, create bool, expectedVersion int64) (*agentmeshv1.Agent, error)
	// GetAgent returns org's agent named name (org "" is a shared one) or
	// not_found; it never falls back from one org to another.
	GetAgent(ctx context.Context, org, name string) (*agentmeshv1.Agent, error)
	// ListAgents returns, one page, q.Org's agents and the shared ones,
	// ordered by name then org (a shared agent before an org's own of the
	// same name), optionally only those offering q.Skill.
	ListAgents(ctx context.Context, q AgentQuery) (agents []*agentmeshv1.Agent, nextPageToken string, err error)
	// DeleteAgent removes org's agent named name or answers not_found.
	DeleteAgent(ctx context.Context, org, name string) error

	// Graph: dependencies, updates, deletes and scans (graph.go).
	Graph
	// Delegation: sub-task waits (delegation.go).
	Delegation
	// Tree: sub-task events and subtree usage (tree.go).
	Tree

	// Skills: the skill catalogue and agent versions (skills.go).
	Skills
	// Proposals: agent proposals' history events (proposal.go).
	Proposals
	// Remembering: working state, memories and threads (memory.go).
	Remembering

	Close() error
}

// TaskQuery filters ListTasks. Zero fields do not filter.
type TaskQuery struct {
	Org           string
	Statuses      []agentmeshv1.TaskStatus
	Agent         string
	CreatedAfter  time.Time
	CreatedBefore time.Time
	UpdatedBefore time.Time
	PageSize      int
	PageToken     string

	// Tag: only tasks carrying it. Priorities: only these. ParentTaskID:
	// only its sub-tasks. WaitingOn: only blocked tasks still waiting on
	// this parent. UpdatedAfter: only tasks changed after it.
	Tag          string
	Priorities   []agentmeshv1.Priority
	ParentTaskID string
	WaitingOn    string
	UpdatedAfter time.Time
	// RootTaskID: only the tasks of this tree (the root included).
	RootTaskID string
	// LiveOrFinishedAfter: only unfinished tasks and those that finished
	// after it (GetMetrics' scan).
	LiveOrFinishedAfter time.Time
}

// AgentQuery filters ListAgents.
type AgentQuery struct {
	// Org whose agents are listed with the shared ones ("" = shared only).
	Org       string
	Skill     string
	PageSize  int
	PageToken string
}

// Transition is a requested status change.
type Transition struct {
	TaskID string
	// From, when not unspecified, must be the task's current status.
	From agentmeshv1.TaskStatus
	To   agentmeshv1.TaskStatus
	// Attempt, when > 0, must equal the task's attempt (fencing token).
	Attempt int32
	// NextAttempt starts a new attempt (attempt+1) with this transition.
	NextAttempt bool
	Reason      string
	// Result of a completed task.
	Result string
	// Node that runs the attempt.
	Node string
	// Isolation of the attempt's sandbox (Task.isolation).
	Isolation string
	// Approval requested (To blocked, status pending) or decided (From a
	// blocked task waiting for it: its id must match the pending one).
	Approval *agentmeshv1.Approval
	// FailureKind of a move to failed.
	FailureKind agentmeshv1.FailureKind
	// Proposal decided (From a task blocked on it; see proposal.go).
	Proposal *agentmeshv1.Proposal
	// NotBefore (to queued): the task is not dispatched before it (a model
	// rate-limit wait; the event's not_before).
	NotBefore time.Time
}

// PageSize clamps a requested page size.
func PageSize(n int) int {
	switch {
	case n <= 0:
		return DefaultPageSize
	case n > MaxPageSize:
		return MaxPageSize
	}
	return n
}

// AddUsage adds u to sum.
func AddUsage(sum, u *agentmeshv1.Usage) { taskstate.AddUsage(sum, u) }

// AgentPos is an agent's position in ListAgents' order, as a page token
// holds it: the name, a NUL, the org.
func AgentPos(org, name string) string { return name + "\x00" + org }

// SplitAgentPos splits an AgentPos (a bare name is a shared agent's).
func SplitAgentPos(pos string) (org, name string) {
	name, org, _ = strings.Cut(pos, "\x00")
	return org, name
}
