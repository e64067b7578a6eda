package executor

// Delegation tools (docs/delegation.md): call_agent and call_model create
// sub-tasks through state (state.task.spawn) and return subtask://ID at
// once; get_task_status reads one; wait_tasks blocks the task on its
// unfinished sub-tasks (state.task.wait) so the attempt ends and its slot
// is free, and the attempt that resumes it replays the call and gets the
// sub-tasks' outcomes. Spawns of one model turn start together, before the
// child presents the calls one by one (only for calls the gate would let
// run without a person's approval).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/delegation"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/pkg/tools"
)

// delegator runs the delegation tools for one attempt of one task.
type delegator struct {
	s       *Service
	task    *agentmeshv1.Task
	attempt int32
	mr      *modelRun

	mu sync.Mutex
	// spawns started ahead of their calls, by tool call id.
	spawns map[string]*spawnResult
	// waits: the sub-tasks each wait_tasks call reports on, by call id,
	// as state answered when it did not block (or the error to report).
	waits map[string]waitAnswer
	// spawned: the sub-tasks this task's calls created, in call order
	// (earlier attempts' from the history).
	spawned []string
}

type spawnResult struct {
	done chan struct{}
	out  string
	err  error
}

type waitAnswer struct {
	tasks []string
	err   error
}

func (s *Service) newDelegator(task *agentmeshv1.Task, attempt int32, mr *modelRun, history []*agentmeshv1.Step) *delegator {
	d := &delegator{s: s, task: task, attempt: attempt, mr: mr, spawns: map[string]*spawnResult{}, waits: map[string]waitAnswer{}}
	steps := slices.Clone(history)
	slices.SortStableFunc(steps, func(a, b *agentmeshv1.Step) int { return int(a.Index - b.Index) })
	for _, st := range steps {
		if st.Kind == agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT && !st.IsError &&
			(st.ToolName == delegation.ToolCallAgent || st.ToolName == delegation.ToolCallModel) {
			if id, err := delegation.TaskID(st.Content); err == nil && strings.HasPrefix(st.Content, delegation.URIScheme) && !slices.Contains(d.spawned, id) {
				d.spawned = append(d.spawned, id)
			}
		}
	}
	return d
}

// tools returns base plus the delegation tools.
func (d *delegator) tools(base map[string]ExecFunc) map[string]ExecFunc {
	out := make(map[string]ExecFunc, len(base)+4)
	for k, v := range base {
		out[k] = v
	}
	out[delegation.ToolCallAgent] = d.execSpawn(delegation.ToolCallAgent)
	out[delegation.ToolCallModel] = d.execSpawn(delegation.ToolCallModel)
	out[delegation.ToolGetTaskStatus] = d.execStatus
	out[delegation.ToolWaitTasks] = d.execWait
	return out
}

// callID is the tool call id an ExecFunc's idempotency key names.
func (d *delegator) callID(env tools.Env) string {
	return strings.TrimPrefix(env.IdempotencyKey, d.task.Id+":")
}

// allowance is what the task's budget leaves a sub-task: its ceiling, or
// the budget that is used up (exhausted).
type allowance struct {
	ceiling   *agentmeshv1.Budget
	exhausted string
}

// allowance is what the task's budget leaves now.
func (d *delegator) allowance() allowance {
	r := d.mr
	c, why := delegation.Remaining(r.budget, r.turns, r.tokens, r.cost, r.now().Sub(r.started))
	return allowance{ceiling: c, exhausted: why}
}

// prefetch starts, for a model turn just checkpointed, the spawns of its
// delegation calls that the gate would allow without approval, all at
// once; each call's run then takes its result.
func (d *delegator) prefetch(ctx context.Context, g *gate, turn *agentmeshv1.Step) {
	var calls []*agentmeshv1.ToolCall
	for _, c := range turn.GetToolCalls() {
		if c.GetName() != delegation.ToolCallAgent && c.GetName() != delegation.ToolCallModel {
			continue
		}
		v := g.judge(&agentmeshv1.Step{Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: c.Id, ToolName: c.Name, Arguments: c.Arguments})
		if v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED && v.inExecutor {
			calls = append(calls, c)
		}
	}
	if len(calls) < 2 {
		return // one call gains nothing
	}
	left := d.allowance()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range calls {
		if _, ok := d.spawns[c.Id]; ok {
			continue
		}
		r := &spawnResult{done: make(chan struct{})}
		d.spawns[c.Id] = r
		go func(c *agentmeshv1.ToolCall) {
			defer close(r.done)
			r.out, r.err = d.spawn(ctx, c.Id, c.Name, json.RawMessage(c.Arguments), left)
		}(c)
	}
}

