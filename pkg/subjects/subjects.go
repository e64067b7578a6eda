// Package subjects declares every NATS subject, stream, queue group and
// durable consumer agentmesh uses. No service writes a subject literal: they
// all come from here, so this file is the map of the bus.
//
// All subjects live under one prefix (default "am"):
//
//	<p>.state.<op>                 requests to the state service (queue "state")
//	<p>.registry.<op>              requests to the registry (queue "registry")
//	<p>.evt.<org>.task.<id>.<type> task events, published by state after commit
//	                               (type: created, queued, assigned, running,
//	                               blocked, completed, failed, cancelled, step,
//	                               dependency, updated);
//	                               JSON (protojson), public: docs/events.md
//	<p>.evt.<org>.agent.<name>     agent catalogue changes, published by state
//	                               (JSON; shared agents under org "_shared")
//	<p>.work.<agent>               dispatched work (scheduler → executors)
//	<p>.exec.heartbeat.<node>      executor heartbeats
//	<p>.token.<org>.task.<id>      streamed model output as an executor
//	                               publishes it; state relays it to:
//	<p>.live.<org>.task.<id>.token streamed model output (JSON, live only, in
//	                               no stream: the step that follows stores
//	                               it); published by state only
//	<p>.audit.<service>            the audit records of the requests an
//	                               instance of service handled, a batch a
//	                               message (bus.Auditor)
//
// Everything under <p>.evt.<org>.> and <p>.live.<org>.> is the public,
// per-org event surface: a tap credential of one org may subscribe to
// exactly those two (Permissions, TapPermissions in permissions.go). Tasks
// without an org publish under org NoOrg.
//
// Streams (created idempotently by their producer):
//
//	<P>_EVENTS   <p>.evt.>                 limits retention; the event log that
//	                                       the scheduler consumes and outside
//	                                       programs tap
//	<P>_WORK     <p>.work.>                work-queue retention; executors pull
//	<P>_WEBHOOKS <p>.whk.>                 work-queue retention; webhook
//	                                       deliveries to make (ops.go)
//	<P>_AUDIT    <p>.audit.>, <p>.exec.>
//	                                       the rest of the traffic: each
//	                                       request a service handled, as it
//	                                       publishes it on Audit(subject)
//	                                       after replying (with its outcome
//	                                       code), and heartbeats; NoAck
//
// Together the four streams hold everything said under <p>.>, except the
// live token streams (<p>.token.>, <p>.live.>), whose text the following
// step stores. No
// stream captures a request subject (<p>.state.>, <p>.registry.>): a stream
// counts as interest, and a request to a service that is down must fail at
// once with "no responders", not wait for its timeout.
//
// KV bucket <P>_SCHEDULER holds the scheduler replicas' leader lease (key
// "leader", the bucket's TTL is the lease); the leader follows the events
// stream with an ordered (ephemeral) consumer.
//
// KV bucket <P>_MODEL_LIMITS holds the model rate limits every executor
// shares (services/executor/ratelimit): a key per budget ("key.<limit
// key>", "org.<org>", "agent.<org>.<agent>") updated by compare-and-set,
// and the slot reserved for a task waiting in the queue ("slot.<task>").
// The executors create it; entries idle for an hour expire.
package subjects

