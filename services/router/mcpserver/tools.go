package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/memory"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Tool names.
const (
	ToolDelegate    = "delegate"
	ToolCheckStatus = "check_status"
	ToolListTasks   = "list_tasks"
	ToolCancelTask  = "cancel_task"
	ToolGetResult   = "get_result"
)

// delegateIn are delegate's arguments.
type delegateIn struct {
	Task           string    `json:"task" jsonschema:"what to do, in words: the task's text for the agent"`
	Context        string    `json:"context,omitempty" jsonschema:"background the agent needs; it follows the task's text"`
	Title          string    `json:"title,omitempty" jsonschema:"a short title for people listing tasks"`
	Agent          string    `json:"agent,omitempty" jsonschema:"run on this agent (by name); or give skills; or neither for the org's default agent"`
	Skills         []string  `json:"skills,omitempty" jsonschema:"skills the agent must offer: the best-suited agent that offers all of them runs the task"`
	Priority       string    `json:"priority,omitempty" jsonschema:"backlog, low, normal (the default), high or critical"`
	Budget         *budgetIn `json:"budget,omitempty" jsonschema:"bounds of this task; unset fields take the agent's"`
	ContinueFrom   string    `json:"continue_from,omitempty" jsonschema:"an earlier finished task (id or subtask:// URI) whose conversation this task carries on"`
	ThreadID       string    `json:"thread_id,omitempty" jsonschema:"put the task in this conversation (letters, digits, _ and -): it continues the thread's previous task"`
	ThreadPolicy   string    `json:"thread_policy,omitempty" jsonschema:"when the thread's previous task has not finished: reject (the default), enqueue, interrupt or rollback"`
	NoCache        bool      `json:"no_cache,omitempty" jsonschema:"run the agent even if an identical task's result is in its result cache"`
	IdempotencyKey string    `json:"idempotency_key,omitempty" jsonschema:"a retried delegate with the same key returns the first task instead of a second one"`
	Tags           []string  `json:"tags,omitempty" jsonschema:"labels to find the task by (list_tasks tag)"`
	WaitSeconds    int       `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds for the task to end (progress notifications meanwhile); 0 returns at once"`
}

type budgetIn struct {
	MaxSteps           int32   `json:"max_steps,omitempty" jsonschema:"at most this many agent steps"`
	MaxTokens          int64   `json:"max_tokens,omitempty" jsonschema:"at most this many model tokens"`
	MaxCostUSD         float64 `json:"max_cost_usd,omitempty" jsonschema:"at most this cost in US dollars"`
	MaxWallTimeSeconds int64   `json:"max_wall_time_seconds,omitempty" jsonschema:"at most this long, from the first start"`
}

type taskIn struct {
	TaskID string `json:"task_id" jsonschema:"the task's id (or its subtask:// URI)"`
}

type cancelIn struct {
	TaskID string `json:"task_id" jsonschema:"the task's id (or its subtask:// URI)"`
	Reason string `json:"reason,omitempty" jsonschema:"why, recorded with the cancellation"`
}

type resultIn struct {
	TaskID      string `json:"task_id" jsonschema:"the task's id (or its subtask:// URI)"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds for the task to end (progress notifications meanwhile); 0 answers at once"`
}

type listIn struct {
	Status       []string `json:"status,omitempty" jsonschema:"only tasks in these statuses"`
	Agent        string   `json:"agent,omitempty" jsonschema:"only tasks of this agent"`
	Tag          string   `json:"tag,omitempty" jsonschema:"only tasks carrying this tag"`
	ParentTaskID string   `json:"parent_task_id,omitempty" jsonschema:"only sub-tasks of this task"`
	PageSize     int32    `json:"page_size,omitempty" jsonschema:"at most this many tasks (default 20, at most 100)"`
	PageToken    string   `json:"page_token,omitempty" jsonschema:"next_page_token of the previous page"`
}

type listOut struct {
	Tasks         []taskView `json:"tasks"`
	NextPageToken string     `json:"next_page_token,omitempty"`
}

// resultOut is get_result's answer.
type resultOut struct {
	TaskID      string     `json:"task_id"`
	Status      string     `json:"status"`
	Finished    bool       `json:"finished" jsonschema:"the task has ended; false: ask again later"`
	Result      string     `json:"result,omitempty" jsonschema:"the answer of a completed task"`
	Error       string     `json:"error,omitempty" jsonschema:"why the task failed or was cancelled"`
	FailureKind string     `json:"failure_kind,omitempty"`
	Usage       *usageView `json:"usage,omitempty"`
}

const (
	defaultListPage = 20
	maxListPage     = 100
)

// schema infers T's JSON Schema; json.RawMessage fields are any JSON.
func schema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {},
	}})
	if err != nil {
		panic(err) // the types are this package's: a programming error
	}
	return s
}

