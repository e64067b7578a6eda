package subjects

import (
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

func TestNames(t *testing.T) {
	n := Must("")
	tests := []struct{ got, want string }{
		{n.State(StateCreateTask), "am.state.task.create"},
		{n.Registry(RegistryMatch), "am.registry.match"},
		{n.TaskEvent("acme", "T1", StatusToken(agentmeshv1.TaskStatus_TASK_STATUS_QUEUED)), "am.evt.acme.task.T1.queued"},
		{n.TaskEvent("", "T1", "step"), "am.evt._.task.T1.step"},
		{n.TaskEvents("acme", "T1"), "am.evt.acme.task.T1.>"},
		{n.TaskEventsOfType("cancelled"), "am.evt.*.task.*.cancelled"},
		{n.TaskTokens("acme", "T1"), "am.token.acme.task.T1"},
		{n.LiveTokens("acme", "T1"), "am.live.acme.task.T1.token"},
		{n.AgentEvent(SharedOrg, "helper"), "am.evt._shared.agent.helper"},
		{n.OrgEvents("acme"), "am.evt.acme.>"},
		{n.Work("helper"), "am.work.helper"},
		{n.EventsStream(), "AM_EVENTS"},
		{Must("prod.eu").WorkStream(), "PROD_EU_WORK"},
		{n.StoreHistory("T1"), "_amstore.hist.T1"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestPrefixValidation(t *testing.T) {
	for _, bad := range []string{"a b", "a.*", ">", "a..b", "."} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q) = nil error, want an error", bad)
		}
	}
}

// The three bus streams must not overlap (JetStream refuses overlapping
// subjects) and together must cover what services say under the prefix.
func TestStreamsDoNotOverlap(t *testing.T) {
	n := Must("am")
	subjects := append([]string{n.Events(), n.WorkAll()}, n.AuditSubjects()...)
	seen := map[string]bool{}
	for _, s := range subjects {
		if seen[s] {
			t.Fatalf("subject %q in two streams", s)
		}
		seen[s] = true
	}
}

func FuzzValidToken(f *testing.F) {
	for _, s := range []string{"abc", "a.b", "*", ">", " ", "01HXYZ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidToken(s) {
			return
		}
		// A valid token is exactly one token of a subject.
		n := Must("am")
		if got := n.Work(s); got != "am.work."+s {
			t.Fatalf("Work(%q) = %q", s, got)
		}
		for _, r := range s {
			if r == '.' || r == '*' || r == '>' || r <= ' ' {
				t.Fatalf("ValidToken(%q) = true with %q in it", s, r)
			}
		}
	})
}

func TestTaskOf(t *testing.T) {
	for _, n := range []Names{Must("am"), Must("mem.x")} {
		for _, subj := range []string{
			n.TaskEvent("acme", "T1", StatusToken(agentmeshv1.TaskStatus_TASK_STATUS_QUEUED)),
			n.TaskEvent("", "T1", EventStep),
			n.LiveTokens("acme", "T1"),
		} {
			if id, ok := TaskOf(subj); !ok || id != "T1" {
				t.Errorf("TaskOf(%q) = %q, %v; want T1", subj, id, ok)
			}
			if org, id, ok := OrgTaskOf(subj); !ok || id != "T1" || (org != "acme" && org != NoOrg) {
				t.Errorf("OrgTaskOf(%q) = %q, %q, %v; want acme (or %s), T1", subj, org, id, ok, NoOrg)
			}
		}
		for _, subj := range []string{n.AgentEvent("acme", "writer"), n.Events(), "task", "a.task..queued", ""} {
			if id, ok := TaskOf(subj); ok {
				t.Errorf("TaskOf(%q) = %q, want not a task's subject", subj, id)
			}
			if org, id, ok := OrgTaskOf(subj); ok {
				t.Errorf("OrgTaskOf(%q) = %q, %q, want not a task's subject", subj, org, id)
			}
		}
	}
}

func TestParseEvent(t *testing.T) {
	n := Must("am.x")
	for _, tt := range []struct {
		subject string
		want    EventSubject
		ok      bool
	}{
		{n.TaskEvent("acme", "T1", "queued"), EventSubject{Org: "acme", Kind: KindTask, ID: "T1", Type: "queued"}, true},
		{n.TaskEvent("", "T1", EventStep), EventSubject{Org: NoOrg, Kind: KindTask, ID: "T1", Type: EventStep}, true},
		{n.AgentEvent("acme", "helper"), EventSubject{Org: "acme", Kind: KindAgent, ID: "helper"}, true},
		{n.AgentEvent("", "helper"), EventSubject{Org: NoOrg, Kind: KindAgent, ID: "helper"}, true},
		{Must("am").TaskEvent("acme", "T1", "queued"), EventSubject{}, false}, // another prefix
		{n.TaskTokens("acme", "T1"), EventSubject{}, false},                   // the live family
		{n.Heartbeat("node1"), EventSubject{}, false},
		{"am.x.evt.acme.task.T1", EventSubject{}, false},
		{"am.x.evt.acme.task.T1.queued.more", EventSubject{}, false},
		{"am.x.evt.acme.agent.a.b", EventSubject{}, false},
		{"am.x.evt.acme..T1.queued", EventSubject{}, false},
		{"am.x.evt.acme.skill.s", EventSubject{}, false},
	} {
		got, ok := n.ParseEvent(tt.subject)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseEvent(%q) = %+v, %v; want %+v, %v", tt.subject, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzParseEvent: a subject from the bus either parses into tokens that
// rebuild it, or is refused.
func FuzzParseEvent(f *testing.F) {
	n := Must("am")
	for _, s := range []string{n.TaskEvent("acme", "T1", "queued"), n.AgentEvent("", "a"), "am.evt..task.x.y", "am.evt", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		ev, ok := n.ParseEvent(subject)
		if !ok {
			return
		}
		var back string
		switch ev.Kind {
		case KindTask:
			back = n.prefix + ".evt." + ev.Org + ".task." + ev.ID + "." + ev.Type
		case KindAgent:
			back = n.prefix + ".evt." + ev.Org + ".agent." + ev.ID
		default:
			t.Fatalf("ParseEvent(%q): kind %q", subject, ev.Kind)
		}
		if back != subject {
			t.Fatalf("ParseEvent(%q) = %+v, which rebuilds %q", subject, ev, back)
		}
	})
}

func TestParseHeartbeat(t *testing.T) {
	n := Must("am.x")
	for _, tt := range []struct {
		subject, node string
		ok            bool
	}{
		{n.Heartbeat("vm"), "vm", true},
		{n.Heartbeat("node-1"), "node-1", true},
		{Must("am").Heartbeat("vm"), "", false}, // another prefix
		{"am.x.exec.heartbeat.", "", false},
		{"am.x.exec.heartbeat.a.b", "", false},
		{"am.x.exec.heartbeat.*", "", false},
		{"am.x.exec.heartbeatvm", "", false},
		{n.TaskTokens("acme", "T1"), "", false},
	} {
		node, ok := n.ParseHeartbeat(tt.subject)
		if node != tt.node || ok != tt.ok {
			t.Errorf("ParseHeartbeat(%q) = %q, %v; want %q, %v", tt.subject, node, ok, tt.node, tt.ok)
		}
	}
}