import (
	"fmt"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// DefaultPrefix is the subject prefix unless configured otherwise.
const DefaultPrefix = "am"

// Queue groups of the request-serving services.
const (
	QueueState    = "state"
	QueueRegistry = "registry"
)

// Durable consumer names. The consumer owns its durable consumer.
const (
	ConsumerScheduler = "scheduler"
	ConsumerExecutors = "executors"
)

// State request operations (the last token of <p>.state.<op>).
const (
	StateCreateTask  = "task.create"
	StateGetTask     = "task.get"
	StateListTasks   = "task.list"
	StateAppendStep  = "task.step"
	StateHistory     = "task.history"
	StatePutAgent    = "agent.put"
	StateGetAgent    = "agent.get"
	StateListAgents  = "agent.list"
	StateDeleteAgent = "agent.delete"
	// StateAgentStats answers the live load of agents and how they served
	// an org lately (bus.v1.AgentStatsRequest): the registry's scored
	// matching.
	StateAgentStats = "agent.stats"
	// StateUsage sums the usage of an org's tasks (bus.v1.UsageRequest).
	StateUsage = "task.usage"
	// StateCreateTap mints a subscribe-only tap credential for one org's
	// events (bus.v1.CreateTapRequest); router only.
	StateCreateTap = "taps.create"
	// Graphs, CRUD and metrics (bus.v1 graph.proto).
	StateCreateTasks       = "task.create_graph"
	StateResolveDependency = "task.resolve"
	StateUpdateTask        = "task.update"
	StateDeleteTask        = "task.delete"
	StateMetrics           = "task.metrics"
	// StateHistoryBatch answers several history requests in one round
	// trip (bus.v1.HistoryBatchRequest): the router's WatchTask streams.
	StateHistoryBatch = "task.history.batch"
)

// Narrow transition intents: each carries a bus.v1.TransitionRequest and is
// allowed to exactly one service identity (Permissions); the state service
// checks which status changes each intent may make (services/state
// intents.go). There is no generic transition operation.
const (
	// scheduler
	StateDispatch = "task.dispatch" // queued → assigned, a new attempt
	// StateDispatchBatch is StateDispatch for several tasks in one round
	// trip (bus.v1.DispatchBatchRequest): each item is the same intent.
	StateDispatchBatch = "task.dispatch.batch"
	StateExpire        = "task.expire"  // blocked → failed, approval expired
	StateTimeout       = "task.timeout" // queued → failed, queue timeout (TIMEOUT)
	StateLost          = "task.lost"    // running → failed, node lost (EXECUTOR_LOST; retried by policy)
	// executor, fenced by the attempt
	StateStart    = "task.start"    // assigned → running
	StateComplete = "task.complete" // running → completed
	StateFail     = "task.fail"     // assigned/running → failed (retried by policy when transient)
	StateBlock    = "task.block"    // running → blocked on a pending approval
	StateRequeue  = "task.requeue"  // assigned/running → queued (hand back)
	// router, scoped to the caller's org
	StateCancel = "task.cancel" // any unfinished → cancelled
	StateDecide = "task.decide" // blocked → queued with an approval decision
)

// Delegation intents (bus.v1 delegation.proto; docs/delegation.md).
const (
	// executor, fenced by the parent's attempt
	StateSpawn = "task.spawn" // create a sub-task of the running task
	StateWait  = "task.wait"  // running → blocked on sub-tasks (or answer at once)
	// scheduler
	StateWaitExpired = "task.wait_expired" // blocked on sub-tasks → queued at the wait's deadline
)

// NoOrg is the org token of the event subjects of a task without an org.
const NoOrg = "_"

// SharedOrg is the org token of the events of agents that belong to no org
// (the shared catalogue).
const SharedOrg = "_shared"

// OrgToken returns the subject token of org (NoOrg when empty).
func OrgToken(org string) string {
	if org == "" {
		return NoOrg
	}
	return org
}

// Event-type tokens of task events that are not status changes: a parent
// of a blocked task finished (it still waits), and an UpdateTask.
const (
	EventDependency = "dependency"
	EventUpdated    = "updated"
	// EventSubtask: a descendant of the task was created or ended
	// (EVENT_TYPE_SUBTASK).
	EventSubtask = "subtask"
)

// ConsumerResolver is the scheduler's durable consumer of terminal task
// events that releases (or fails) the tasks depending on them.
const ConsumerResolver = "resolver"

// ConsumerTrees is the scheduler's durable consumer of terminal task events
// that settles trees: records each end in the ancestors and cancels the
// unfinished sub-tasks of a task that ended.
const ConsumerTrees = "trees"

// StateSettleTask settles a task that ended (bus.v1.SettleTaskRequest):
// its end recorded in its ancestors, its unfinished sub-tasks cancelled.
// The scheduler's tree keeper only.
const StateSettleTask = "task.settle"

// Registry request operations. The agent operations carry
// agentmesh.bus.v1.AgentOp (the org acted for and the public API's request);
// match carries agentmesh.bus.v1.MatchRequest.
const (
	RegistryMatch       = "match"
	RegistryCreateAgent = "agents.create"
	RegistryGetAgent    = "agents.get"
	RegistryListAgents  = "agents.list"
	RegistryUpdateAgent = "agents.update"
	RegistryDeleteAgent = "agents.delete"
)

// EventStep is the event-type token of a step event.
const EventStep = "step"

// EventToken is the last token of the live subject of streamed model
// output (TaskTokens): TaskEvents of type TOKEN with seq 0, published by the
// executor with core NATS while a model streams. They are live only: not in
// the task's history, not in any stream (the model turn's step that follows
// holds the same text), never a WatchTask cursor.
const EventToken = "token"

// Names builds subjects and stream names for one prefix.
type Names struct {
	prefix string
}

// New returns the names for prefix ("" means DefaultPrefix). The prefix
// must be one or more NATS tokens without wildcards.
func New(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	for _, tok := range strings.Split(prefix, ".") {
		if !ValidToken(tok) {
			return Names{}, fmt.Errorf("subjects: invalid prefix %q", prefix)
		}
	}
	return Names{prefix: prefix}, nil
}

// Must is New that panics; for tests and constants.
func Must(prefix string) Names {
	n, err := New(prefix)
	if err != nil {
		panic(err)
	}
	return n
}

// Prefix returns the subject prefix.
func (n Names) Prefix() string { return n.prefix }

// All is the wildcard of everything agentmesh says.
func (n Names) All() string { return n.prefix + ".>" }

// State returns the subject of a state request operation.
func (n Names) State(op string) string { return n.prefix + ".state." + op }

// StateAll matches every state request.
func (n Names) StateAll() string { return n.prefix + ".state.>" }

// Registry returns the subject of a registry request operation.
func (n Names) Registry(op string) string { return n.prefix + ".registry." + op }

// RegistryAll matches every registry request.
func (n Names) RegistryAll() string { return n.prefix + ".registry.>" }

// TaskEvent returns the subject of one task event of org's task. typ is a
// status name (StatusToken), "created" or EventStep.
func (n Names) TaskEvent(org, taskID, typ string) string {
	return n.prefix + ".evt." + OrgToken(org) + ".task." + taskID + "." + typ
}

// TaskEvents matches every event of one task of org.
func (n Names) TaskEvents(org, taskID string) string {
	return n.prefix + ".evt." + OrgToken(org) + ".task." + taskID + ".>"
}

// TaskEventsOfType matches one event type across all tasks of all orgs.
func (n Names) TaskEventsOfType(typ string) string { return n.prefix + ".evt.*.task.*." + typ }

// TaskOf returns the task id of a task event's or token's subject
// (<p>.evt.<org>.task.<id>.<type>, <p>.live.<org>.task.<id>.token),
// so that a reader can pass over the events of tasks it does not follow
// without decoding them; ok is false for any other subject.
func TaskOf(subject string) (id string, ok bool) {
	rest, _, ok := cutLast(subject)
	if !ok {
		return "", false
	}
	rest, id, ok = cutLast(rest)
	if !ok || id == "" {
		return "", false
	}
	if _, task, ok := cutLast(rest); !ok || task != "task" {
		return "", false
	}
	return id, true
}

// Kinds of event subjects (EventSubject.Kind).
const (
	KindTask  = "task"
	KindAgent = "agent"
)

// EventSubject is an event subject taken apart: <p>.evt.<org>.task.<id>.<type>
// (TaskEvent), <p>.evt.<org>.agent.<name> (AgentEvent) or
// <p>.evt.<org>.<key|schedule|webhook>.<id> (ops.go).
type EventSubject struct {
	// Org is the org token as on the subject (NoOrg, SharedOrg or an org).
	Org string
	// Kind is KindTask, KindAgent, KindKey, KindSchedule or KindWebhook.
	Kind string
	// ID is the task id, the agent name, or the key's, schedule's or
	// endpoint's id.
	ID string
	// Type is a task event's type token (a status, EventStep, ...); "" for
	// an agent event.
	Type string
}

// ParseEvent takes apart a subject TaskEvent or AgentEvent built under n's
// prefix; ok is false for any other subject (another prefix, another
// family, a missing or empty token, a token too many).
func (n Names) ParseEvent(subject string) (EventSubject, bool) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".evt.")
	if !ok {
		return EventSubject{}, false
	}
	toks := strings.Split(rest, ".")
	for _, t := range toks {
		if t == "" {
			return EventSubject{}, false
		}
	}
	switch {
	case len(toks) == 4 && toks[1] == KindTask:
		return EventSubject{Org: toks[0], Kind: KindTask, ID: toks[2], Type: toks[3]}, true
	case len(toks) == 3 && (toks[1] == KindAgent || toks[1] == KindKey || toks[1] == KindSchedule || toks[1] == KindWebhook):
		return EventSubject{Org: toks[0], Kind: toks[1], ID: toks[2]}, true
	}
	return EventSubject{}, false
}

