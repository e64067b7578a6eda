package state

// Delegation: the executor spawns sub-tasks of the task it runs
// (state.task.spawn) and blocks it on them (state.task.wait); the
// scheduler releases waits whose deadline passed (state.task.wait_expired).
// See docs/delegation.md.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/delegation"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DelegationLimits bound trees of sub-tasks.
type DelegationLimits struct {
	// MaxDepth: a sub-task is at most this many levels below its root
	// (default delegation.DefaultMaxDepth).
	MaxDepth int
	// MaxPerTask: sub-tasks one task may spawn (default
	// delegation.DefaultMaxPerTask).
	MaxPerTask int
	// MaxPerTree: sub-tasks one tree may hold (default
	// delegation.DefaultMaxPerTree).
	MaxPerTree int
}

func (l DelegationLimits) withDefaults() DelegationLimits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = delegation.DefaultMaxDepth
	}
	if l.MaxPerTask <= 0 {
		l.MaxPerTask = delegation.DefaultMaxPerTask
	}
	if l.MaxPerTree <= 0 {
		l.MaxPerTree = delegation.DefaultMaxPerTree
	}
	return l
}

// spawnStripes: spawns of one tree are serialised (by a stripe of its root
// id) so that the count checks and the create are not interleaved.
const spawnStripes = 64

func (s *Service) treeLock(root string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(root))
	mu := &s.spawnMu[h.Sum32()%spawnStripes]
	mu.Lock()
	return mu.Unlock
}

// placeInTree sets where a new task sits: a task with no parent is the
// root of its own tree (its id, set by the create) at depth 0; one with a
// parent is in the parent's tree one level below it.
func (s *Service) placeInTree(ctx context.Context, t *agentmeshv1.Task) {
	t.RootTaskId, t.Depth = "", 0
	if t.ParentTaskId == "" {
		return
	}
	p, err := s.store.GetTask(ctx, t.ParentTaskId)
	if err != nil || p.Org != t.Org {
		t.RootTaskId = t.ParentTaskId // checked at the edge; keep a usable root
		t.Depth = 1
		return
	}
	t.RootTaskId, t.Depth = rootOf(p), p.Depth+1
}

func rootOf(t *agentmeshv1.Task) string {
	if t.RootTaskId != "" {
		return t.RootTaskId
	}
	return t.Id
}

// spawnKey is the idempotency key of the sub-task one call created.
func spawnKey(parent, call string) string { return "subtask:" + parent + ":" + call }

// runningAt reads a task that must be running at attempt (fencing).
func (s *Service) runningAt(ctx context.Context, id string, attempt int32) (*agentmeshv1.Task, error) {
	t, err := s.store.GetTask(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.Status != taskstate.Running || t.Attempt != attempt {
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s is %s at attempt %d, not running at attempt %d",
			id, taskstate.Name(t.Status), t.Attempt, attempt)
	}
	return t, nil
}

// spawn creates the sub-task one tool call of a running parent asks for,
// exactly once per (parent, call id): check the request, fence it by the
// parent's attempt, find the call's sub-task if it was made, check the
// tree's limits and budget, record it with narrowed rights, reply. The
// steps run under the tree's lock (treeLock) until the sub-task is
// recorded.
func (s *Service) spawn(ctx context.Context, req *busv1.SpawnSubtaskRequest) (*busv1.SpawnSubtaskResponse, error) {
	if err := checkSpawn(req); err != nil {
		return nil, err
	}
	parent, err := s.runningAt(ctx, req.ParentTaskId, req.Attempt)
	if err != nil {
		return nil, err
	}
	sp := s.newSpawning(req, parent)
	defer sp.release()
	existing, err := sp.scanSiblings(ctx)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		return spawnReply(existing, false), nil
	}
	if err := sp.checkLimits(); err != nil {
		return nil, err
	}
	below, err := sp.scanTree(ctx)
	if err != nil {
		return nil, err
	}
	ceiling, err := sp.ceiling(below)
	if err != nil {
		return nil, err
	}
	task, created, err := sp.record(ctx, sp.child(ceiling))
	if err != nil {
		return nil, err
	}
	return spawnReply(task, created), nil
}

