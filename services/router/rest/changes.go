package rest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// GET /v1/tasks:watch: WatchTasks as Server-Sent Events. The stream's first
// (empty) response is sent as event "ready" — the watch is in place, list
// the tasks now — then each batch of changes as event "changes" (the
// WatchTasksResponse JSON) and a reset as event "reset". No ids: the
// stream has no cursor.

// TasksStream receives a WatchTasks stream's responses.
type TasksStream interface {
	Send(*agentmeshv1.WatchTasksResponse) error
}

// TasksWatcher runs WatchTasks as the caller of r into s until the caller
// goes away or the router ends or refuses the stream (a gRPC status).
type TasksWatcher func(r *http.Request, req *agentmeshv1.WatchTasksRequest, s TasksStream) error

// ConnTasksWatcher runs WatchTasks through a gRPC connection to the
// router, the request's credentials as outgoing metadata.
func ConnTasksWatcher(conn grpc.ClientConnInterface) TasksWatcher {
	tasks := agentmeshv1.NewTaskServiceClient(conn)
	return func(r *http.Request, req *agentmeshv1.WatchTasksRequest, s TasksStream) error {
		ctx, cancel := context.WithCancel(OutgoingContext(r.Context(), r))
		defer cancel()
		stream, err := tasks.WatchTasks(ctx, req)
		if err != nil {
			return err
		}
		return relay(stream.Recv, s.Send)
	}
}

// changes serves GET /v1/tasks:watch.
type changes struct {
	watch     TasksWatcher
	log       *slog.Logger
	keepAlive time.Duration
}

func (c *changes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := ParseWatchTasks(r.URL.Query())
	if err != nil {
		WriteError(w, r, err)
		return
	}
	out := &sseStream{w: w, every: c.keepAlive, head: r.Method == http.MethodHead}
	defer out.close()
	err = c.watch(r, req, changesStream{out})
	switch {
	case out.started && out.head: // the headers were the answer
	case !out.started && err != nil:
		WriteError(w, r, err)
	case !out.started:
		w.WriteHeader(http.StatusNoContent)
	case err != nil && r.Context().Err() == nil:
		_ = out.event("error", "", status.Convert(err).Proto())
	}
}

// changesStream writes WatchTasks responses as events.
type changesStream struct{ s *sseStream }

func (c changesStream) Send(resp *agentmeshv1.WatchTasksResponse) error {
	first := !c.s.started
	if err := c.s.Accepted(); err != nil {
		return err
	}
	switch {
	case resp.GetReset_():
		return c.s.event("reset", "", resp)
	case len(resp.GetChanges()) == 0 && first:
		return c.s.event("ready", "", resp)
	case len(resp.GetChanges()) == 0:
		return nil
	}
	return c.s.event("changes", "", resp)
}

// maxFilterValues bounds the values of one filter parameter.
const maxFilterValues = 16

// ParseWatchTasks reads WatchTasks' filters from a query: statuses= and
// priorities= (repeated, or comma-separated; each the enum's name —
// TASK_STATUS_QUEUED or queued, PRIORITY_HIGH or high — or its number)
// and agent=. Any other parameter is refused, naming it.
func ParseWatchTasks(q map[string][]string) (*agentmeshv1.WatchTasksRequest, error) {
	req := &agentmeshv1.WatchTasksRequest{}
	for name, vs := range q {
		switch name {
		case "statuses", "status":
			for _, v := range splitValues(vs) {
				n, err := enumValue(agentmeshv1.TaskStatus(0).Descriptor().Values(), "TASK_STATUS_", v)
				if err != nil {
					return nil, badParam("statuses", "%v %q", err, v)
				}
				req.Statuses = append(req.Statuses, agentmeshv1.TaskStatus(n))
			}
		case "priorities", "priority":
			for _, v := range splitValues(vs) {
				n, err := enumValue(agentmeshv1.Priority(0).Descriptor().Values(), "PRIORITY_", v)
				if err != nil {
					return nil, badParam("priorities", "%v %q", err, v)
				}
				req.Priorities = append(req.Priorities, agentmeshv1.Priority(n))
			}
		case "agent":
			if len(vs) != 1 {
				return nil, badParam("agent", "give it once")
			}
			req.Agent = vs[0]
		default:
			return nil, badParam(name, "unknown parameter (statuses, agent and priorities filter the stream)")
		}
	}
	if len(req.Statuses) > maxFilterValues || len(req.Priorities) > maxFilterValues {
		return nil, badParam("statuses", "at most %d values", maxFilterValues)
	}
	return req, nil
}

func splitValues(vs []string) []string {
	var out []string
	for _, v := range vs {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// errBadEnum is a filter value that names no value of its enum.
var errBadEnum = errors.New("unknown value")

// enumValue reads v as one of values (by full name, by the name without
// prefix in any case, or by number), never the unspecified zero.
func enumValue(values protoreflect.EnumValueDescriptors, prefix, v string) (int32, error) {
	if n, err := strconv.ParseInt(v, 10, 32); err == nil {
		if d := values.ByNumber(protoreflect.EnumNumber(n)); d != nil && n != 0 {
			return int32(n), nil
		}
		return 0, errBadEnum
	}
	name := strings.ToUpper(v)
	if !strings.HasPrefix(name, prefix) {
		name = prefix + name
	}
	if d := values.ByName(protoreflect.Name(name)); d != nil && d.Number() != 0 {
		return int32(d.Number()), nil
	}
	return 0, errBadEnum
}
