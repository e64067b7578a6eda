package router

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/budget"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskgraph"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"google.golang.org/protobuf/proto"
)

// Bounds of the graph fields.
const (
	maxDependsOn   = 1000
	maxTags        = 32
	maxTagBytes    = 64
	maxGraphTasks  = 10000
	refPattern     = `[A-Za-z0-9_-]{1,64}`
	maxCancelBatch = 500
)

var refRe = regexp.MustCompile(`^` + refPattern + `$`)

// validateGraphFields checks depends_on, dependency_policy, tags and
// parent_task_id of a submit. refs says whether "ref:" entries are allowed
// (SubmitTasks).
func validateGraphFields(req *agentmeshv1.SubmitTaskRequest, refs bool) error {
	deps := req.GetDependsOn()
	if len(deps) > maxDependsOn {
		return tooLarge("depends_on", "%d parents is over the limit of %d", len(deps), maxDependsOn)
	}
	for i, d := range deps {
		f := fmt.Sprintf("depends_on[%d]", i)
		if ref, ok := strings.CutPrefix(d, taskgraph.RefPrefix); ok {
			if !refs {
				return bus.FieldError(f, "%q: \"ref:\" names a task of the same SubmitTasks request; SubmitTask takes task ids", d)
			}
			if !refRe.MatchString(ref) {
				return bus.FieldError(f, "ref %.40q must match %s", ref, refPattern)
			}
			continue
		}
		if err := checkID(f, d); err != nil {
			return err
		}
	}
	if p := req.GetDependencyPolicy(); agentmeshv1.DependencyPolicy_name[int32(p)] == "" {
		return bus.FieldError("dependency_policy", "unknown value %d", int32(p))
	}
	if err := checkTags("tags", req.GetTags()); err != nil {
		return err
	}
	if p := req.GetParentTaskId(); p != "" {
		if err := checkID("parent_task_id", p); err != nil {
			return err
		}
	}
	return nil
}

func checkTags(field string, tags []string) error {
	if len(tags) > maxTags {
		return tooLarge(field, "%d tags is over the limit of %d", len(tags), maxTags)
	}
	for i, t := range tags {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case t == "":
			return bus.FieldError(f, "must not be empty")
		case len(t) > maxTagBytes:
			return bus.FieldError(f, "longer than %d bytes", maxTagBytes)
		case strings.ContainsAny(t, " \t\r\n,"):
			return bus.FieldError(f, "must not contain spaces or commas")
		case slices.Contains(tags[:i], t):
			return bus.FieldError(f, "duplicate tag %q", t)
		}
		if err := printable(f, t); err != nil {
			return err
		}
	}
	return nil
}

// createdBy names the caller: its org and the name of its API key (never
// the key itself), or the org alone when authentication is off.
func createdBy(ctx context.Context) string {
	c, ok := CallerFrom(ctx)
	if !ok || c.KeyName == "" || c == anonymous {
		return c.Org
	}
	return c.Org + ":" + c.KeyName
}

// addGraphFields copies the graph fields of a submit into the task.
func addGraphFields(ctx context.Context, t *agentmeshv1.Task, req *agentmeshv1.SubmitTaskRequest) {
	t.DependsOn = req.GetDependsOn()
	t.DependencyPolicy = req.GetDependencyPolicy()
	t.Tags = req.GetTags()
	t.ParentTaskId = req.GetParentTaskId()
	t.CreatedBy = createdBy(ctx)
}

// checkParentTask answers NotFound naming parent_task_id unless the task
// exists in the caller's org, and FailedPrecondition when it has ended (a
// task that ends leaves no sub-task running: docs/delegation.md).
func (s *Service) checkParentTask(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	p, err := s.getTask(ctx, id)
	if err != nil {
		if errors.Is(err, bus.ErrNotFound) {
			return &bus.Error{Code: bus.CodeNotFound, Field: "parent_task_id", Message: fmt.Sprintf("task %q not found", id)}
		}
		return err
	}
	if taskstate.Terminal(p.GetStatus()) {
		return &bus.Error{Code: bus.CodeFailedPrecondition, Field: "parent_task_id",
			Message: fmt.Sprintf("task %s has ended (%s): the sub-tasks of an ended task are cancelled", id, taskstate.Name(p.GetStatus()))}
	}
	return nil
}