// checkSpawn rejects a spawn request missing what it needs.
func checkSpawn(req *busv1.SpawnSubtaskRequest) error {
	spec := req.GetAgentSpec()
	switch {
	case req.ParentTaskId == "":
		return bus.FieldError("parent_task_id", "required")
	case req.Attempt <= 0:
		return bus.FieldError("attempt", "the parent's attempt is required")
	case req.ToolCallId == "":
		return bus.FieldError("tool_call_id", "required")
	case spec.GetName() == "" || !subjects.ValidToken(spec.GetName()):
		return bus.FieldError("agent_spec.name", "a valid agent is required")
	case req.Input == "":
		return bus.FieldError("input", "required")
	}
	return nil
}

// spawnReply is the answer of a spawn: the sub-task without its agent spec.
func spawnReply(task *agentmeshv1.Task, created bool) *busv1.SpawnSubtaskResponse {
	c := proto.Clone(task).(*agentmeshv1.Task)
	c.AgentSpec = nil
	return &busv1.SpawnSubtaskResponse{Task: c, Created: created}
}

// spawning is one spawn in progress (spawn): the request, the parent
// running at its attempt, its tree's lock, and what the scan of the
// parent's other sub-tasks found.
type spawning struct {
	s      *Service
	req    *busv1.SpawnSubtaskRequest
	parent *agentmeshv1.Task
	root   string // the parent's tree
	key    string // the sub-task's idempotency key (spawnKey)
	unlock func() // releases the tree's lock; nil once released

	siblings int               // the parent's other sub-tasks
	used     agentmeshv1.Usage // their own usage, then their subtrees'
	// Each sibling's subtree as its record knows it (the ended part,
	// rolled up by task.settle); scanTree adds what runs.
	settledBelow map[string]*agentmeshv1.Usage
}

// newSpawning starts a spawn of a sub-task of parent, holding its tree's
// lock.
func (s *Service) newSpawning(req *busv1.SpawnSubtaskRequest, parent *agentmeshv1.Task) *spawning {
	root := rootOf(parent)
	return &spawning{
		s: s, req: req, parent: parent, root: root,
		key:          spawnKey(parent.Id, req.ToolCallId),
		unlock:       s.treeLock(root),
		settledBelow: map[string]*agentmeshv1.Usage{},
	}
}

// release releases the tree's lock, if still held.
func (sp *spawning) release() {
	if sp.unlock != nil {
		sp.unlock()
		sp.unlock = nil
	}
}

// scanSiblings reads the parent's sub-tasks: the one this call made
// already (returned), else the count and usage of the others.
func (sp *spawning) scanSiblings(ctx context.Context) (*agentmeshv1.Task, error) {
	var existing *agentmeshv1.Task
	err := sp.s.store.ScanTasks(ctx, store.TaskQuery{ParentTaskID: sp.parent.Id}, func(t *agentmeshv1.Task) bool {
		if t.IdempotencyKey == sp.key {
			existing = t
			return false
		}
		sp.siblings++
		store.AddUsage(&sp.used, spent(t.GetUsage()))
		sp.settledBelow[t.Id] = t.GetSubtreeUsage()
		return true
	})
	return existing, err
}

// checkLimits refuses a sub-task deeper than MaxDepth or beyond the
// parent's MaxPerTask.
func (sp *spawning) checkLimits() error {
	limits, parent := sp.s.limits, sp.parent
	if int(parent.Depth+1) > limits.MaxDepth {
		return bus.Errorf(bus.CodeFailedPrecondition,
			"delegation depth limit reached: this task is at depth %d and sub-tasks may be at most %d levels below the root task %s (max depth %d); do the work here instead of delegating",
			parent.Depth, limits.MaxDepth, sp.root, limits.MaxDepth)
	}
	if sp.siblings >= limits.MaxPerTask {
		return bus.Errorf(bus.CodeFailedPrecondition, "sub-task limit reached: this task already has %d sub-tasks (max per task %d)", sp.siblings, limits.MaxPerTask)
	}
	return nil
}

