package subjects

import (
	"fmt"
	"slices"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// The bus identities. Each service connects as its own NATS user whose
// permissions are exactly Permissions(service): the map below, beside the
// subject map, is the one place that says who may say and hear what.
const (
	ServiceState     = "state"
	ServiceRegistry  = "registry"
	ServiceScheduler = "scheduler"
	ServiceExecutor  = "executor"
	ServiceRouter    = "router"
)

// Services lists the service identities in start order.
var Services = []string{ServiceState, ServiceRegistry, ServiceScheduler, ServiceExecutor, ServiceRouter}

// StoreBuckets are the KV buckets of the embedded store (kvstore opens only
// these; StoreBucket names them). Only the state identity may touch them.
var StoreBuckets = []string{"tasks", "agents", "idempotency", "graphs", "skills", "agent_versions",
	"keys", "key_names", "schedules", "webhooks", "deliveries",
	"working_state", "memories", "threads"}

// Permission is what one NATS identity may publish and subscribe to.
type Permission struct {
	// Pub and Sub are the allowed subjects (NATS wildcards); nothing else is.
	Pub, Sub []string
	// Responses lets a request-serving identity publish one reply to the
	// reply subject of each request it received (NATS allow_responses).
	Responses bool
}

// InboxPrefix is the reply inbox prefix of a service's connection
// (nats.CustomInboxPrefix): each identity may subscribe only to its own,
// so no service reads the replies another one asked for.
func InboxPrefix(service string) string { return "_INBOX_" + service }

// jsAPI is the JetStream API subject prefix.
const jsAPI = "$JS.API."

// Permissions returns the publish/subscribe permissions of a service
// identity (ServiceState, ...). They are derived from the subject and
// stream names above; a change there changes them.
func (n Names) Permissions(service string) (Permission, error) {
	state := func(ops ...string) []string {
		out := make([]string, len(ops))
		for i, op := range ops {
			out[i] = n.State(op)
		}
		return out
	}
	inbox := InboxPrefix(service) + ".>"
	var p Permission
	switch service {
	case ServiceState:
		// The system of record: it owns every stream of the bus (creates
		// and updates them) and the embedded store's buckets and history
		// stream, serves <p>.state.> and publishes the public events.
		// It relays the executors' streamed model output to the public
		// live subjects, which no other identity may publish.
		p.Responses = true
		p.Sub = []string{n.StateAll(), "$SRV.>", inbox, n.TokenRelayAll()}
		// A redelivery asked through the API goes to the deliveries stream.
		p.Pub = []string{n.Events(), n.LiveAll(), n.StoreHistoryAll(), n.AuditService(ServiceState), jsAPI + "INFO", n.WebhookJobsAll()}
		streams := []string{n.EventsStream(), n.WorkStream(), n.AuditStream(), n.StoreHistoryStream(), n.WebhooksStream()}
		for _, b := range StoreBuckets {
			streams = append(streams, "KV_"+n.StoreBucket(b))
			p.Pub = append(p.Pub, "$KV."+n.StoreBucket(b)+".>")
		}
		for _, s := range streams {
			p.Pub = append(p.Pub, streamAdmin(s)...)
		}
		// DeleteTask and retention purge a task's history subject.
		p.Pub = append(p.Pub, jsAPI+"STREAM.PURGE."+n.StoreHistoryStream())
		// Only the KV streams and the history stream are read back by
		// state (watchers, direct gets); the bus streams only created.
		for _, s := range slices.Concat(streams[3:4], streams[5:]) {
			p.Pub = append(p.Pub, streamReader(s)...)
		}
	case ServiceRegistry:
		p.Responses = true
		p.Sub = []string{n.RegistryAll(), "$SRV.>", inbox}
		// It follows the task status events with an ordered consumer
		// (the workload figure of matching) after reading the live and
		// recently finished tasks.
		p.Pub = append(state(StatePutAgent, StateGetAgent, StateListAgents, StateDeleteAgent, StateAgentStats, StateListTasks,
			StatePutSkill, StateGetSkill, StateListSkills, StateDeleteSkill, StateResolveSkills, StateAgentVersions),
			n.AuditService(ServiceRegistry), jsAPI+"INFO", jsAPI+"STREAM.INFO."+n.EventsStream())
		p.Pub = append(p.Pub, streamReader(n.EventsStream())...)
	case ServiceScheduler:
		// The leader follows the task and agent events with an ordered
		// (ephemeral) consumer and hears executor heartbeats; the replicas
		// share a leader lease in their own KV bucket (which they create);
		// the resolver consumes terminal events through its own durable
		// consumer. It publishes work and moves tasks only by its intents.
		lease := "KV_" + n.SchedulerBucket()
		p.Sub = []string{inbox, n.Heartbeats()}
		// Schedules: the leader lists them and fires their slots (matching
		// the template's agent first); webhooks: every replica fans the
		// events out to the deliveries stream through one durable consumer,
		// pulls the deliveries through another, and records their outcome.
		p.Pub = append(state(StateGetTask, StateListTasks, StateDispatch, StateDispatchBatch, StateExpire, StateTimeout, StateLost,
			StateResolveDependency, StateGetAgent, StateListAgents, StateWaitExpired, StateSettleTask,
			StateListSchedules, StateGetSchedule, StateFireSchedules,
			StateSigningWebhook, StateSigningWebhooks, StateRecordDeliveries),
			n.WorkAll(), n.WebhookJobsAll(), n.Registry(RegistryMatch),
			jsAPI+"STREAM.INFO."+n.EventsStream(),
			jsAPI+"STREAM.INFO."+n.WorkStream(),
			jsAPI+"STREAM.INFO."+n.WebhooksStream(),
			"$KV."+n.SchedulerBucket()+".>", jsAPI+"INFO",
		)
		p.Pub = append(p.Pub, streamAdmin(lease)...)
		p.Pub = append(p.Pub, streamReader(lease)...)
		p.Pub = append(p.Pub, streamReader(n.EventsStream())...)
		p.Pub = append(p.Pub, durable(n.EventsStream(), ConsumerResolver)...)
		p.Pub = append(p.Pub, durable(n.EventsStream(), ConsumerTrees)...)
		p.Pub = append(p.Pub, durable(n.EventsStream(), ConsumerWebhookFanout)...)
		p.Pub = append(p.Pub, durable(n.WebhooksStream(), ConsumerWebhookDeliveries)...)
	case ServiceExecutor:
		// Pulls work through the executors' durable consumer (which it
		// creates), hears cancellations, publishes heartbeats and its
		// tasks' streamed output (to state's relay, never to an org's live
		// subjects), and moves tasks only by its attempt-fenced intents.
		// The executors share the model rate limits in their own KV
		// bucket (which they create).
		limits := "KV_" + n.ModelLimitsBucket()
		p.Sub = []string{inbox, n.TaskEventsOfType(StatusToken(agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED))}
		p.Pub = append(state(StateGetTask, StateHistory, StateAppendStep,
			StateStart, StateComplete, StateFail, StateBlock, StateRequeue, StateSpawn, StateWait),
			n.Heartbeats(), n.TokenRelayAll(),
			// call_agent with skills: the registry picks the agent.
			n.Registry(RegistryMatch),
			jsAPI+"STREAM.INFO."+n.WorkStream(),
			"$KV."+n.ModelLimitsBucket()+".>", jsAPI+"INFO",
		)
		p.Pub = append(p.Pub, durable(n.WorkStream(), ConsumerExecutors)...)
		p.Pub = append(p.Pub, streamAdmin(limits)...)
		p.Pub = append(p.Pub, streamReader(limits)...)
	case ServiceRouter:
		// The gRPC edge: requests to state and the registry on behalf of an
		// authenticated org, the event subjects WatchTask and WatchTasks
		// follow, and the executors' heartbeats (ListExecutors). It loads
		// the keys kept by state and follows their changes with an ordered
		// consumer of the events stream.
		p.Sub = []string{inbox, n.TaskEventsAll(), n.TokensAll(), n.Heartbeats()}
		p.Pub = append(state(StateCreateTask, StateGetTask, StateListTasks, StateHistory, StateHistoryBatch,
			StateUsage, StateCancel, StateDecide, StateCreateTap,
			StateApproveProposal, StateRejectProposal,
			StateCreateTasks, StateUpdateTask, StateDeleteTask, StateMetrics,
			StateCreateKey, StateListKeys, StateGetKey, StateRevokeKey, StateRotateKey,
			StateCreateSchedule, StateUpdateSchedule, StateGetSchedule, StateListSchedules,
			StateDeleteSchedule, StatePauseSchedule, StateTriggerSchedule,
			StateCreateWebhook, StateUpdateWebhook, StateRotateWebhook, StateGetWebhook, StateListWebhooks,
			StateDeleteWebhook, StateListDeliveries, StateRedeliver),
			n.RegistryAll(), jsAPI+"INFO", jsAPI+"STREAM.INFO."+n.EventsStream())
		p.Pub = append(p.Pub, streamReader(n.EventsStream())...)
	default:
		return Permission{}, fmt.Errorf("subjects: unknown service identity %q", service)
	}
	p.Pub = append(p.Pub, n.memoryPub(service)...) // memory.go
	slices.Sort(p.Pub)
	slices.Sort(p.Sub)
	return p, nil
}

// TapPermissions are the permissions of a tap credential of org: subscribe
// to the org's events and live tokens, publish nothing.
func (n Names) TapPermissions(org string) Permission {
	return Permission{Sub: []string{n.OrgEvents(org), n.OrgLive(org)}}
}

// TapTemplate is TapPermissions with the org as the NATS permission
// template {{name()}}: a scoped signing key carries it, so every user it
// signs (its name being the org) gets exactly its org's tap permissions,
// whatever the signer asks for.
func (n Names) TapTemplate() Permission {
	const org = "{{name()}}"
	return Permission{Sub: []string{n.prefix + ".evt." + org + ".>", n.prefix + ".live." + org + ".>"}}
}

// streamAdmin are the API subjects that create, update, inspect and
// delete a stream.
func streamAdmin(stream string) []string {
	return []string{
		jsAPI + "STREAM.CREATE." + stream,
		jsAPI + "STREAM.UPDATE." + stream,
		jsAPI + "STREAM.INFO." + stream,
	}
}

// streamReader are the API subjects that read a stream: direct and
// stored-message gets, ephemeral and ordered consumers, and their flow
// control.
func streamReader(stream string) []string {
	return []string{
		jsAPI + "DIRECT.GET." + stream,
		jsAPI + "DIRECT.GET." + stream + ".>",
		jsAPI + "STREAM.MSG.GET." + stream,
		jsAPI + "CONSUMER.CREATE." + stream,
		jsAPI + "CONSUMER.CREATE." + stream + ".>",
		jsAPI + "CONSUMER.DELETE." + stream + ".*",
		jsAPI + "CONSUMER.INFO." + stream + ".*",
		jsAPI + "CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.FC." + stream + ".>",
		"$JS.ACK." + stream + ".>",
	}
}

// durable are the API subjects to create (with a filter), inspect and pull
// from one durable consumer, and to acknowledge its messages.
func durable(stream, consumer string) []string {
	return []string{
		jsAPI + "CONSUMER.CREATE." + stream + "." + consumer,
		jsAPI + "CONSUMER.CREATE." + stream + "." + consumer + ".>",
		jsAPI + "CONSUMER.INFO." + stream + "." + consumer,
		jsAPI + "CONSUMER.MSG.NEXT." + stream + "." + consumer,
		"$JS.ACK." + stream + "." + consumer + ".>",
	}
}

// Describe renders p for logs and docs.
func (p Permission) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pub %s; sub %s", strings.Join(p.Pub, " "), strings.Join(p.Sub, " "))
	if p.Responses {
		b.WriteString("; replies to requests it received")
	}
	return b.String()
}