func enum(s *jsonschema.Schema, prop string, values ...string) {
	p := s.Properties[prop]
	if p.Items != nil {
		p = p.Items
	}
	for _, v := range values {
		p.Enum = append(p.Enum, v)
	}
}

// atLeastZero makes the properties' schemas refuse a negative number
// (wait_seconds -5 was taken as 0, a task submitted nonetheless).
func atLeastZero(s *jsonschema.Schema, props ...string) *jsonschema.Schema {
	for _, prop := range props {
		s.Properties[prop].Minimum = ptr(0.0)
	}
	return s
}

var statusNames = []string{"created", "queued", "assigned", "running", "blocked", "completed", "failed", "cancelled"}

func (s *server) addTools() {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}
	in := atLeastZero(schema[delegateIn](), "wait_seconds")
	enum(in, "priority", door.PriorityNames...)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: ToolDelegate, Title: "Delegate a task",
		Description: "Hand a task to an agent of agentmesh. It is accepted durably and runs in the background; " +
			"the answer is the task (its id and status) at once, or after wait_seconds. Clients of the tasks extension " +
			"(io.modelcontextprotocol/tasks) get a task handle to poll with tasks/get.",
		InputSchema: in, OutputSchema: schema[taskView](),
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(true)},
	}, s.delegate)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: ToolCheckStatus, Title: "Check a task's status",
		Description: "Where a task stands: status, agent, steps, usage, what a blocked task waits for (an approval " +
			"shows the exact tool call), and a preview of the result.",
		InputSchema: schema[taskIn](), OutputSchema: schema[taskView](), Annotations: readOnly,
	}, s.checkStatus)
	list := atLeastZero(schema[listIn](), "page_size")
	enum(list, "status", statusNames...)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: ToolListTasks, Title: "List tasks",
		Description: "Your org's tasks, newest first, filtered by status, agent, tag or parent, a page at a time.",
		InputSchema: list, OutputSchema: schema[listOut](), Annotations: readOnly,
	}, s.listTasks)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: ToolCancelTask, Title: "Cancel a task",
		Description: "Cancel a task that has not finished (and its sub-tasks). Needs a key that may submit tasks.",
		InputSchema: schema[cancelIn](), OutputSchema: schema[taskView](),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.cancelTask)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name: ToolGetResult, Title: "Get a task's result",
		Description: "The answer of a finished task (or why it failed), waiting up to wait_seconds for it to end.",
		InputSchema: atLeastZero(schema[resultIn](), "wait_seconds"), OutputSchema: schema[resultOut](), Annotations: readOnly,
	}, s.getResult)
}

func ptr[T any](v T) *T { return &v }

// toolError is an API error as a tool's failure (a result with isError:
// the model reads it and can correct itself).
func (s *server) toolError(err error) error {
	return errors.New(door.Sentence(s.log, err))
}

func text(s string) []mcp.Content { return []mcp.Content{&mcp.TextContent{Text: s}} }

// request is the SubmitTaskRequest of delegate's arguments.
func (in delegateIn) request() (*agentmeshv1.SubmitTaskRequest, error) {
	if strings.TrimSpace(in.Task) == "" {
		return nil, errors.New("task: required (what to do, in words)")
	}
	prio, err := door.ParsePriority(in.Priority)
	if err != nil {
		return nil, fmt.Errorf("priority: %w", err)
	}
	input := in.Task
	if c := strings.TrimSpace(in.Context); c != "" {
		input += "\n\nContext:\n" + c
	}
	policy, err := memory.ParseThreadPolicy(in.ThreadPolicy)
	if err != nil {
		return nil, fmt.Errorf("thread_policy: %w", err)
	}
	req := &agentmeshv1.SubmitTaskRequest{
		Input: input, Title: in.Title, Agent: in.Agent, RequiredSkills: in.Skills, Priority: prio,
		ContinueFrom: in.ContinueFrom, IdempotencyKey: in.IdempotencyKey, Tags: in.Tags,
		ThreadId: in.ThreadID, ThreadPolicy: policy, NoCache: in.NoCache,
		Metadata: map[string]string{"door": "mcp"},
	}
	if b := in.Budget; b != nil {
		req.Budget = &agentmeshv1.Budget{MaxSteps: b.MaxSteps, MaxTokens: b.MaxTokens, MaxCostUsd: b.MaxCostUSD}
		if b.MaxWallTimeSeconds != 0 {
			req.Budget.MaxWallTime = durationpb.New(time.Duration(b.MaxWallTimeSeconds) * time.Second)
		}
	}
	return req, nil
}