// OrgTaskOf is TaskOf that also returns the subject's org token
// (<p>.evt.<org>.task.<id>.<type>, <p>.live.<org>.task.<id>.token).
func OrgTaskOf(subject string) (org, id string, ok bool) {
	id, ok = TaskOf(subject)
	if !ok {
		return "", "", false
	}
	rest, _, _ := cutLast(subject) // ….<org>.task.<id>
	rest, _, _ = cutLast(rest)     // ….<org>.task
	rest, _, _ = cutLast(rest)     // ….<org>
	if _, org, ok = cutLast(rest); !ok || org == "" {
		return "", "", false
	}
	return org, id, true
}

// cutLast splits s at its last '.'.
func cutLast(s string) (before, last string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// TaskEventsAll matches every task event of every org.
func (n Names) TaskEventsAll() string { return n.prefix + ".evt.*.task.>" }

// TaskTokens returns the subject an executor publishes a task's streamed
// model output on: <p>.token.<org>.task.<id>, heard by state only, which
// relays each message to the public LiveTokens subject when the task runs
// in that org under the message's attempt (services/state/live.go). Only
// state may publish on <p>.live.>: a stolen executor credential cannot
// write into an org's live subjects. Neither is in any stream.
func (n Names) TaskTokens(org, taskID string) string {
	return n.prefix + ".token." + OrgToken(org) + ".task." + taskID
}

// TokenRelayAll matches every executor's streamed model output (TaskTokens).
func (n Names) TokenRelayAll() string { return n.prefix + ".token.*.task.*" }

// ParseTaskTokens splits a TaskTokens subject into its org token and task
// id.
func (n Names) ParseTaskTokens(subject string) (org, taskID string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(subject, n.prefix+"."), ".")
	if len(parts) != 4 || !strings.HasPrefix(subject, n.prefix+".") || parts[0] != "token" || parts[2] != "task" {
		return "", "", false
	}
	return parts[1], parts[3], true
}