// scanTree counts the tree's sub-tasks (refusing one beyond MaxPerTree)
// and reads what lies below the parent's children.
func (sp *spawning) scanTree(ctx context.Context) (treeBelow, error) {
	maxPerTree, parent := sp.s.limits.MaxPerTree, sp.parent
	inTree := 0
	below := treeBelow{parentOf: map[string]string{}, own: map[string]*agentmeshv1.Usage{}}
	err := sp.s.store.ScanTasks(ctx, store.TaskQuery{RootTaskID: sp.root}, func(t *agentmeshv1.Task) bool {
		if t.Id != sp.root {
			inTree++
		}
		if t.Depth > parent.Depth+1 { // a grandchild of the parent or below, maybe
			below.parentOf[t.Id], below.own[t.Id] = t.ParentTaskId, t.GetUsage()
		}
		return inTree < maxPerTree
	})
	if err != nil {
		return treeBelow{}, err
	}
	if inTree >= maxPerTree {
		return treeBelow{}, bus.Errorf(bus.CodeFailedPrecondition, "sub-task limit reached: the tree of task %s already has %d sub-tasks (max per tree %d)", sp.root, inTree, maxPerTree)
	}
	return below, nil
}

// ceiling is the new sub-task's budget ceiling: the parent's remaining
// budget (the request's) less what its other sub-tasks' subtrees used.
func (sp *spawning) ceiling(below treeBelow) (*agentmeshv1.Budget, error) {
	scanned := below.bySibling(sp.settledBelow)
	for id, settled := range sp.settledBelow {
		store.AddUsage(&sp.used, larger(settled, scanned[id]))
	}
	ceiling, why := siblingsLeft(sp.req.Ceiling, &sp.used)
	if why != "" {
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "budget exhausted: %s (this task's remaining budget bounds its sub-tasks)", why)
	}
	return ceiling, nil
}

// child is the sub-task to record, its budget bounded by ceiling.
func (sp *spawning) child(ceiling *agentmeshv1.Budget) *agentmeshv1.Task {
	req, parent := sp.req, sp.parent
	// Rights only narrow: the sub-task may use what its target agent has
	// and its parent may use, under the stricter policy of the two — from
	// the parent's record, whatever the request says (delegation.Narrow).
	spec := delegation.Narrow(req.GetAgentSpec(), parent.GetAgentSpec())
	budget := delegation.Bound(spec.GetBudget(), ceiling)
	child := &agentmeshv1.Task{
		Org: parent.Org, Title: req.Title, Input: req.Input, Agent: spec.GetName(),
		AgentSpec: spec, Budget: budget, Priority: parent.Priority, Metadata: parent.Metadata,
		ParentTaskId: parent.Id, IdempotencyKey: sp.key,
		RetryPolicy: spec.GetRetryPolicy(),
	}
	if req.Title == "" {
		child.Title = fmt.Sprintf("sub-task of %s (%s)", parent.Id, spec.GetName())
	}
	return placed(child, sp.root, parent.Depth+1)
}

// record creates child (once: its idempotency key) and, when this call
// created it, publishes its events, releases the tree's lock and shows
// the spawn to every ancestor.
func (sp *spawning) record(ctx context.Context, child *agentmeshv1.Task) (*agentmeshv1.Task, bool, error) {
	s, parent := sp.s, sp.parent
	// A trace of its own, linked to this spawn in the parent's (tracing.go).
	sctx, traced := subtaskTrace(ctx, parent, child)
	task, events, created, err := s.store.CreateTask(ctx, child)
	if err != nil {
		return nil, false, fmt.Errorf("spawn sub-task of %s: %w", parent.Id, err)
	}
	if !created {
		if task.ParentTaskId != parent.Id {
			return nil, false, bus.Errorf(bus.CodeAlreadyExists, "idempotency key %q is used by task %s, which is not a sub-task of %s", sp.key, task.Id, parent.Id)
		}
		return task, false, nil
	}
	traced.End()
	for _, ev := range events {
		observe(task, ev)
	}
	s.publishTaskEvents(sctx, task, events...)
	// The tree's limits are kept; the rest needs no tree lock.
	sp.release()
	// Every ancestor's history shows the spawn (WatchTask), and a
	// parent that ended meanwhile gets no orphan.
	return s.spawned(ctx, task), true, nil
}

func placed(t *agentmeshv1.Task, root string, depth int32) *agentmeshv1.Task {
	t.RootTaskId, t.Depth = root, depth
	return t
}

// treeBelow is what a spawn's tree scan saw below the parent's children:
// each task's parent and own usage.
type treeBelow struct {
	parentOf map[string]string
	own      map[string]*agentmeshv1.Usage
}