// execSpawn runs call_agent or call_model: the prefetched spawn's result,
// else a spawn now.
func (d *delegator) execSpawn(tool string) ExecFunc {
	return func(ctx context.Context, env tools.Env, args json.RawMessage, _ bool) (ExecResult, error) {
		return d.runSpawn(ctx, tool, env, args)
	}
}

func (d *delegator) runSpawn(ctx context.Context, tool string, env tools.Env, args json.RawMessage) (ExecResult, error) {
	id := d.callID(env)
	d.mu.Lock()
	r := d.spawns[id]
	d.mu.Unlock()
	var out string
	var err error
	if r != nil {
		select {
		case <-r.done:
		case <-ctx.Done():
			// The spawn is still being sent: whether it exists is not known.
			return ExecResult{}, fmt.Errorf("%w: the spawn of call %s got no answer in time", errUnsettled, id)
		}
		out, err = r.out, r.err
	} else {
		out, err = d.spawn(ctx, id, tool, args, d.allowance())
	}
	if errors.Is(err, errUnsettled) {
		return ExecResult{}, err // never a failure the model sees: it may exist
	}
	if err != nil {
		return ExecResult{Output: "error: " + err.Error(), IsError: true}, nil
	}
	if id, err := delegation.TaskID(out); err == nil {
		d.mu.Lock()
		if !slices.Contains(d.spawned, id) {
			d.spawned = append(d.spawned, id)
		}
		d.mu.Unlock()
	}
	return ExecResult{Output: out}, nil
}

// spawn creates the sub-task a call_agent or call_model call asks for and
// returns its URI.
func (d *delegator) spawn(ctx context.Context, callID, tool string, args json.RawMessage, left allowance) (string, error) {
	if left.exhausted != "" {
		return "", fmt.Errorf("budget exhausted: %s; no sub-task was created", left.exhausted)
	}
	req := &busv1.SpawnSubtaskRequest{ParentTaskId: d.task.Id, Attempt: d.attempt, ToolCallId: callID, Ceiling: left.ceiling}
	switch tool {
	case delegation.ToolCallModel:
		a, err := delegation.ParseCallModel(args)
		if err != nil {
			return "", err
		}
		if a.Model, err = delegation.ModelFor(a, d.task.GetAgentSpec()); err != nil {
			return "", err
		}
		req.AgentSpec = delegation.ModelOnly(d.task.GetAgentSpec(), a.Model, a.SystemPrompt)
		req.Input, req.Title, req.ModelOnly = a.Input, a.Title, true
		if req.Title == "" {
			req.Title = "call_model " + a.Model
		}
	default:
		a, err := delegation.ParseCallAgent(args)
		if err != nil {
			return "", err
		}
		var match busv1.MatchResponse
		if own := ephemeralFor(d.task.GetAgentSpec(), a.Agent, nil); own != nil {
			// An agent approved for one task serves its sub-tasks too
			// (docs/proposals.md); the catalogue does not hold it.
			match.Agent = own
		} else {
			err = bus.Retry(ctx, bus.DefaultBackoff, func(ctx context.Context) error {
				return bus.Request(ctx, d.s.nc, d.s.names.Registry(subjects.RegistryMatch),
					&busv1.MatchRequest{Agent: a.Agent, RequiredSkills: a.Skills, Org: d.task.Org, Limit: 1}, &match)
			})
			if own := ephemeralFor(d.task.GetAgentSpec(), a.Agent, a.Skills); (err != nil || match.GetAgent().GetName() == "") && own != nil {
				match.Agent, err = own, nil
			}
		}
		if err != nil || match.GetAgent().GetName() == "" {
			if a.Agent != "" {
				return "", fmt.Errorf("no agent %q: %s", a.Agent, message(err))
			}
			return "", fmt.Errorf("no agent offers the skills %q: %s", a.Skills, message(err))
		}
		spec, err := delegation.ApplyOverrides(match.GetAgent(), d.task.GetAgentSpec(), a)
		if err != nil {
			return "", err
		}
		req.AgentSpec, req.Input, req.Title = spec, a.Input, a.Title
	}
	resp, err := d.send(ctx, req)
	if err != nil {
		return "", err
	}
	return delegation.URI(resp.GetTask().GetId()), nil
}