// LiveTokens returns the public live subject of a task's streamed model
// output, published by state's relay. It lies outside <p>.evt.> so that no
// stream stores it.
func (n Names) LiveTokens(org, taskID string) string {
	return n.prefix + ".live." + OrgToken(org) + ".task." + taskID + "." + EventToken
}

// TokensAll matches the public streamed model output of every task of
// every org (LiveTokens).
func (n Names) TokensAll() string { return n.prefix + ".live.*.task.*." + EventToken }

// AgentEvent returns the subject of a change to org's agent name.
func (n Names) AgentEvent(org, name string) string {
	return n.prefix + ".evt." + OrgToken(org) + ".agent." + name
}

// AgentEvents matches every agent catalogue change of every org.
func (n Names) AgentEvents() string { return n.prefix + ".evt.*.agent.*" }

// Events matches every event.
func (n Names) Events() string { return n.prefix + ".evt.>" }

// OrgEvents matches every stored event of one org.
func (n Names) OrgEvents(org string) string { return n.prefix + ".evt." + OrgToken(org) + ".>" }

// OrgLive matches every live (unstored) event of one org.
func (n Names) OrgLive(org string) string { return n.prefix + ".live." + OrgToken(org) + ".>" }

// LiveAll matches every live event.
func (n Names) LiveAll() string { return n.prefix + ".live.>" }

