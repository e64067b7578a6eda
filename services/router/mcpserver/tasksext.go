package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TasksExtension is the identifier of the MCP tasks extension (SEP-2663,
// modelcontextprotocol/ext-tasks): a tools/call answered with a durable
// task handle, polled with tasks/get, given input with tasks/update,
// cancelled with tasks/cancel.
const TasksExtension = "io.modelcontextprotocol/tasks"

// Methods of the tasks extension.
const (
	MethodTasksGet    = "tasks/get"
	MethodTasksUpdate = "tasks/update"
	MethodTasksCancel = "tasks/cancel"
)

// MetaApproval is the _meta key of an input request that carries the
// approval it stands for (id, tool, exact arguments, risk, reason,
// deadline).
const MetaApproval = "io.agentmesh/approval"

// Task states of the extension.
const (
	stateWorking       = "working"
	stateInputRequired = "input_required"
	stateCompleted     = "completed"
	stateCancelled     = "cancelled"
)

// taskCell carries the task delegate created out of the tool handler, to
// the middleware that answers a client of the extension with its handle.
type taskCell struct{ task *agentmeshv1.Task }

type taskCellCtx struct{}

func withTaskCell(ctx context.Context, c *taskCell) context.Context {
	return context.WithValue(ctx, taskCellCtx{}, c)
}

func taskCellFrom(ctx context.Context) *taskCell {
	c, _ := ctx.Value(taskCellCtx{}).(*taskCell)
	return c
}

// extTask is the extension's Task: a CreateTaskResult (resultType
// "task"), or the DetailedTask tasks/get answers (resultType "complete"),
// with inputRequests, result or error as its status has them.
type extTask struct {
	mcp.ResultBase
	ResultType     string                  `json:"resultType"`
	TaskID         string                  `json:"taskId"`
	Status         string                  `json:"status"`
	StatusMessage  string                  `json:"statusMessage,omitempty"`
	CreatedAt      string                  `json:"createdAt"`
	LastUpdatedAt  string                  `json:"lastUpdatedAt"`
	TTLMs          *int64                  `json:"ttlMs"` // null: agentmesh keeps tasks (retention aside)
	PollIntervalMs int64                   `json:"pollIntervalMs,omitempty"`
	InputRequests  map[string]inputRequest `json:"inputRequests,omitempty"`
	Result         *mcp.CallToolResult     `json:"result,omitempty"`
}

// inputRequest is a server-to-client request the task waits on: an
// approval, as a form elicitation.
type inputRequest struct {
	Method string         `json:"method"`
	Params elicitApproval `json:"params"`
}

type elicitApproval struct {
	Meta            map[string]any `json:"_meta,omitempty"`
	Mode            string         `json:"mode"`
	Message         string         `json:"message"`
	RequestedSchema map[string]any `json:"requestedSchema"`
}

// ackResult is the empty acknowledgement of tasks/update and tasks/cancel.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

type taskIDParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type updateParams struct {
	mcp.ParamsBase
	TaskID         string                     `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
}

// elicitResult is an answer to an input request (an ElicitResult).
type elicitResult struct {
	Action  string `json:"action"`
	Content struct {
		Decision string `json:"decision"`
		Comment  string `json:"comment"`
	} `json:"content"`
}

func (s *server) addTaskMethods() error {
	if err := mcp.AddReceivingCustomMethod(s.mcp, MethodTasksGet, s.tasksGet); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(s.mcp, MethodTasksUpdate, s.tasksUpdate); err != nil {
		return err
	}
	return mcp.AddReceivingCustomMethod(s.mcp, MethodTasksCancel, s.tasksCancel)
}

// declared reports whether the client declared the extension: in the
// request's per-request capabilities (_meta, the extension's way) or in
// the capabilities it gave at initialize.
func declared(ss *mcp.ServerSession, meta mcp.Meta) bool {
	if caps, ok := meta[mcp.MetaKeyClientCapabilities].(map[string]any); ok {
		if ext, ok := caps["extensions"].(map[string]any); ok {
			if _, ok := ext[TasksExtension].(map[string]any); ok {
				return true
			}
		}
	}
	if ss == nil {
		return false
	}
	if ip := ss.InitializeParams(); ip != nil && ip.Capabilities != nil {
		_, ok := ip.Capabilities.Extensions[TasksExtension]
		return ok
	}
	return false
}

var errUndeclared = func() *jsonrpc.Error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{
		"extensions": map[string]any{TasksExtension: map[string]any{}}}})
	return &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities, Message: "Missing required client capability", Data: data}
}()

// callTool answers delegate with a task handle for clients of the
// extension: the tool runs as for anyone (arguments checked, the task
// submitted and committed), then its task becomes the CreateTaskResult. A
// delegate the API refused answers with its standard result (isError).
func (s *server) callTool(ctx context.Context, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	r, ok := req.(*mcp.CallToolRequest)
	if !ok || r.Params == nil || r.Params.Name != ToolDelegate || !declared(r.Session, r.Params.Meta) {
		return next(ctx, method, req)
	}
	cell := &taskCell{}
	res, err := next(withTaskCell(ctx, cell), method, req)
	if err != nil || cell.task == nil {
		return res, err
	}
	t := s.extTaskOf(cell.task)
	t.ResultType, t.InputRequests, t.Result = "task", nil, nil
	return t, nil
}

// taskRPCError is an API error as the extension's JSON-RPC error: a task
// that does not exist (or is another org's) is -32602.
func (s *server) taskRPCError(err error) error {
	re := door.FromError(s.log, err, door.CodeInvalidParams)
	if status.Code(err) == codes.NotFound {
		re.Message = "Failed to retrieve task: " + re.Message
	}
	data, _ := json.Marshal(re.Data)
	return &jsonrpc.Error{Code: re.Code, Message: re.Message, Data: data}
}

// admit checks a request of the extension: the client declared it, and it
// names a task.
func admit(ss *mcp.ServerSession, meta mcp.Meta, taskID string) error {
	if !declared(ss, meta) {
		return errUndeclared
	}
	if strings.TrimSpace(taskID) == "" {
		return &jsonrpc.Error{Code: door.CodeInvalidParams, Message: "taskId: required"}
	}
	return nil
}

// task reads the task a request of the extension names.
func (s *server) task(ctx context.Context, ss *mcp.ServerSession, meta mcp.Meta, taskID string) (*agentmeshv1.Task, error) {
	if err := admit(ss, meta, taskID); err != nil {
		return nil, err
	}
	t, err := s.api.Get(ctx, taskID)
	if err != nil {
		return nil, s.taskRPCError(err)
	}
	return t, nil
}

func (s *server) tasksGet(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (*extTask, error) {
	t, err := s.task(ctx, ss, p.Meta, p.TaskID)
	if err != nil {
		return nil, err
	}
	return s.extTaskOf(t), nil
}

func (s *server) tasksCancel(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (*ackResult, error) {
	if err := admit(ss, p.Meta, p.TaskID); err != nil {
		return nil, err
	}
	_, err := s.api.Cancel(ctx, p.TaskID, "cancelled by the MCP client (tasks/cancel)")
	if err != nil && status.Code(err) != codes.FailedPrecondition {
		// A task that already finished is acknowledged: cancellation is
		// cooperative, and it ended otherwise.
		return nil, s.taskRPCError(err)
	}
	return &ackResult{ResultType: "complete"}, nil
}

// tasksUpdate answers the approval the task waits on: its input request's
// key is the approval's id; accept with decision approve or reject (and a
// comment), decline rejects, cancel leaves it pending. Responses to keys
// that are not outstanding are ignored. Deciding needs the approver role:
// the API refuses other keys (PermissionDenied naming the role).
func (s *server) tasksUpdate(ctx context.Context, ss *mcp.ServerSession, p *updateParams) (*ackResult, error) {
	t, err := s.task(ctx, ss, p.Meta, p.TaskID)
	if err != nil {
		return nil, err
	}
	a := t.GetPendingApproval()
	if a == nil || t.GetStatus() != agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED {
		return &ackResult{ResultType: "complete"}, nil
	}
	raw, ok := p.InputResponses[a.GetId()]
	if !ok {
		return &ackResult{ResultType: "complete"}, nil
	}
	approve, comment, decide, err := readDecision(a.GetId(), raw)
	if err != nil {
		return nil, err
	}
	if decide {
		_, err := s.api.Decide(ctx, a.GetId(), approve, comment)
		if err != nil && status.Code(err) != codes.FailedPrecondition {
			return nil, s.taskRPCError(err) // FailedPrecondition: decided meanwhile
		}
	}
	return &ackResult{ResultType: "complete"}, nil
}

// readDecision reads the answer to approval id: decide false for cancel
// (the request stays outstanding).
func readDecision(id string, raw json.RawMessage) (approve bool, comment string, decide bool, err error) {
	var r elicitResult
	field := "inputResponses[" + id + "]"
	if uerr := json.Unmarshal(raw, &r); uerr != nil {
		return false, "", false, &jsonrpc.Error{Code: door.CodeInvalidParams, Message: field + ": not an elicitation result: " + uerr.Error()}
	}
	comment = r.Content.Comment
	switch r.Action {
	case "accept":
		switch strings.ToLower(r.Content.Decision) {
		case "approve":
			return true, comment, true, nil
		case "reject":
			return false, comment, true, nil
		}
		return false, "", false, &jsonrpc.Error{Code: door.CodeInvalidParams,
			Message: fmt.Sprintf("%s.content.decision: %q, want approve or reject", field, r.Content.Decision)}
	case "decline":
		if comment == "" {
			comment = "declined"
		}
		return false, comment, true, nil
	case "cancel":
		return false, "", false, nil
	}
	return false, "", false, &jsonrpc.Error{Code: door.CodeInvalidParams,
		Message: fmt.Sprintf("%s.action: %q, want accept, decline or cancel", field, r.Action)}
}

// extTaskOf maps an agentmesh task onto the extension's Task. A completed
// task carries delegate's final result (the answer as text, the task as
// structured content); a failed one is a completed tool call with isError,
// as the extension requires ("failed" is kept for JSON-RPC errors, and
// delegate's call itself succeeded); a task blocked on an approval is
// input_required with the approval as a form elicitation; any other
// unfinished task is working.
func (s *server) extTaskOf(t *agentmeshv1.Task) *extTask {
	e := &extTask{
		ResultType: "complete", TaskID: t.GetId(), Status: stateWorking,
		CreatedAt: stamp(t.GetCreatedAt()), LastUpdatedAt: stamp(t.GetUpdatedAt()),
		PollIntervalMs: s.cfg.PollInterval.Milliseconds(),
	}
	if e.LastUpdatedAt == "" {
		e.LastUpdatedAt = e.CreatedAt
	}
	name := taskstate.Name(t.GetStatus())
	switch t.GetStatus() {
	case agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED:
		e.Status, e.StatusMessage = stateCompleted, "completed"
		v := viewOf(t, false)
		v.Result, v.ResultTruncated = t.GetResult(), false
		e.Result = &mcp.CallToolResult{Content: text(t.GetResult()), StructuredContent: v}
	case agentmeshv1.TaskStatus_TASK_STATUS_FAILED:
		e.Status = stateCompleted
		e.StatusMessage = "failed (" + taskstate.KindName(t.GetFailureKind()) + "): " + t.GetError()
		e.Result = &mcp.CallToolResult{Content: text("Task " + t.GetId() + " " + e.StatusMessage), StructuredContent: viewOf(t, false), IsError: true}
	case agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED:
		e.Status, e.StatusMessage = stateCancelled, t.GetError()
	case agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED:
		if a := t.GetPendingApproval(); a != nil {
			e.Status, e.StatusMessage = stateInputRequired, "waiting for approval of the tool call "+a.GetTool()
			e.InputRequests = map[string]inputRequest{a.GetId(): approvalRequest(t, a)}
		} else {
			e.StatusMessage = "blocked: waiting on " + door.BlockedOnName(t.GetBlockedOn())
		}
	default:
		e.StatusMessage = name
		if n := t.GetStepCount(); n > 0 {
			e.StatusMessage = fmt.Sprintf("%s: %d steps", name, n)
		}
	}
	return e
}

// approvalRequest is an approval as a form elicitation: the exact tool call
// in the message and in _meta, a decision (approve or reject) and a
// comment to give.
func approvalRequest(t *agentmeshv1.Task, a *agentmeshv1.Approval) inputRequest {
	msg := fmt.Sprintf("Task %s (agent %s) asks to run the tool %s with the arguments %s", t.GetId(), t.GetAgent(), a.GetTool(), a.GetArguments())
	if a.GetRisk() != "" {
		msg += " (risk: " + a.GetRisk() + ")"
	}
	if a.GetReason() != "" {
		msg += ". " + a.GetReason()
	}
	msg += ". Approve or reject it."
	return inputRequest{Method: "elicitation/create", Params: elicitApproval{
		Meta: map[string]any{MetaApproval: approvalOf(a)},
		Mode: "form", Message: msg,
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"decision": map[string]any{"type": "string", "title": "Decision", "enum": []string{"approve", "reject"},
					"description": "approve runs the call once with exactly these arguments; reject tells the agent it may not"},
				"comment": map[string]any{"type": "string", "title": "Comment", "description": "recorded with the decision; the agent reads it on a rejection"},
			},
			"required": []string{"decision"},
		},
	}}
}