// graphServer implements agentmeshv1.TaskGraphService.
type graphServer struct {
	agentmeshv1.UnimplementedTaskGraphServiceServer
	s *Service
}

func (g *graphServer) SubmitTasks(ctx context.Context, req *agentmeshv1.SubmitTasksRequest) (*agentmeshv1.SubmitTasksResponse, error) {
	resp, err := g.s.submitTasks(ctx, req)
	return resp, toStatus(g.s.log, "SubmitTasks", err)
}

func (g *graphServer) UpdateTask(ctx context.Context, req *agentmeshv1.UpdateTaskRequest) (*agentmeshv1.UpdateTaskResponse, error) {
	resp, err := g.s.updateTask(ctx, req)
	return resp, toStatus(g.s.log, "UpdateTask", err)
}

func (g *graphServer) DeleteTask(ctx context.Context, req *agentmeshv1.DeleteTaskRequest) (*agentmeshv1.DeleteTaskResponse, error) {
	resp, err := g.s.deleteTask(ctx, req)
	return resp, toStatus(g.s.log, "DeleteTask", err)
}

func (g *graphServer) CancelTasks(ctx context.Context, req *agentmeshv1.CancelTasksRequest) (*agentmeshv1.CancelTasksResponse, error) {
	resp, err := g.s.cancelTasks(ctx, req)
	return resp, toStatus(g.s.log, "CancelTasks", err)
}

func prefixErr(prefix string, err error) error {
	var be *bus.Error
	if errors.As(err, &be) {
		c := *be
		if c.Field != "" {
			c.Field = prefix + "." + c.Field
		} else {
			c.Field = prefix
		}
		return &c
	}
	return err
}

func (s *Service) submitTasks(ctx context.Context, req *agentmeshv1.SubmitTasksRequest) (*agentmeshv1.SubmitTasksResponse, error) {
	n := len(req.GetTasks())
	switch {
	case n == 0:
		return nil, bus.FieldError("tasks", "at least one task is required")
	case n > maxGraphTasks:
		return nil, tooLarge("tasks", "%d tasks is over the limit of %d", n, maxGraphTasks)
	}
	out := &busv1.CreateTasksRequest{Tasks: make([]*agentmeshv1.Task, n), Refs: make([]string, n)}
	matched := map[string]*agentmeshv1.Agent{}    // match key → agent
	routings := map[string]*agentmeshv1.Routing{} // match key → how it was chosen
	for i, gt := range req.GetTasks() {
		field := fmt.Sprintf("tasks[%d]", i)
		ref := gt.GetRef()
		if ref == "" {
			ref = fmt.Sprintf("#%d", i) // nothing can name it
		} else if !refRe.MatchString(ref) {
			return nil, bus.FieldError(field+".ref", "must match %s", refPattern)
		}
		sub := gt.GetTask()
		if sub == nil {
			return nil, bus.FieldError(field+".task", "required")
		}
		prio, err := validateSubmit(sub, s.limits())
		if err != nil {
			return nil, prefixErr(field+".task", err)
		}
		if sub.GetIdempotencyKey() != "" {
			return nil, bus.FieldError(field+".task.idempotency_key", "not supported in SubmitTasks (the graph is created once or not at all)")
		}
		if err := validateGraphFields(sub, true); err != nil {
			return nil, prefixErr(field+".task", err)
		}
		if err := s.checkParentTask(ctx, sub.GetParentTaskId()); err != nil {
			return nil, prefixErr(field+".task", err)
		}
		key := sub.GetAgent() + "\x00" + strings.Join(sub.GetRequiredSkills(), "\x00")
		agent, ok := matched[key]
		routing := routings[key]
		if !ok {
			var match busv1.MatchResponse
			err := bus.Request(ctx, s.nc, s.names.Registry(subjects.RegistryMatch),
				&busv1.MatchRequest{Agent: sub.GetAgent(), RequiredSkills: sub.GetRequiredSkills(), Org: orgFrom(ctx), Limit: submitRoutingCandidates, Input: analysisInput(sub)}, &match)
			if err == nil && match.GetAgent().GetName() == "" {
				err = bus.ErrNotFound
			}
			if err != nil {
				return nil, prefixErr(field+".task", matchError(sub, err))
			}
			agent, routing = match.GetAgent(), match.GetRouting()
			matched[key], routings[key] = agent, routing
		}
		t := &agentmeshv1.Task{
			Org: orgFrom(ctx), Title: sub.GetTitle(), Input: sub.GetInput(), Agent: agent.GetName(),
			RequiredSkills: sub.GetRequiredSkills(), Priority: prio, Metadata: sub.GetMetadata(),
			Budget: budget.Merge(sub.GetBudget(), agent.GetBudget()), Routing: routing,
		}
		addGraphFields(ctx, t, sub)
		t.Traceparent = telemetry.Traceparent(ctx) // one call, one trace (tracing.go)
		out.Tasks[i], out.Refs[i] = t, ref
	}
	seen := map[string]bool{}
	for _, a := range matched {
		if !seen[a.GetName()] {
			seen[a.GetName()] = true
			out.Agents = append(out.Agents, a)
		}
	}
	if size := proto.Size(out); size > bus.MaxPayload*9/10 {
		return nil, tooLarge("tasks", "the graph is %d bytes, over the bus limit of %d bytes for one request", size, bus.MaxPayload*9/10)
	}
	var created busv1.CreateTasksResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateCreateTasks), out, &created); err != nil {
		return nil, err
	}
	return &agentmeshv1.SubmitTasksResponse{Tasks: created.GetTasks()}, nil
}

