package door

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/grpc"
)

// Deps are a door's dependencies (mcpserver.Deps and a2a.Deps are this).
type Deps struct {
	// Conn reaches the router's public gRPC API (a client connection to
	// its listen address). Required.
	Conn grpc.ClientConnInterface
	// Log receives what goes wrong inside (never sent to clients). Required.
	Log *slog.Logger
}

// Check names a missing dependency of the door pkg.
func (d Deps) Check(pkg string) error {
	if d.Conn == nil {
		return fmt.Errorf("%s: Deps.Conn is required", pkg)
	}
	if d.Log == nil {
		return fmt.Errorf("%s: Deps.Log is required", pkg)
	}
	return nil
}

// CallTimeout bounds one unary call of API.
const CallTimeout = 30 * time.Second

// keyCtx carries the caller's API key from where a door reads it (the HTTP
// request, or stdio's configuration) to the calls it makes.
type keyCtx struct{}

// WithKey returns ctx carrying the caller's API key for API's calls.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// KeyFrom returns the key WithKey put in ctx, or "".
func KeyFrom(ctx context.Context) string {
	k, _ := ctx.Value(keyCtx{}).(string)
	return k
}

// API is the router's public gRPC API as the doors call it. Every call
// carries the caller's key (KeyFrom(ctx)), so the API's keys, roles, org
// checks, rate limits, validation and error codes are the door's.
type API struct {
	Tasks     agentmeshv1.TaskServiceClient
	Approvals agentmeshv1.ApprovalServiceClient
	Agents    agentmeshv1.AgentServiceClient
	Skills    agentmeshv1.SkillServiceClient
}

// NewAPI returns the API over conn (the router's gRPC address).
func NewAPI(conn grpc.ClientConnInterface) *API {
	return &API{
		Tasks:     agentmeshv1.NewTaskServiceClient(conn),
		Approvals: agentmeshv1.NewApprovalServiceClient(conn),
		Agents:    agentmeshv1.NewAgentServiceClient(conn),
		Skills:    agentmeshv1.NewSkillServiceClient(conn),
	}
}

// Call bounds a unary call by CallTimeout and attaches the caller's key.
func Call(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	return Outgoing(ctx, KeyFrom(ctx)), cancel
}

// Submit submits a task; it returns once the task is committed.
func (a *API) Submit(ctx context.Context, req *agentmeshv1.SubmitTaskRequest) (*agentmeshv1.Task, error) {
	ctx, cancel := Call(ctx)
	defer cancel()
	resp, err := a.Tasks.SubmitTask(ctx, req)
	return resp.GetTask(), err
}

// Get returns one task.
func (a *API) Get(ctx context.Context, id string) (*agentmeshv1.Task, error) {
	ctx, cancel := Call(ctx)
	defer cancel()
	resp, err := a.Tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: id})
	return resp.GetTask(), err
}

// List lists tasks.
func (a *API) List(ctx context.Context, req *agentmeshv1.ListTasksRequest) (*agentmeshv1.ListTasksResponse, error) {
	ctx, cancel := Call(ctx)
	defer cancel()
	return a.Tasks.ListTasks(ctx, req)
}

// Cancel cancels a task that has not finished.
func (a *API) Cancel(ctx context.Context, id, reason string) (*agentmeshv1.Task, error) {
	ctx, cancel := Call(ctx)
	defer cancel()
	resp, err := a.Tasks.CancelTask(ctx, &agentmeshv1.CancelTaskRequest{Id: id, Reason: reason})
	return resp.GetTask(), err
}

// Decide approves or rejects an approval (the API requires the approver
// role) and returns the task as it stands after.
func (a *API) Decide(ctx context.Context, approvalID string, approve bool, comment string) (*agentmeshv1.Task, error) {
	ctx, cancel := Call(ctx)
	defer cancel()
	if approve {
		resp, err := a.Approvals.ApproveToolCall(ctx, &agentmeshv1.ApproveToolCallRequest{ApprovalId: approvalID, Comment: comment})
		return resp.GetTask(), err
	}
	resp, err := a.Approvals.RejectToolCall(ctx, &agentmeshv1.RejectToolCallRequest{ApprovalId: approvalID, Comment: comment})
	return resp.GetTask(), err
}

// Watch streams the task's events after seq until it ends or ctx does.
func (a *API) Watch(ctx context.Context, id string, after int64) (agentmeshv1.TaskService_WatchTaskClient, error) {
	return a.Tasks.WatchTask(Outgoing(ctx, KeyFrom(ctx)), &agentmeshv1.WatchTaskRequest{Id: id, AfterSeq: after})
}

// WatchAdmitted is Watch that returns once the router accepted the watch
// (it sends its header then) or refused it (the error: not found, the
// org's watches all taken): for a door that answers before news comes. A
// watch that ended at once, with nothing to say, gives io.EOF.
func (a *API) WatchAdmitted(ctx context.Context, id string, after int64) (agentmeshv1.TaskService_WatchTaskClient, error) {
	stream, err := a.Watch(ctx, id, after)
	if err != nil {
		return nil, err
	}
	if md, _ := stream.Header(); md == nil {
		// Ended without a header: refused, or nothing to say. (A message
		// without a header does not come — gRPC sends the header first —
		// and would count as nothing to say: never a nil stream and error.)
		if _, err := stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return nil, io.EOF
	}
	return stream, nil
}