// bySibling sums, for each of the parent's children (siblings, the keys of
// the map given), the own usage of every task of the scan below it — ended
// or still running.
func (b treeBelow) bySibling(siblings map[string]*agentmeshv1.Usage) map[string]*agentmeshv1.Usage {
	out := map[string]*agentmeshv1.Usage{}
	for id, u := range b.own {
		if u == nil {
			continue
		}
		p := b.parentOf[id]
		for range maxTreeDepth {
			if _, ok := siblings[p]; ok {
				sum := out[p]
				if sum == nil {
					sum = &agentmeshv1.Usage{}
					out[p] = sum
				}
				store.AddUsage(sum, u)
				break
			}
			next, ok := b.parentOf[p]
			if !ok {
				break // not below one of the parent's children
			}
			p = next
		}
	}
	return out
}

// larger is, field by field (tokens, cost), the larger of two measures of
// one subtree's usage: what task.settle rolled up (ended tasks, even those
// since deleted) and what a scan of the tree finds (running ones too).
func larger(a, b *agentmeshv1.Usage) *agentmeshv1.Usage {
	a, b = spent(a), spent(b)
	return &agentmeshv1.Usage{TotalTokens: max(a.TotalTokens, b.TotalTokens), CostUsd: max(a.CostUsd, b.CostUsd)}
}

// spent is what a budget counts of a usage: its tokens (total, else prompt
// + completion) and its cost.
func spent(u *agentmeshv1.Usage) *agentmeshv1.Usage {
	tokens := u.GetTotalTokens()
	if tokens == 0 {
		tokens = u.GetPromptTokens() + u.GetCompletionTokens()
	}
	return &agentmeshv1.Usage{TotalTokens: tokens, CostUsd: u.GetCostUsd()}
}

// siblingsLeft is the parent's remaining budget less what its other
// sub-tasks used (tokens, cost): the ceiling of a new sub-task.
func siblingsLeft(ceiling *agentmeshv1.Budget, used *agentmeshv1.Usage) (*agentmeshv1.Budget, string) {
	if ceiling == nil {
		return nil, ""
	}
	out := proto.Clone(ceiling).(*agentmeshv1.Budget)
	tokens := used.GetTotalTokens()
	if tokens == 0 {
		tokens = used.GetPromptTokens() + used.GetCompletionTokens()
	}
	if out.MaxTokens > 0 {
		if out.MaxTokens -= tokens; out.MaxTokens <= 0 {
			return nil, fmt.Sprintf("max_tokens: %d tokens left and the sub-tasks already used %d", ceiling.MaxTokens, tokens)
		}
	}
	if out.MaxCostUsd > 0 {
		if out.MaxCostUsd -= used.GetCostUsd(); out.MaxCostUsd <= 0 {
			return nil, fmt.Sprintf("max_cost_usd: %g left and the sub-tasks already used %g", ceiling.MaxCostUsd, used.GetCostUsd())
		}
	}
	if out.MaxWallTime != nil && out.MaxWallTime.AsDuration() <= 0 {
		out.MaxWallTime = nil
	}
	return out, ""
}