func (s *server) delegate(ctx context.Context, req *mcp.CallToolRequest, in delegateIn) (*mcp.CallToolResult, taskView, error) {
	sreq, err := in.request()
	if err != nil {
		return nil, taskView{}, err
	}
	t, err := s.api.Submit(ctx, sreq)
	if err != nil {
		return nil, taskView{}, s.toolError(err)
	}
	if cell := taskCellFrom(ctx); cell != nil {
		cell.task = t // the tasks extension answers with a task handle
		return &mcp.CallToolResult{Content: text(summary(t))}, viewOf(t, false), nil
	}
	if in.WaitSeconds > 0 {
		if t, err = s.follow(ctx, req, t, in.WaitSeconds); err != nil {
			return nil, taskView{}, s.toolError(err)
		}
	}
	return &mcp.CallToolResult{Content: text(summary(t))}, viewOf(t, false), nil
}

func (s *server) checkStatus(ctx context.Context, _ *mcp.CallToolRequest, in taskIn) (*mcp.CallToolResult, taskView, error) {
	t, err := s.api.Get(ctx, in.TaskID)
	if err != nil {
		return nil, taskView{}, s.toolError(err)
	}
	return &mcp.CallToolResult{Content: text(summary(t))}, viewOf(t, false), nil
}

func (s *server) cancelTask(ctx context.Context, _ *mcp.CallToolRequest, in cancelIn) (*mcp.CallToolResult, taskView, error) {
	t, err := s.api.Cancel(ctx, in.TaskID, in.Reason)
	if err != nil {
		return nil, taskView{}, s.toolError(err)
	}
	return &mcp.CallToolResult{Content: text(summary(t))}, viewOf(t, false), nil
}

func (s *server) listTasks(ctx context.Context, _ *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
	req := &agentmeshv1.ListTasksRequest{Agent: in.Agent, Tag: in.Tag, ParentTaskId: in.ParentTaskID, PageToken: in.PageToken, PageSize: in.PageSize}
	switch {
	case req.PageSize <= 0:
		req.PageSize = defaultListPage
	case req.PageSize > maxListPage:
		req.PageSize = maxListPage
	}
	for _, name := range in.Status {
		st, ok := taskstate.Parse(strings.ToLower(name))
		if !ok {
			return nil, listOut{}, fmt.Errorf("status: unknown status %q (want %s)", name, strings.Join(statusNames, ", "))
		}
		req.Statuses = append(req.Statuses, st)
	}
	resp, err := s.api.List(ctx, req)
	if err != nil {
		return nil, listOut{}, s.toolError(err)
	}
	out := listOut{Tasks: []taskView{}, NextPageToken: resp.GetNextPageToken()}
	var b strings.Builder
	fmt.Fprintf(&b, "%d tasks", len(resp.GetTasks()))
	for _, t := range resp.GetTasks() {
		v := viewOf(t, false)
		v.Result, v.ResultTruncated = "", false // a list is an index: get_result reads one
		out.Tasks = append(out.Tasks, v)
		fmt.Fprintf(&b, "\n%s  %s  %s  %s", t.GetId(), v.Status, t.GetAgent(), door.Cut(t.GetTitle()+" "+firstLine(t.GetInput()), 80))
	}
	if out.NextPageToken != "" {
		b.WriteString("\nmore: page_token " + out.NextPageToken)
	}
	return &mcp.CallToolResult{Content: text(b.String())}, out, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func (s *server) getResult(ctx context.Context, req *mcp.CallToolRequest, in resultIn) (*mcp.CallToolResult, resultOut, error) {
	t, err := s.api.Get(ctx, in.TaskID)
	if err != nil {
		return nil, resultOut{}, s.toolError(err)
	}
	if in.WaitSeconds > 0 {
		if t, err = s.follow(ctx, req, t, in.WaitSeconds); err != nil {
			return nil, resultOut{}, s.toolError(err)
		}
	}
	out := resultOut{TaskID: t.GetId(), Status: taskstate.Name(t.GetStatus()), Finished: taskstate.Terminal(t.GetStatus()),
		Result: t.GetResult(), Error: t.GetError()}
	if u := t.GetUsage(); u != nil {
		out.Usage = &usageView{u.GetPromptTokens(), u.GetCompletionTokens(), u.GetTotalTokens(), u.GetCostUsd()}
	}
	res := &mcp.CallToolResult{}
	switch t.GetStatus() {
	case agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED:
		res.Content = text(t.GetResult())
	case agentmeshv1.TaskStatus_TASK_STATUS_FAILED, agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED:
		out.FailureKind = taskstate.KindName(t.GetFailureKind())
		if t.GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED {
			out.FailureKind = ""
		}
		res.Content = text(fmt.Sprintf("Task %s %s: %s", t.GetId(), out.Status, t.GetError()))
	default:
		res.Content = text(summary(t) + " It has not finished: ask again later (or with wait_seconds).")
	}
	return res, out, nil
}
