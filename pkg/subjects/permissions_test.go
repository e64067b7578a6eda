package subjects

import (
	"slices"
	"strings"
	"testing"
)

// subjectMatch reports whether the NATS wildcard pattern matches subject.
func subjectMatch(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

func allows(list []string, subject string) bool {
	return slices.ContainsFunc(list, func(p string) bool { return subjectMatch(p, subject) })
}

// Each transition intent may be published by exactly one identity; no
// identity may publish a state request it does not need, and nobody but
// state touches the store's buckets.
func TestPermissionsIntentsHaveOneOwner(t *testing.T) {
	n := Must("am")
	owner := map[string]string{
		StateDispatch: ServiceScheduler, StateDispatchBatch: ServiceScheduler, StateExpire: ServiceScheduler,
		StateStart: ServiceExecutor, StateComplete: ServiceExecutor, StateFail: ServiceExecutor,
		StateBlock: ServiceExecutor, StateRequeue: ServiceExecutor,
		StateCancel: ServiceRouter, StateDecide: ServiceRouter, StateCreateTap: ServiceRouter,
		StateApproveProposal: ServiceRouter, StateRejectProposal: ServiceRouter,
		StateCreateTask: ServiceRouter, StatePutAgent: ServiceRegistry, StateDeleteAgent: ServiceRegistry,
		StateAgentStats: ServiceRegistry, StateSettleTask: ServiceScheduler,
		StateSpawn: ServiceExecutor, StateWait: ServiceExecutor, StateWaitExpired: ServiceScheduler,
	}
	perms := map[string]Permission{}
	for _, svc := range Services {
		p, err := n.Permissions(svc)
		if err != nil {
			t.Fatal(err)
		}
		perms[svc] = p
	}
	for op, want := range owner {
		for _, svc := range Services {
			got := allows(perms[svc].Pub, n.State(op))
			if got != (svc == want) {
				t.Errorf("%s may publish %s: got %v, want %v", svc, n.State(op), got, svc == want)
			}
		}
	}
	for _, svc := range Services {
		p := perms[svc]
		for _, bad := range []string{">", "am.>", "$JS.API.>", "_INBOX.>", "am.state.>", "am.state.task.transition"} {
			if slices.Contains(p.Pub, bad) || allows(p.Pub, "am.state.task.transition") {
				t.Errorf("%s may publish %q", svc, bad)
			}
		}
		for _, b := range StoreBuckets {
			kv := "$KV." + n.StoreBucket(b) + ".x"
			direct := "$JS.API.DIRECT.GET.KV_" + n.StoreBucket(b)
			if (allows(p.Pub, kv) || allows(p.Pub, direct)) != (svc == ServiceState) {
				t.Errorf("%s and bucket %s: got access %v", svc, b, allows(p.Pub, kv))
			}
		}
		// Its own inbox only.
		for _, other := range Services {
			if got := allows(p.Sub, InboxPrefix(other)+".x"); got != (other == svc) {
				t.Errorf("%s may read %s's inbox: %v", svc, other, got)
			}
		}
		if (svc == ServiceState || svc == ServiceRegistry) != p.Responses {
			t.Errorf("%s: Responses %v", svc, p.Responses)
		}
	}
	// Only state creates streams; consumers create only their own durable.
	for _, svc := range Services {
		create := allows(perms[svc].Pub, "$JS.API.STREAM.CREATE."+n.EventsStream())
		if create != (svc == ServiceState) {
			t.Errorf("%s may create the events stream: %v", svc, create)
		}
	}
	if !allows(perms[ServiceScheduler].Pub, "$JS.API.CONSUMER.CREATE."+n.EventsStream()+"."+ConsumerScheduler+".am.evt.*.task.*.queued") ||
		allows(perms[ServiceScheduler].Pub, "$JS.API.CONSUMER.CREATE."+n.WorkStream()+"."+ConsumerExecutors) {
		t.Errorf("scheduler consumer permissions: %v", perms[ServiceScheduler].Pub)
	}
	if _, err := n.Permissions("child"); err == nil {
		t.Error("an unknown identity got permissions")
	}
}

func TestTapPermissions(t *testing.T) {
	n := Must("am")
	p := n.TapPermissions("acme")
	if len(p.Pub) != 0 || !allows(p.Sub, "am.evt.acme.task.T.completed") || !allows(p.Sub, "am.live.acme.task.T.token") ||
		allows(p.Sub, "am.evt.globex.task.T.completed") || allows(p.Sub, "am.work.x") {
		t.Errorf("tap permissions %+v", p)
	}
	tmpl := n.TapTemplate()
	if strings.ReplaceAll(strings.Join(tmpl.Sub, " "), "{{name()}}", "acme") != strings.Join(p.Sub, " ") {
		t.Errorf("template %v does not render to %v", tmpl.Sub, p.Sub)
	}
}

// Keys, schedules and webhooks: each operation to the identity whose job
// it is — the router's API, the scheduler's firing and delivering — and no
// other.
func TestOpsPermissions(t *testing.T) {
	n := Must("am")
	perms := map[string]Permission{}
	for _, svc := range Services {
		p, err := n.Permissions(svc)
		if err != nil {
			t.Fatal(err)
		}
		perms[svc] = p
	}
	only := func(subject string, who ...string) {
		t.Helper()
		for _, svc := range Services {
			want := slices.Contains(who, svc)
			if got := allows(perms[svc].Pub, subject); got != want {
				t.Errorf("%s may publish %s: %v, want %v", svc, subject, got, want)
			}
		}
	}
	for _, op := range []string{StateCreateKey, StateRevokeKey, StateRotateKey, StateCreateSchedule, StateTriggerSchedule, StateCreateWebhook, StateRedeliver} {
		only(n.State(op), ServiceRouter)
	}
	only(n.State(StateFireSchedules), ServiceScheduler)
	only(n.State(StateSigningWebhooks), ServiceScheduler)
	only(n.State(StateRecordDeliveries), ServiceScheduler)
	only(n.State(StateListSchedules), ServiceRouter, ServiceScheduler)
	only(n.WebhookJob("acme", "ep_1"), ServiceState, ServiceScheduler)
	only("$JS.API.CONSUMER.CREATE."+n.WebhooksStream()+"."+ConsumerWebhookDeliveries, ServiceScheduler)
	only("$JS.API.STREAM.CREATE."+n.WebhooksStream(), ServiceState)
	if !allows(n.TapPermissions("acme").Sub, n.KeyEvent("acme", "key_1")) || allows(n.TapPermissions("acme").Sub, n.WebhookJob("acme", "ep_1")) {
		t.Error("a tap of acme reads its key events and no delivery")
	}
}