func (s *Service) updateTask(ctx context.Context, req *agentmeshv1.UpdateTaskRequest) (*agentmeshv1.UpdateTaskResponse, error) {
	if err := checkID("id", req.GetId()); err != nil {
		return nil, err
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, bus.FieldError("update_mask", "name at least one field: title, priority, metadata, tags, depends_on")
	}
	t := req.GetTask()
	upd := &agentmeshv1.TaskUpdate{Mask: paths}
	for _, p := range paths {
		switch p {
		case taskstate.FieldTitle:
			if n := len(t.GetTitle()); n > maxTitleBytes {
				return nil, tooLarge("task.title", "%d bytes is over the limit of %d bytes", n, maxTitleBytes)
			}
			if err := printable("task.title", t.GetTitle()); err != nil {
				return nil, err
			}
			upd.Title = t.GetTitle()
		case taskstate.FieldPriority:
			prio := t.GetPriority()
			if _, ok := agentmeshv1.Priority_name[int32(prio)]; !ok {
				return nil, bus.FieldError("task.priority", "unknown value %d", int32(prio))
			}
			if prio == agentmeshv1.Priority_PRIORITY_UNSPECIFIED {
				prio = agentmeshv1.Priority_PRIORITY_NORMAL
			}
			upd.Priority = prio
		case taskstate.FieldMetadata:
			if err := checkMetadata(t.GetMetadata(), s.limits()); err != nil {
				return nil, err
			}
			upd.Metadata = t.GetMetadata()
		case taskstate.FieldTags:
			if err := checkTags("task.tags", t.GetTags()); err != nil {
				return nil, err
			}
			upd.Tags = t.GetTags()
		case taskstate.FieldDependsOn:
			if err := validateGraphFields(&agentmeshv1.SubmitTaskRequest{DependsOn: t.GetDependsOn()}, false); err != nil {
				return nil, prefixErr("task", err)
			}
			upd.DependsOn = t.GetDependsOn()
		default:
			return nil, bus.FieldError("update_mask", "%q cannot be updated (title, priority, metadata, tags, depends_on)", p)
		}
	}
	var resp busv1.UpdateTaskResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateUpdateTask), &busv1.UpdateTaskRequest{
		Id: req.GetId(), Org: orgFrom(ctx), Update: upd,
	}, &resp); err != nil {
		return nil, err
	}
	return &agentmeshv1.UpdateTaskResponse{Task: resp.GetTask()}, nil
}

func (s *Service) deleteTask(ctx context.Context, req *agentmeshv1.DeleteTaskRequest) (*agentmeshv1.DeleteTaskResponse, error) {
	if err := checkID("id", req.GetId()); err != nil {
		return nil, err
	}
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateDeleteTask), &busv1.DeleteTaskRequest{
		Id: req.GetId(), Org: orgFrom(ctx),
	}, &busv1.DeleteTaskResponse{}); err != nil {
		return nil, err
	}
	return &agentmeshv1.DeleteTaskResponse{}, nil
}