// Work returns the work subject of one agent.
func (n Names) Work(agent string) string { return n.prefix + ".work." + agent }

// WorkAll matches all work.
func (n Names) WorkAll() string { return n.prefix + ".work.>" }

// Heartbeat returns the heartbeat subject of one executor node.
func (n Names) Heartbeat(node string) string { return n.prefix + ".exec.heartbeat." + node }

// Heartbeats matches every executor heartbeat.
func (n Names) Heartbeats() string { return n.prefix + ".exec.heartbeat.*" }

// ParseHeartbeat returns the node a Heartbeat subject names.
func (n Names) ParseHeartbeat(subject string) (node string, ok bool) {
	node, ok = strings.CutPrefix(subject, n.prefix+".exec.heartbeat.")
	if !ok || !ValidToken(node) {
		return "", false
	}
	return node, true
}

// ExecAll matches everything executors publish outside streams.
func (n Names) ExecAll() string { return n.prefix + ".exec.>" }

func (n Names) streamPrefix() string {
	return strings.ToUpper(strings.ReplaceAll(n.prefix, ".", "_"))
}

// EventsStream is the name of the event stream.
func (n Names) EventsStream() string { return n.streamPrefix() + "_EVENTS" }

// WorkStream is the name of the work-queue stream.
func (n Names) WorkStream() string { return n.streamPrefix() + "_WORK" }

// AuditStream is the name of the stream that records requests.
func (n Names) AuditStream() string { return n.streamPrefix() + "_AUDIT" }

// AuditSubjects are the subjects the audit stream captures. They must
// never include a request subject (see the package comment).
func (n Names) AuditSubjects() []string {
	return []string{n.AuditAll(), n.ExecAll()}
}

// AuditService returns the subject on which each instance of service
// publishes the batches of records of the requests it handled
// (bus.Auditor): <p>.audit.<service>, e.g. am.audit.state.
func (n Names) AuditService(service string) string {
	return n.prefix + ".audit." + service
}

// AuditAll matches every audit record.
func (n Names) AuditAll() string { return n.prefix + ".audit.>" }

// StoreBucket names a KV bucket of the embedded store.
func (n Names) StoreBucket(name string) string {
	return n.streamPrefix() + "_STORE_" + strings.ToUpper(name)
}

// SchedulerBucket names the KV bucket that holds the scheduler replicas'
// leader lease.
func (n Names) SchedulerBucket() string { return n.streamPrefix() + "_SCHEDULER" }

// ModelLimitsBucket names the KV bucket of the model rate limits the
// executors share.
func (n Names) ModelLimitsBucket() string { return n.streamPrefix() + "_MODEL_LIMITS" }

// StoreHistoryStream names the embedded store's history stream.
func (n Names) StoreHistoryStream() string { return n.streamPrefix() + "_STORE_HISTORY" }

// StoreHistory returns the embedded store's history subject of one task.
// It lives outside <p>.> so it is not mistaken for traffic.
func (n Names) StoreHistory(taskID string) string { return "_" + n.prefix + "store.hist." + taskID }

// StoreHistoryAll matches every task's history in the embedded store.
func (n Names) StoreHistoryAll() string { return "_" + n.prefix + "store.hist.>" }

// StatusToken returns the event-type token of a status ("queued").
func StatusToken(s agentmeshv1.TaskStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "TASK_STATUS_"))
}

// ValidToken reports whether s can be one NATS subject token: non-empty,
// no whitespace, no '.', '*' or '>'.
func ValidToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f:
			return false
		}
	}
	return true
}
