package subjects

// Keys, schedules and webhooks (issue 31; bus.v1 ops.proto).
//
//	<p>.state.key.<op>              the router: API keys (KeyService), and
//	                                the keys every router loads at start
//	<p>.state.schedule.<op>         the router: ScheduleService; the
//	                                scheduler: list and fire
//	<p>.state.webhook.<op>          the router: WebhookService; the
//	                                scheduler: endpoints with their secrets,
//	                                delivery outcomes
//	<p>.evt.<org>.key.<id>          a key created, revoked or rotated
//	                                (agentmesh.v1.KeyEvent, JSON), published
//	                                by state: the audit of key changes, and
//	                                what every router follows
//	<p>.evt.<org>.schedule.<id>     a schedule created, changed or deleted
//	                                (agentmesh.v1.ScheduleEvent, JSON)
//	<p>.evt.<org>.webhook.<id>      an endpoint created, changed or deleted
//	                                (agentmesh.v1.WebhookEndpointEvent, JSON,
//	                                never a secret)
//	<p>.whk.<org>.<endpoint>        deliveries to make (bus.v1.WebhookJob),
//	                                on the work-queue stream <P>_WEBHOOKS
//	                                (state creates it); the scheduler's
//	                                fan-out and state's redelivery publish,
//	                                every scheduler replica pulls through
//	                                the durable consumer "deliveries"
//
// Platform keys (no org) publish their key events under org NoOrg.

// Key operations (router only).
const (
	StateCreateKey = "key.create"
	StateListKeys  = "key.list"
	StateGetKey    = "key.get"
	StateRevokeKey = "key.revoke"
	StateRotateKey = "key.rotate"
)

// Schedule operations.
const (
	StateCreateSchedule  = "schedule.create"
	StateUpdateSchedule  = "schedule.update"
	StateGetSchedule     = "schedule.get"
	StateListSchedules   = "schedule.list"
	StateDeleteSchedule  = "schedule.delete"
	StatePauseSchedule   = "schedule.pause"
	StateTriggerSchedule = "schedule.trigger" // router: TriggerSchedule, org-scoped
	StateFireSchedules   = "schedule.fire"    // scheduler's leader: cron slots, in batches
)

// Webhook operations.
const (
	StateCreateWebhook    = "webhook.create"
	StateUpdateWebhook    = "webhook.update"
	StateRotateWebhook    = "webhook.rotate"
	StateGetWebhook       = "webhook.get"
	StateListWebhooks     = "webhook.list"
	StateDeleteWebhook    = "webhook.delete"
	StateListDeliveries   = "webhook.deliveries.list"
	StateRedeliver        = "webhook.redeliver"
	StateSigningWebhook   = "webhook.signing.get"       // scheduler: one endpoint with its secrets
	StateSigningWebhooks  = "webhook.signing.list"      // scheduler: every endpoint with its secrets
	StateRecordDeliveries = "webhook.deliveries.record" // scheduler: outcomes of tries
)

// Kinds of event subjects of issue 31 (EventSubject.Kind).
const (
	KindKey      = "key"
	KindSchedule = "schedule"
	KindWebhook  = "webhook"
)

// Durable consumers of the webhook delivery (the scheduler's; every
// replica binds the same ones, so they share the load).
const (
	// ConsumerWebhookFanout reads the events an endpoint may ask for from
	// the events stream and queues one job per matching endpoint.
	ConsumerWebhookFanout = "webhooks"
	// ConsumerWebhookDeliveries pulls the jobs from the deliveries stream.
	ConsumerWebhookDeliveries = "deliveries"
)

// KeyEvent is the subject of a change to org's key id.
func (n Names) KeyEvent(org, id string) string {
	return n.prefix + ".evt." + OrgToken(org) + "." + KindKey + "." + id
}

// KeyEvents matches every key change of every org.
func (n Names) KeyEvents() string { return n.prefix + ".evt.*." + KindKey + ".*" }

// ScheduleEvent is the subject of a change to org's schedule id.
func (n Names) ScheduleEvent(org, id string) string {
	return n.prefix + ".evt." + OrgToken(org) + "." + KindSchedule + "." + id
}

// ScheduleEvents matches every schedule change of every org.
func (n Names) ScheduleEvents() string { return n.prefix + ".evt.*." + KindSchedule + ".*" }

// WebhookEvent is the subject of a change to org's webhook endpoint id.
func (n Names) WebhookEvent(org, id string) string {
	return n.prefix + ".evt." + OrgToken(org) + "." + KindWebhook + "." + id
}

// WebhookEvents matches every endpoint change of every org.
func (n Names) WebhookEvents() string { return n.prefix + ".evt.*." + KindWebhook + ".*" }

// WebhooksStream names the work-queue stream of deliveries to make.
func (n Names) WebhooksStream() string { return n.streamPrefix() + "_WEBHOOKS" }

// WebhookJob is the subject of a delivery to org's endpoint.
func (n Names) WebhookJob(org, endpoint string) string {
	return n.prefix + ".whk." + OrgToken(org) + "." + endpoint
}

// WebhookJobsAll matches every delivery to make.
func (n Names) WebhookJobsAll() string { return n.prefix + ".whk.>" }
