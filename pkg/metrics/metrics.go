// Package metrics holds agentmesh's Prometheus metrics and serves them on
// /metrics (AGENTMESH_METRICS_LISTEN). Every service process registers
// into the one default registry, so `agentmesh dev` serves all of them on
// one endpoint and a service run alone serves its own.
//
// Metrics (all prefixed agentmesh_):
//
//	bus_request_seconds{op,code}        bus requests a service made (pkg/bus)
//	store_seconds{op,code}              system-of-record calls (state)
//	task_events_total{type,status}      task events recorded (state)
//	tasks_created_total{agent}          tasks accepted (state)
//	tasks_finished_total{agent,status}  tasks that ended (state)
//	task_queue_wait_seconds{agent}      queued → running (state)
//	task_run_seconds{agent}             running → end (state)
//	tasks_deleted_total                 DeleteTask and retention (state)
//	tasks{agent,status,priority}        unfinished tasks now, refreshed by
//	                                    state every 15 s
//	executor_spawn_wait_seconds         time a spawn waited for a slot (executor)
//	executor_spawn_seconds              a sandboxed spawn, from its slot to started
//	executor_children_released_total    children ended while their model call ran
//	executor_children_taken_over_total  children started to go on from one released
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry is where agentmesh's metrics live (with the Go and process
// collectors).
var Registry = prometheus.NewRegistry()

// durations are the histogram buckets of latencies, in seconds.
var durations = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

var (
	BusRequest = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "agentmesh_bus_request_seconds", Help: "Latency of bus requests this process made, by operation and outcome code.",
		Buckets: durations,
	}, []string{"op", "code"})
	Store = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "agentmesh_store_seconds", Help: "Latency of system-of-record calls, by store operation and outcome code.",
		Buckets: durations,
	}, []string{"op", "code"})
	TaskEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_task_events_total", Help: "Task events recorded, by event type and the status after it.",
	}, []string{"type", "status"})
	TasksCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_tasks_created_total", Help: "Tasks accepted, by agent.",
	}, []string{"agent"})
	TasksFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_tasks_finished_total", Help: "Tasks that ended, by agent and final status.",
	}, []string{"agent", "status"})
	QueueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "agentmesh_task_queue_wait_seconds", Help: "Time from queued to running, by agent.", Buckets: durations,
	}, []string{"agent"})
	RunTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "agentmesh_task_run_seconds", Help: "Time from running to the end, by agent.", Buckets: durations,
	}, []string{"agent"})
	TasksDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentmesh_tasks_deleted_total", Help: "Finished tasks deleted (DeleteTask and retention).",
	})
	SpawnWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "agentmesh_executor_spawn_wait_seconds", Help: "Time a spawn of an agent process waited for a free spawn slot.", Buckets: durations,
	})
	Spawn = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "agentmesh_executor_spawn_seconds", Help: "Time to start a sandboxed agent process, from its spawn slot to started.", Buckets: durations,
	})
	ChildrenReleased = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentmesh_executor_children_released_total", Help: "Agent processes ended while their model call ran (AGENTMESH_RELEASE_AFTER).",
	})
	ChildrenKeptWaiting = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentmesh_executor_children_kept_waiting_total",
		Help: "Agent processes whose model call outlived AGENTMESH_RELEASE_AFTER and that were not released, as no more than AGENTMESH_RELEASE_ABOVE processes waited for the model.",
	})
	ChildrenTakenOver = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentmesh_executor_children_taken_over_total", Help: "Agent processes started to go on with a task whose process was released.",
	})
	FirstTurns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_executor_first_turns_total",
		Help: "First model turns the executor asked before an agent process ran, by how the process came: ready (a warm or parked one, at once), after (started when the answer came), differed (the process asked something else; asked again).",
	}, []string{"child"})
	AnswersKept = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_executor_answers_kept_total",
		Help: "Model answers the executor checkpointed itself, so no attempt asks for them again; when: unrecorded (no agent process recorded it: it died first, or none could start), before_child (a slow call's answer, written while the agent process that takes it starts), handed (a slow call's answer, written as it is handed to the agent process waiting for it).",
	}, []string{"when"})
	Tasks = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "agentmesh_tasks", Help: "Unfinished tasks now, by agent, status and priority (refreshed by state every 15 s).",
	}, []string{"agent", "status", "priority"})
)

func init() {
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		BusRequest, Store, TaskEvents, TasksCreated, TasksFinished, QueueWait, RunTime, TasksDeleted, Tasks,
		SpawnWait, Spawn, ChildrenReleased, ChildrenKeptWaiting, ChildrenTakenOver, FirstTurns, AnswersKept)
}

// Handler serves the registry in the Prometheus text format.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{Registry: Registry})
}

// Server serves /metrics on a listener.
type Server struct {
	lis net.Listener
	srv *http.Server
}

// Listen opens addr and serves /metrics on it until Close.
func Listen(ctx context.Context, addr string, log *slog.Logger) (*Server, error) {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler())
	s := &Server{lis: lis, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := s.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "err", err)
		}
	}()
	log.Info("Prometheus metrics on /metrics", "addr", lis.Addr().String())
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close stops the server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// Since observes the seconds since start on h with the labels.
func Since(h *prometheus.HistogramVec, start time.Time, labels ...string) {
	h.WithLabelValues(labels...).Observe(time.Since(start).Seconds())
}