// cancelTasks cancels the org's unfinished tasks matching the filter, page
// by page; a task that ends meanwhile is skipped.
func (s *Service) cancelTasks(ctx context.Context, req *agentmeshv1.CancelTasksRequest) (*agentmeshv1.CancelTasksResponse, error) {
	if req.GetAgent() == "" && req.GetTag() == "" && len(req.GetPriorities()) == 0 && req.GetParentTaskId() == "" &&
		req.GetCreatedAfter() == nil && req.GetCreatedBefore() == nil {
		return nil, bus.FieldError("agent", "set at least one filter (agent, tag, priorities, parent_task_id, created_after, created_before)")
	}
	list := &agentmeshv1.ListTasksRequest{
		Agent: req.GetAgent(), Tag: req.GetTag(), Priorities: req.GetPriorities(), ParentTaskId: req.GetParentTaskId(),
		CreatedAfter: req.GetCreatedAfter(), CreatedBefore: req.GetCreatedBefore(),
		Statuses: []agentmeshv1.TaskStatus{taskstate.Created, taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked},
	}
	if err := validateList(list); err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled by the client (CancelTasks)"
	}
	var n int64
	token := ""
	for {
		var resp busv1.ListTasksResponse
		if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
			Org: orgFrom(ctx), Statuses: list.Statuses, Agent: list.Agent, Tag: list.Tag, Priorities: list.Priorities,
			ParentTaskId: list.ParentTaskId, CreatedAfter: list.CreatedAfter, CreatedBefore: list.CreatedBefore,
			PageSize: maxCancelBatch, PageToken: token,
		}, &resp); err != nil {
			return nil, err
		}
		for _, t := range resp.GetTasks() {
			err := bus.Request(ctx, s.nc, s.names.State(subjects.StateCancel), &busv1.TransitionRequest{
				TaskId: t.GetId(), To: taskstate.Cancelled, Reason: reason, Org: orgFrom(ctx),
			}, &busv1.TransitionResponse{})
			switch {
			case err == nil:
				n++
			case errors.Is(err, bus.ErrFailedPrecondition), errors.Is(err, bus.ErrNotFound):
				// ended or went meanwhile
			default:
				return nil, fmt.Errorf("cancelled %d, then: %w", n, err)
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return &agentmeshv1.CancelTasksResponse{Cancelled: n}, nil
		}
	}
}

// metricsServer implements agentmeshv1.MetricsService.
type metricsServer struct {
	agentmeshv1.UnimplementedMetricsServiceServer
	s *Service
}

func (m *metricsServer) GetMetrics(ctx context.Context, req *agentmeshv1.GetMetricsRequest) (*agentmeshv1.GetMetricsResponse, error) {
	resp, err := m.s.getMetrics(ctx, req)
	return resp, toStatus(m.s.log, "GetMetrics", err)
}

func (s *Service) getMetrics(ctx context.Context, req *agentmeshv1.GetMetricsRequest) (*agentmeshv1.GetMetricsResponse, error) {
	if err := checkTime("start", req.GetStart()); err != nil {
		return nil, err
	}
	if err := checkTime("end", req.GetEnd()); err != nil {
		return nil, err
	}
	if a := req.GetAgent(); a != "" {
		if err := checkName("agent", a); err != nil {
			return nil, err
		}
	}
	var resp busv1.MetricsResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateMetrics), &busv1.MetricsRequest{Org: orgFrom(ctx), Query: req}, &resp); err != nil {
		return nil, err
	}
	return resp.GetMetrics(), nil
}

// validateListGraph checks the tag, priority and parent filters of a list.
func validateListGraph(req *agentmeshv1.ListTasksRequest) error {
	if t := req.GetTag(); t != "" {
		if err := checkTags("tag", []string{t}); err != nil {
			return bus.FieldError("tag", "%v", err.(*bus.Error).Message)
		}
	}
	for i, p := range req.GetPriorities() {
		if _, ok := agentmeshv1.Priority_name[int32(p)]; !ok || p == agentmeshv1.Priority_PRIORITY_UNSPECIFIED {
			return bus.FieldError(fmt.Sprintf("priorities[%d]", i), "unknown value %d", int32(p))
		}
	}
	if p := req.GetRootTaskId(); p != "" {
		if err := checkID("root_task_id", p); err != nil {
			return err
		}
	}
	if p := req.GetParentTaskId(); p != "" {
		return checkID("parent_task_id", p)
	}
	return nil
}
