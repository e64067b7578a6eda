// Package subjects declares every NATS subject, stream, queue group and
// durable consumer agentmesh uses. No service writes a subject literal: they
// all come from here, so this file is the map of the bus.
//
// All subjects live under one prefix (default "am"):
//
//	<p>.state.<op>                 requests to the state service (queue "state")
//	<p>.registry.<op>              requests to the registry (queue "registry")
//	<p>.evt.task.<id>.<type>       task events, published by state after commit
//	                               (type: created, queued, assigned, running,
//	                               blocked, completed, failed, cancelled, step;
//	                               token: live streamed model output, core
//	                               NATS, seq 0, not in the history)
//	<p>.evt.agent.<name>           agent catalogue changes, published by state
//	<p>.work.<agent>               dispatched work (scheduler → executors)
//	<p>.exec.heartbeat.<node>      executor heartbeats
//	<p>.live.task.<id>.token       streamed model output (live only, in no
//	                               stream: the step that follows stores it)
//
// Streams (created idempotently by their producer):
//
//	<P>_EVENTS   <p>.evt.>                 limits retention; the event log that
//	                                       the scheduler consumes and outside
//	                                       programs tap
//	<P>_WORK     <p>.work.>                work-queue retention; executors pull
//	<P>_AUDIT    <p>.state.>, <p>.registry.>, <p>.exec.>
//	                                       the rest of the traffic, stored with
//	                                       NoAck so requests still get their
//	                                       service's reply
//
// Together the three streams hold everything said under <p>.>, except the
// live token stream (<p>.live.>), whose text the following step stores.
//
// KV bucket <P>_SCHEDULER holds the scheduler replicas' leader lease (key
// "leader", the bucket's TTL is the lease); the leader follows the events
// stream with an ordered (ephemeral) consumer.
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
	StateTransition  = "task.transition"
	StateAppendStep  = "task.step"
	StateHistory     = "task.history"
	StatePutAgent    = "agent.put"
	StateGetAgent    = "agent.get"
	StateListAgents  = "agent.list"
	StateDeleteAgent = "agent.delete"
	// StateUsage sums the usage of an org's tasks (bus.v1.UsageRequest).
	StateUsage = "task.usage"
)

// Registry request operations. The agent operations carry the public API's
// messages (agentmesh.v1.CreateAgentRequest, ...); match carries
// agentmesh.bus.v1.MatchRequest.
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

// TaskEvent returns the subject of one task event. typ is a status name
// (StatusToken) or EventStep.
func (n Names) TaskEvent(taskID, typ string) string {
	return n.prefix + ".evt.task." + taskID + "." + typ
}

// TaskEvents matches every event of one task.
func (n Names) TaskEvents(taskID string) string { return n.prefix + ".evt.task." + taskID + ".>" }

// TaskEventsOfType matches one event type across all tasks.
func (n Names) TaskEventsOfType(typ string) string { return n.prefix + ".evt.task.*." + typ }

// TaskTokens returns the live subject of a task's streamed model output.
// It lies outside <p>.evt.> so that no stream stores it.
func (n Names) TaskTokens(taskID string) string {
	return n.prefix + ".live.task." + taskID + "." + EventToken
}

// TokensAll matches the streamed model output of every task.
func (n Names) TokensAll() string { return n.prefix + ".live.task.*." + EventToken }

// AgentEvent returns the subject of an agent catalogue change.
func (n Names) AgentEvent(name string) string { return n.prefix + ".evt.agent." + name }

// AgentEvents matches every agent catalogue change.
func (n Names) AgentEvents() string { return n.prefix + ".evt.agent.*" }

// Events matches every event.
func (n Names) Events() string { return n.prefix + ".evt.>" }

// Work returns the work subject of one agent.
func (n Names) Work(agent string) string { return n.prefix + ".work." + agent }

// WorkAll matches all work.
func (n Names) WorkAll() string { return n.prefix + ".work.>" }

// Heartbeat returns the heartbeat subject of one executor node.
func (n Names) Heartbeat(node string) string { return n.prefix + ".exec.heartbeat." + node }

// Heartbeats matches every executor heartbeat.
func (n Names) Heartbeats() string { return n.prefix + ".exec.heartbeat.*" }

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

// AuditSubjects are the subjects the audit stream captures.
func (n Names) AuditSubjects() []string {
	return []string{n.StateAll(), n.RegistryAll(), n.ExecAll()}
}

// StoreBucket names a KV bucket of the embedded store.
func (n Names) StoreBucket(name string) string {
	return n.streamPrefix() + "_STORE_" + strings.ToUpper(name)
}

// SchedulerBucket names the KV bucket that holds the scheduler replicas'
// leader lease.
func (n Names) SchedulerBucket() string { return n.streamPrefix() + "_SCHEDULER" }

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