func (s *Service) waitSubtasks(ctx context.Context, req *busv1.WaitSubtasksRequest) (*busv1.WaitSubtasksResponse, error) {
	switch {
	case req.TaskId == "":
		return nil, bus.FieldError("task_id", "required")
	case req.Attempt <= 0:
		return nil, bus.FieldError("attempt", "required")
	case req.ToolCallId == "":
		return nil, bus.FieldError("tool_call_id", "required")
	case req.TimeoutSeconds < 0 || req.TimeoutSeconds > delegation.MaxWaitSeconds:
		return nil, bus.FieldError("timeout_seconds", "must be within 0..%d", delegation.MaxWaitSeconds)
	case len(req.Tasks) > delegation.MaxWaitTasks:
		return nil, bus.FieldError("tasks", "at most %d", delegation.MaxWaitTasks)
	}
	cur, err := s.runningAt(ctx, req.TaskId, req.Attempt)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	// The same call replayed by a later attempt keeps its list and its
	// first deadline.
	same := cur.GetSubtaskWait().GetToolCallId() == req.ToolCallId
	ids := req.Tasks
	switch {
	case same && len(req.Tasks) == 0:
		ids = cur.SubtaskWait.Tasks
	case len(req.Tasks) == 0:
		err = s.store.ScanTasks(ctx, store.TaskQuery{ParentTaskID: cur.Id}, func(t *agentmeshv1.Task) bool {
			ids = append(ids, t.Id)
			return true
		})
		if err != nil {
			return nil, err
		}
		slices.Sort(ids) // creation order
		ids = inCallOrder(ids, req.Order)
	}
	var deadline *timestamppb.Timestamp
	switch {
	case same:
		deadline = cur.SubtaskWait.GetDeadline()
	case req.TimeoutSeconds > 0:
		deadline = timestamppb.New(now.Add(time.Duration(req.TimeoutSeconds) * time.Second))
	}
	var waiting []string
	finished := 0
	for i, id := range ids {
		t, err := s.store.GetTask(ctx, id)
		if errors.Is(err, bus.ErrNotFound) || (err == nil && (t.Org != cur.Org || t.ParentTaskId != cur.Id)) {
			return nil, &bus.Error{Code: bus.CodeNotFound, Field: fmt.Sprintf("tasks[%d]", i), Message: fmt.Sprintf("task %q not found among this task's sub-tasks", id)}
		}
		if err != nil {
			return nil, err
		}
		if taskstate.Terminal(t.Status) {
			finished++
		} else {
			waiting = append(waiting, id)
		}
	}
	resp := &busv1.WaitSubtasksResponse{Tasks: ids}
	if len(waiting) == 0 || (req.Any && finished > 0) || (deadline != nil && !now.Before(deadline.AsTime())) {
		return resp, nil
	}
	w := &agentmeshv1.SubtaskWait{ToolCallId: req.ToolCallId, Tasks: ids, Any: req.Any, Deadline: deadline, Waiting: waiting}
	t, ev, err := s.store.WaitSubtasks(ctx, cur.Id, req.Attempt, req.Node, w)
	if err != nil {
		return nil, fmt.Errorf("block task %s on its sub-tasks: %w", cur.Id, err)
	}
	observe(t, ev)
	s.publishTaskEvents(ctx, t, ev)
	t = proto.Clone(s.recheckSubtasks(ctx, t)).(*agentmeshv1.Task)
	t.AgentSpec = nil
	resp.Blocked, resp.Task = true, t
	return resp, nil
}

// recheckSubtasks resolves, for a task just blocked on sub-tasks, those
// that ended between the read above and the block's commit — as
// recheckParents does for a dependent just created: either the resolver's
// look-up after a sub-task's end finds the blocked parent, or that end came
// before this re-read.
func (s *Service) recheckSubtasks(ctx context.Context, t *agentmeshv1.Task) *agentmeshv1.Task {
	for _, id := range slices.Clone(t.WaitingOn) {
		c, err := s.store.GetTask(ctx, id)
		if err != nil || !taskstate.Terminal(c.Status) {
			continue
		}
		next, ev, err := s.store.ResolveDependency(ctx, t.Id, store.ResultOf(c))
		if err != nil {
			s.log.WarnContext(ctx, "resolve a sub-task that finished during the block", "task_id", t.Id, "subtask", id, "err", err)
			continue
		}
		if ev != nil {
			observe(next, ev)
			s.publishTaskEvents(ctx, next, ev)
		}
		t = next
		if taskstate.BlockedOn(t) != agentmeshv1.BlockedOn_BLOCKED_ON_SUBTASKS {
			break
		}
	}
	return t
}

func (s *Service) releaseWait(ctx context.Context, req *busv1.ReleaseSubtaskWaitRequest) (*busv1.ReleaseSubtaskWaitResponse, error) {
	if req.TaskId == "" {
		return nil, bus.FieldError("task_id", "required")
	}
	t, ev, err := s.store.ReleaseSubtaskWait(ctx, req.TaskId)
	if err != nil {
		return nil, fmt.Errorf("release the wait of %s: %w", req.TaskId, err)
	}
	if ev != nil {
		observe(t, ev)
		s.publishTaskEvents(ctx, t, ev)
	}
	return &busv1.ReleaseSubtaskWaitResponse{Task: t, Event: ev}, nil
}

// inCallOrder orders ids as order does (the calls that spawned them), the
// others after, in their order.
func inCallOrder(ids, order []string) []string {
	pos := make(map[string]int, len(order))
	for i, id := range order {
		if _, ok := pos[id]; !ok {
			pos[id] = i
		}
	}
	out := slices.Clone(ids)
	slices.SortStableFunc(out, func(a, b string) int {
		pa, oka := pos[a]
		pb, okb := pos[b]
		switch {
		case oka && okb:
			return pa - pb
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0
	})
	return out
}
