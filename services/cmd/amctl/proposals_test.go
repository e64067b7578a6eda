package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/services/stack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The "done when": with a translation skill in the catalogue and
// no agent offering it, `amctl submit "translate this into French"` ends
// in a pending proposal; a person approves it and the task runs on the new
// agent (the scripted model answers it). The task names no skill: the
// registry's task analysis finds translation in the catalogue (the
// scripted model's answer is not an analysis, so the similarity fallback
// chooses), and no agent offers it. The second task names its skill.
func TestProposalsDoneWhen(t *testing.T) {
	script, err := scriptedmodel.ParseScript([]byte(`{"scenarios": [
	  {"match": "(?i)french", "turns": [{"content": "Traduisez ceci en français."}]},
	  {"turns": [{"content": "done"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	addr := realStackWith(t, stack.Config{Script: script})

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if _, err := agentmeshv1.NewSkillServiceClient(conn).CreateSkill(cctx, &agentmeshv1.CreateSkillRequest{Skill: &agentmeshv1.Skill{
		Name: "translation", Description: "translate text between languages", PromptTemplate: "Translate faithfully; keep the tone.",
	}}); err != nil {
		t.Fatalf("create skill: %v", err)
	}

	submit := func(args ...string) string {
		t.Helper()
		code, out, errOut := amctl(t, addr, append([]string{"submit"}, args...)...)
		m := idRe.FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("submit %q: exit %d, %q %q", args, code, out, errOut)
		}
		if want := "no agent fits, so agent translation-agent is proposed and the task waits for a person: amctl proposals show " + m[1] + "-p"; !strings.Contains(out, want) {
			t.Fatalf("submit %q said %q, want %q", args, out, want)
		}
		return m[1]
	}
	id := submit("translate this into French")
	pid := id + "-p"
	mustRun(t, addr, []string{pid, id, "translation-agent", "translation", "pending", "no agent offers"}, "proposals", "list")
	mustRun(t, addr, []string{"proposal:  " + pid + " (pending)", "agent:     translation-agent", "Translate faithfully", "tools:     none",
		"model:     the default model", "amctl proposals approve " + pid}, "proposals", "show", pid)
	mustRun(t, addr, []string{"blocked", "proposal", "decide with: amctl proposals approve|reject " + pid}, "history", id)
	mustRun(t, addr, []string{"waits for:  proposed agent translation-agent: amctl proposals show " + pid, "routing:    no agent fitted"}, "get", id)
	mustRun(t, addr, []string{"proposal: no agent fitted: translation-agent was proposed", "how: scored for skills translation", "chose translation", "candidates: none (no agent offers any of the skills)"}, "explain", id)

	mustRun(t, addr, []string{pid + " approved for this task only; task " + id + " is queued on agent translation-agent"}, "proposals", "approve", pid)
	poll.Until(t, 60*time.Second, func() error {
		_, got, _ := amctl(t, addr, "get", id, "-o", "json")
		if !strings.Contains(got, `"TASK_STATUS_COMPLETED"`) {
			return errStatus("not completed yet")
		}
		if !strings.Contains(got, "Traduisez ceci en français.") {
			t.Fatalf("completed without the scripted answer:\n%s", got)
		}
		return nil
	})
	mustRun(t, addr, []string{"routing:    no agent fitted: translation-agent was proposed, for a person to decide (amctl proposals); approved"}, "get", id)
	if code, _, errOut := amctl(t, addr, "proposals", "approve", pid, "--permanent"); code != 1 || !strings.Contains(errOut, "already decided") {
		t.Errorf("approve twice: exit %d %q, want 1 and already decided", code, errOut)
	}
	mustRun(t, addr, []string{pid, "approved"}, "proposals", "list", "--status", "approved")
	if out := mustRun(t, addr, nil, "agents", "list"); strings.Contains(out, "translation-agent") {
		t.Errorf("the agent approved for one task is in the catalogue:\n%s", out)
	}

	// Rejected: the task fails with the reason.
	other := submit("--skill", "translation", "translate this into Dutch")
	if code, _, errOut := amctl(t, addr, "proposals", "reject", other+"-p"); code != 2 || !strings.Contains(errOut, "--reason") {
		t.Errorf("reject without --reason: exit %d %q", code, errOut)
	}
	mustRun(t, addr, []string{other + "-p rejected; task " + other + " failed: no Dutch today"}, "proposals", "reject", other+"-p", "--reason", "no Dutch today")
	out := mustRun(t, addr, nil, "get", other)
	if !regexp.MustCompile(`(?s)failed.*no Dutch today`).MatchString(out) {
		t.Errorf("get of the rejected task:\n%s", out)
	}
	if code, _, errOut := amctl(t, addr, "proposals", "list", "--status", "bogus"); code != 2 || !strings.Contains(errOut, "--status") {
		t.Errorf("list --status bogus: exit %d %q", code, errOut)
	}
	if code, _, errOut := amctl(t, addr, "proposals", "show", "01AAAAAAAAAAAAAAAAAAAAAAAA-p"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("show of an unknown proposal: exit %d %q", code, errOut)
	}
}

func TestParseProposalStatus(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want agentmeshv1.ProposalStatus
		ok   bool
	}{
		{"", agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING, true},
		{"Pending", agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING, true},
		{"approved", agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, true},
		{"permanent", agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT, true},
		{"PROPOSAL_STATUS_REJECTED", agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED, true},
		{"PROPOSAL_STATUS_UNSPECIFIED", 0, false},
		{"maybe", 0, false},
	} {
		got, err := parseProposalStatus(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseProposalStatus(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzParseProposalStatus(f *testing.F) {
	for _, s := range []string{"", "pending", "approved", "permanent", "rejected", "PROPOSAL_STATUS_PENDING", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseProposalStatus(s)
		if err == nil && (got == agentmeshv1.ProposalStatus_PROPOSAL_STATUS_UNSPECIFIED || agentmeshv1.ProposalStatus_name[int32(got)] == "") {
			t.Fatalf("parseProposalStatus(%q) = %v without an error", s, got)
		}
	})
}