// Spawns are exactly-once under faults. State creates a sub-task once per
// (parent, tool call id) — its idempotency key; the attempt is the fence
// — so a spawn whose reply was lost, or that state never received, is sent
// again, same key, until state answers: a try that created the sub-task
// makes the next one return it. The model sees a failure only when state
// answered one (the spawn does not exist: a limit, a budget, a bad agent).
// When no answer comes before the call's time is up (state down for long),
// the spawn's existence is unknown: the attempt ends without answering the
// call (errUnsettled), and the next attempt presents it again, with the
// same id — one sub-task, reported once.

// errUnsettled: a call whose effect may exist was not answered by state;
// it must not be answered to the model (see above).
var errUnsettled = errors.New("state did not answer; the call is presented again by the next attempt")

// spawnTryTimeout bounds one try of a spawn: a reply lost on the way is
// asked for again after this (the second try finds the first's sub-task).
const spawnTryTimeout = 5 * time.Second

// spawnBackoff retries a spawn state did not answer until the call's
// context ends (the tool call's time, or the attempt's).
var spawnBackoff = bus.Backoff{Initial: 20 * time.Millisecond, Max: 250 * time.Millisecond}

// send sends a spawn until state answers it.
func (d *delegator) send(ctx context.Context, req *busv1.SpawnSubtaskRequest) (*busv1.SpawnSubtaskResponse, error) {
	var resp busv1.SpawnSubtaskResponse
	tries := 0
	err := bus.Retry(ctx, spawnBackoff, func(ctx context.Context) error {
		if tries++; tries == 2 {
			telemetry.TaskLogger(ctx, d.s.log, d.task.Id).Warn("sub-task spawn not answered; sending it again", "attempt", d.attempt, "call", req.ToolCallId)
		}
		ctx, cancel := context.WithTimeout(ctx, spawnTryTimeout)
		defer cancel()
		return bus.Request(ctx, d.s.nc, d.s.names.State(subjects.StateSpawn), req, &resp)
	})
	switch {
	case err == nil:
		return &resp, nil
	case bus.Transient(err) || ctx.Err() != nil:
		return nil, fmt.Errorf("%w (spawn of call %s: %v)", errUnsettled, req.ToolCallId, err)
	}
	return nil, errors.New(message(err))
}

// message is what the model is shown of a bus error: its message.
func message(err error) string {
	if err == nil {
		return "not found"
	}
	var be *bus.Error
	if errors.As(err, &be) && be.Message != "" {
		return be.Message
	}
	return err.Error()
}

// status is what get_task_status and wait_tasks report of a sub-task.
type status struct {
	Task   string `json:"task"`
	Status string `json:"status"`
	Agent  string `json:"agent,omitempty"`
	Title  string `json:"title,omitempty"`
	Steps  int64  `json:"steps"`
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// read reads a task of the caller's org; another org's is not found.
func (d *delegator) read(ctx context.Context, id string) (status, error) {
	var got busv1.GetTaskResponse
	err := d.s.request(ctx, subjects.StateGetTask, &busv1.GetTaskRequest{Id: id}, &got)
	t := got.GetTask()
	if errors.Is(err, bus.ErrNotFound) || (err == nil && t.GetOrg() != d.task.GetOrg()) {
		return status{}, fmt.Errorf("task %s not found", delegation.URI(id))
	}
	if err != nil {
		return status{}, fmt.Errorf("task %s could not be read: %s", delegation.URI(id), message(err))
	}
	st := status{Task: delegation.URI(t.Id), Status: taskstate.Name(t.Status), Agent: t.Agent, Title: t.Title, Steps: int64(t.StepCount)}
	if t.Status == taskstate.Completed {
		st.Result = t.Result
	} else if taskstate.Terminal(t.Status) {
		st.Error = t.Error
	}
	return st, nil
}

func (d *delegator) execStatus(ctx context.Context, _ tools.Env, args json.RawMessage, _ bool) (ExecResult, error) {
	id, err := delegation.ParseGetTaskStatus(args)
	if err != nil {
		return ExecResult{Output: "error: " + err.Error(), IsError: true}, nil
	}
	st, err := d.read(ctx, id)
	if err != nil {
		return ExecResult{Output: "error: " + err.Error(), IsError: true}, nil
	}
	out, _ := json.Marshal(st)
	return ExecResult{Output: string(out)}, nil
}

// wait asks state to block the task on the sub-tasks a wait_tasks call
// (its TOOL_CALL step just checkpointed) waits for. It reports whether
// the task is now blocked; when it is not, the call's run reports the
// sub-tasks. err is set only when the attempt is over (stale, cancelled).
func (d *delegator) wait(ctx context.Context, step *agentmeshv1.Step) (blocked bool, err error) {
	a, perr := delegation.ParseWaitTasks([]byte(step.Arguments))
	if perr != nil {
		d.setWait(step.ToolCallId, waitAnswer{err: perr})
		return false, nil
	}
	var resp busv1.WaitSubtasksResponse
	err = bus.Retry(ctx, outcomeBackoff, func(ctx context.Context) error {
		return d.s.request(ctx, subjects.StateWait, &busv1.WaitSubtasksRequest{
			TaskId: d.task.Id, Attempt: d.attempt, ToolCallId: step.ToolCallId, Tasks: a.IDs,
			Any: a.Any(), TimeoutSeconds: int32(a.TimeoutSeconds), Node: d.s.cfg.Node, Order: d.order(),
		}, &resp)
	})
	var be *bus.Error
	switch {
	case err == nil:
	case errors.As(err, &be) && be.Field != "":
		d.setWait(step.ToolCallId, waitAnswer{err: errors.New(be.Message)})
		return false, nil
	default:
		return false, err
	}
	if resp.Blocked {
		d.s.log.InfoContext(ctx, "task waits for its sub-tasks; its slot is free", "task_id", d.task.Id, "subtasks", len(resp.Tasks))
		return true, nil
	}
	d.setWait(step.ToolCallId, waitAnswer{tasks: resp.Tasks})
	return false, nil
}

func (d *delegator) order() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.spawned)
}

func (d *delegator) setWait(id string, w waitAnswer) {
	d.mu.Lock()
	d.waits[id] = w
	d.mu.Unlock()
}

func (d *delegator) execWait(ctx context.Context, env tools.Env, _ json.RawMessage, _ bool) (ExecResult, error) {
	d.mu.Lock()
	w, ok := d.waits[d.callID(env)]
	d.mu.Unlock()
	switch {
	case !ok:
		return ExecResult{Output: "error: wait_tasks was not judged by state (internal)", IsError: true}, nil
	case w.err != nil:
		return ExecResult{Output: "error: " + w.err.Error(), IsError: true}, nil
	}
	out := make([]status, 0, len(w.tasks))
	for _, id := range w.tasks {
		st, err := d.read(ctx, id)
		if err != nil {
			st = status{Task: delegation.URI(id), Status: "unknown", Error: err.Error()}
		}
		out = append(out, st)
	}
	b, _ := json.Marshal(out)
	return ExecResult{Output: string(b)}, nil
}

// ephemeralFor returns the task's own agent when it is ephemeral (approved
// for this task only) and the call names it, or names no agent and skills
// (not nil) it offers every one of; nil otherwise.
func ephemeralFor(own *agentmeshv1.Agent, agent string, skills []string) *agentmeshv1.Agent {
	if !own.GetEphemeral() {
		return nil
	}
	if agent != "" {
		if agent == own.Name {
			return own
		}
		return nil
	}
	if skills == nil {
		return nil
	}
	for _, sk := range skills {
		if !slices.Contains(own.Skills, strings.ToLower(strings.TrimSpace(sk))) {
			return nil
		}
	}
	return own
}
