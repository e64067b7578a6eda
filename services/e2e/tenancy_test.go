package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The keys of the tenancy tests: two orgs, each role, a platform key.
var tenancyKeys = []struct{ name, org, role, key string }{
	{"a-admin", "org-a", "admin", "key-a-admin"},
	{"a-op", "org-a", "operator", "key-a-op"},
	{"alice", "org-a", "approver", "key-alice"},
	{"a-reader", "org-a", "reader", "key-a-reader"},
	{"b-admin", "org-b", "admin", "key-b-admin"},
	{"b-op", "org-b", "operator", "key-b-op"},
	{"ops", "", "platform", "key-ops"},
}

func tenancyKeysFile(t *testing.T) string {
	t.Helper()
	var entries []string
	for _, k := range tenancyKeys {
		s := sha256.Sum256([]byte(k.key))
		entries = append(entries, fmt.Sprintf(`{"name": %q, "org": %q, "role": %q, "sha256": %q}`, k.name, k.org, k.role, hex.EncodeToString(s[:])))
	}
	p := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(p, []byte(`{"keys": [`+strings.Join(entries, ",\n")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// as returns a context for one call with the key of the named principal.
func as(t *testing.T, name string) context.Context {
	t.Helper()
	for _, k := range tenancyKeys {
		if k.name == name {
			return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+k.key)
		}
	}
	t.Fatalf("no key %q", name)
	return nil
}

// orgA is what org A holds when org B starts trying.
type orgA struct {
	blocked, done *agentmeshv1.Task
	approval      *agentmeshv1.Approval
	careful       *agentmeshv1.Agent
	history       int
}

func setupOrgA(t *testing.T, e *env) orgA {
	t.Helper()
	var a orgA
	// A shared agent, from the platform key.
	mkSkills(t, as(t, "ops"), e.skills, "shared")
	mkSkills(t, as(t, "a-admin"), e.skills, "plainskill")
	if _, err := e.agents.CreateAgent(as(t, "ops"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "shared-echo", Tools: []string{"echo"}, Skills: []string{"shared"},
	}}); err != nil {
		t.Fatalf("platform creates a shared agent: %v", err)
	}
	resp, err := e.agents.CreateAgent(as(t, "a-admin"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "careful", Tools: []string{"echo"}, SystemPrompt: "A's prompt",
		ToolPolicies: map[string]agentmeshv1.ToolPolicy{"echo": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL},
	}})
	if err != nil {
		t.Fatalf("A creates careful: %v", err)
	}
	a.careful = resp.Agent
	if _, err := e.agents.CreateAgent(as(t, "a-admin"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "plain", Tools: []string{"echo"}, Skills: []string{"plainskill"},
	}}); err != nil {
		t.Fatalf("A creates plain: %v", err)
	}
	sub, err := e.tasks.SubmitTask(as(t, "a-op"), &agentmeshv1.SubmitTaskRequest{Input: "ship it", Agent: "careful"})
	if err != nil {
		t.Fatalf("A submits to careful: %v", err)
	}
	a.blocked = waitAs(t, e, "a-reader", sub.Task.Id, taskstate.Blocked)
	a.approval = a.blocked.GetPendingApproval()
	if a.approval == nil {
		t.Fatal("A's blocked task has no pending approval")
	}
	sub, err = e.tasks.SubmitTask(as(t, "a-op"), &agentmeshv1.SubmitTaskRequest{Input: "hello", Agent: "plain"})
	if err != nil {
		t.Fatalf("A submits to plain: %v", err)
	}
	a.done = waitAs(t, e, "a-reader", sub.Task.Id, taskstate.Completed)
	h, err := e.tasks.GetTaskHistory(as(t, "a-reader"), &agentmeshv1.GetTaskHistoryRequest{Id: a.done.Id})
	if err != nil {
		t.Fatal(err)
	}
	a.history = len(h.Events)
	return a
}

func waitAs(t *testing.T, e *env, who, id string, want agentmeshv1.TaskStatus) *agentmeshv1.Task {
	t.Helper()
	var task *agentmeshv1.Task
	poll.Until(t, 60*time.Second, func() error {
		resp, err := e.tasks.GetTask(as(t, who), &agentmeshv1.GetTaskRequest{Id: id})
		if err != nil {
			return err
		}
		task = resp.Task
		if task.Status != want {
			if taskstate.Terminal(task.Status) {
				t.Fatalf("task %s ended %s (%s), want %s", id, taskstate.Name(task.Status), task.Error, taskstate.Name(want))
			}
			return errStatus{task.Status, want}
		}
		return nil
	})
	return task
}

// TestTenancy: for every RPC, org B (with its admin key, the strongest an
// org has) against org A's tasks, agents, approvals, usage, history,
// watch, cancel and secrets gets NotFound or PermissionDenied — never a
// hint that A's things exist — and nothing of A's changes. On both stores:
// the check is made where the data lives.
func TestTenancy(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		t.Setenv("AGENTMESH_SECRET_ORG_A__TEAM", "sk-org-a")
		o.keysFile = tenancyKeysFile(t)
		e := start(t, o)
		a := setupOrgA(t, e)
		approvals := agentmeshv1.NewApprovalServiceClient(e.conn)

		// Org B's own agent names A's secret; its task must not get it.
		if _, err := e.agents.CreateAgent(as(t, "b-admin"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "thief", Tools: []string{"echo"}, Model: &agentmeshv1.ModelSettings{ApiKeySecret: "team"},
		}}); err != nil {
			t.Fatalf("B creates its agent: %v", err)
		}
		sub, err := e.tasks.SubmitTask(as(t, "b-op"), &agentmeshv1.SubmitTaskRequest{Input: "steal", Agent: "thief"})
		if err != nil {
			t.Fatalf("B submits: %v", err)
		}
		stolen := sub.Task

		type rpc struct {
			name string
			call func() error
			want codes.Code
			// msg, when set, must be the whole message (the same words a
			// never-existing thing gets: no hint).
			msg string
		}
		var careful = proto.Clone(a.careful).(*agentmeshv1.Agent)
		careful.SystemPrompt = "B's prompt"
		rpcs := []rpc{
			{"GetTask", func() error {
				_, err := e.tasks.GetTask(as(t, "b-admin"), &agentmeshv1.GetTaskRequest{Id: a.blocked.Id})
				return err
			}, codes.NotFound, fmt.Sprintf("task %q not found", a.blocked.Id)},
			{"GetTaskHistory", func() error {
				_, err := e.tasks.GetTaskHistory(as(t, "b-admin"), &agentmeshv1.GetTaskHistoryRequest{Id: a.done.Id})
				return err
			}, codes.NotFound, fmt.Sprintf("task %q not found", a.done.Id)},
			{"WatchTask", func() error {
				s, err := e.tasks.WatchTask(as(t, "b-admin"), &agentmeshv1.WatchTaskRequest{Id: a.done.Id})
				if err != nil {
					return err
				}
				_, err = s.Recv()
				return err
			}, codes.NotFound, ""},
			{"CancelTask", func() error {
				_, err := e.tasks.CancelTask(as(t, "b-admin"), &agentmeshv1.CancelTaskRequest{Id: a.blocked.Id})
				return err
			}, codes.NotFound, ""},
			{"ListApprovals of A's task", func() error {
				_, err := approvals.ListApprovals(as(t, "b-admin"), &agentmeshv1.ListApprovalsRequest{TaskId: a.blocked.Id})
				return err
			}, codes.NotFound, ""},
			{"ApproveToolCall", func() error {
				_, err := approvals.ApproveToolCall(as(t, "b-admin"), &agentmeshv1.ApproveToolCallRequest{ApprovalId: a.approval.Id})
				return err
			}, codes.NotFound, fmt.Sprintf("approval %q not found", a.approval.Id)},
			{"RejectToolCall", func() error {
				_, err := approvals.RejectToolCall(as(t, "b-admin"), &agentmeshv1.RejectToolCallRequest{ApprovalId: a.approval.Id})
				return err
			}, codes.NotFound, ""},
			{"GetAgent", func() error {
				_, err := e.agents.GetAgent(as(t, "b-admin"), &agentmeshv1.GetAgentRequest{Name: "plain"})
				return err
			}, codes.NotFound, `agent "plain" not found`},
			{"UpdateAgent", func() error {
				_, err := e.agents.UpdateAgent(as(t, "b-admin"), &agentmeshv1.UpdateAgentRequest{Agent: &agentmeshv1.Agent{Name: "plain", SystemPrompt: "B's prompt"}})
				return err
			}, codes.NotFound, ""},
			{"DeleteAgent", func() error {
				_, err := e.agents.DeleteAgent(as(t, "b-admin"), &agentmeshv1.DeleteAgentRequest{Name: "plain"})
				return err
			}, codes.NotFound, ""},
			{"SubmitTask to A's agent", func() error {
				_, err := e.tasks.SubmitTask(as(t, "b-op"), &agentmeshv1.SubmitTaskRequest{Input: "x", Agent: "plain"})
				return err
			}, codes.FailedPrecondition, `agent: no agent named "plain"`},
			{"SubmitTask to A's skills", func() error {
				_, err := e.tasks.SubmitTask(as(t, "b-op"), &agentmeshv1.SubmitTaskRequest{Input: "x", RequiredSkills: []string{"plainskill"}})
				return err
			}, codes.FailedPrecondition, ""},
			{"UpdateAgent shared", func() error {
				_, err := e.agents.UpdateAgent(as(t, "b-admin"), &agentmeshv1.UpdateAgentRequest{Agent: &agentmeshv1.Agent{Name: "shared-echo", Tools: []string{"shell"}}})
				return err
			}, codes.PermissionDenied, ""},
			{"DeleteAgent shared", func() error {
				_, err := e.agents.DeleteAgent(as(t, "b-admin"), &agentmeshv1.DeleteAgentRequest{Name: "shared-echo"})
				return err
			}, codes.PermissionDenied, ""},
		}
		for _, r := range rpcs {
			t.Run(r.name, func(t *testing.T) {
				st := status.Convert(r.call())
				if st.Code() != r.want {
					t.Fatalf("got %v %q, want %v", st.Code(), st.Message(), r.want)
				}
				if r.msg != "" && st.Message() != r.msg {
					t.Fatalf("message %q, want %q (what an unknown one gets)", st.Message(), r.msg)
				}
			})
		}

		// Lists and sums show B nothing of A's.
		t.Run("ListTasks", func(t *testing.T) {
			resp, err := e.tasks.ListTasks(as(t, "b-admin"), &agentmeshv1.ListTasksRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Tasks) != 1 || resp.Tasks[0].Id != stolen.Id {
				t.Fatalf("B lists %v, want only its own task %s", resp.Tasks, stolen.Id)
			}
		})
		t.Run("ListApprovals", func(t *testing.T) {
			resp, err := approvals.ListApprovals(as(t, "b-admin"), &agentmeshv1.ListApprovalsRequest{})
			if err != nil || len(resp.Approvals) != 0 {
				t.Fatalf("B lists approvals %v, %v; want none", resp.GetApprovals(), err)
			}
		})
		t.Run("ListAgents", func(t *testing.T) {
			resp, err := e.agents.ListAgents(as(t, "b-admin"), &agentmeshv1.ListAgentsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ag := range resp.Agents {
				got = append(got, ag.Org+"/"+ag.Name)
			}
			if fmt.Sprint(got) != "[/shared-echo org-b/thief]" {
				t.Fatalf("B lists agents %v, want only the shared one and its own", got)
			}
		})
		t.Run("GetUsage", func(t *testing.T) {
			resp, err := e.tasks.GetUsage(as(t, "b-admin"), &agentmeshv1.GetUsageRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Tasks != 1 || resp.Usage.GetTotalTokens() != 0 {
				t.Fatalf("B's usage %v over %d tasks, want its one task and none of A's tokens", resp.Usage, resp.Tasks)
			}
		})
		t.Run("secrets", func(t *testing.T) {
			got := waitAs(t, e, "b-op", stolen.Id, taskstate.Failed)
			if !strings.Contains(got.Error, `api_key_secret "team" is unknown to org org-b`) {
				t.Fatalf("B's task naming A's secret: %q", got.Error)
			}
		})
		t.Run("names are per org", func(t *testing.T) {
			if _, err := e.agents.CreateAgent(as(t, "b-admin"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "careful", SystemPrompt: "B's prompt", Tools: []string{"echo"}}}); err != nil {
				t.Fatalf("B creates its own careful: %v", err)
			}
		})

		// Nothing of A's changed.
		t.Run("A unchanged", func(t *testing.T) {
			got := waitAs(t, e, "a-reader", a.blocked.Id, taskstate.Blocked)
			if !proto.Equal(got.GetPendingApproval(), a.approval) {
				t.Errorf("A's approval: got %v, want %v", got.GetPendingApproval(), a.approval)
			}
			ag, err := e.agents.GetAgent(as(t, "a-reader"), &agentmeshv1.GetAgentRequest{Name: "careful"})
			if err != nil || !proto.Equal(ag.Agent, a.careful) {
				t.Errorf("A's careful: got %v, %v; want %v", ag.GetAgent(), err, a.careful)
			}
			if _, err := e.agents.GetAgent(as(t, "a-reader"), &agentmeshv1.GetAgentRequest{Name: "plain"}); err != nil {
				t.Errorf("A's plain: %v", err)
			}
			h, err := e.tasks.GetTaskHistory(as(t, "a-reader"), &agentmeshv1.GetTaskHistoryRequest{Id: a.done.Id})
			if err != nil || len(h.Events) != a.history {
				t.Errorf("A's history: %d events, %v; want %d", len(h.GetEvents()), err, a.history)
			}
			sh, err := e.agents.GetAgent(as(t, "a-reader"), &agentmeshv1.GetAgentRequest{Name: "shared-echo"})
			if err != nil || sh.Agent.Org != "" || sh.Agent.Version != 1 {
				t.Errorf("the shared agent: %v, %v; want it unchanged", sh.GetAgent(), err)
			}
		})
	})
}

// TestRolesEndToEnd: an operator cannot approve, a reader cannot submit,
// only admins define agents, only the platform key changes shared agents;
// the approver's key name is recorded on the approval.
func TestRolesEndToEnd(t *testing.T) {
	e := start(t, opts{keysFile: tenancyKeysFile(t)})
	a := setupOrgA(t, e)
	approvals := agentmeshv1.NewApprovalServiceClient(e.conn)
	denied := func(t *testing.T, err error, role string) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "needs role "+role) {
			t.Fatalf("got %v %q, want PermissionDenied naming role %s", st.Code(), st.Message(), role)
		}
	}
	t.Run("operator cannot approve", func(t *testing.T) {
		_, err := approvals.ApproveToolCall(as(t, "a-op"), &agentmeshv1.ApproveToolCallRequest{ApprovalId: a.approval.Id})
		denied(t, err, "approver")
	})
	t.Run("reader cannot submit", func(t *testing.T) {
		_, err := e.tasks.SubmitTask(as(t, "a-reader"), &agentmeshv1.SubmitTaskRequest{Input: "x", Agent: "plain"})
		denied(t, err, "operator")
	})
	t.Run("reader cannot cancel", func(t *testing.T) {
		_, err := e.tasks.CancelTask(as(t, "a-reader"), &agentmeshv1.CancelTaskRequest{Id: a.blocked.Id})
		denied(t, err, "operator")
	})
	t.Run("operator cannot define agents", func(t *testing.T) {
		_, err := e.agents.CreateAgent(as(t, "a-op"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "mine", Tools: []string{"echo"}}})
		denied(t, err, "admin")
		_, err = e.agents.DeleteAgent(as(t, "alice"), &agentmeshv1.DeleteAgentRequest{Name: "plain"})
		denied(t, err, "admin")
	})
	t.Run("org admin cannot change a shared agent", func(t *testing.T) {
		_, err := e.agents.UpdateAgent(as(t, "a-admin"), &agentmeshv1.UpdateAgentRequest{Agent: &agentmeshv1.Agent{Name: "shared-echo", Tools: []string{"echo"}}})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("got %v, want PermissionDenied", err)
		}
	})
	t.Run("platform key does not submit", func(t *testing.T) {
		_, err := e.tasks.SubmitTask(as(t, "ops"), &agentmeshv1.SubmitTaskRequest{Input: "x", Agent: "shared-echo"})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("got %v, want PermissionDenied", err)
		}
	})
	t.Run("orgs use shared agents", func(t *testing.T) {
		sub, err := e.tasks.SubmitTask(as(t, "a-op"), &agentmeshv1.SubmitTaskRequest{Input: "hi", Agent: "shared-echo"})
		if err != nil {
			t.Fatal(err)
		}
		waitAs(t, e, "a-reader", sub.Task.Id, taskstate.Completed)
	})
	t.Run("nothing changed", func(t *testing.T) {
		got := waitAs(t, e, "a-reader", a.blocked.Id, taskstate.Blocked)
		if !proto.Equal(got.GetPendingApproval(), a.approval) {
			t.Fatalf("approval changed: %v", got.GetPendingApproval())
		}
	})
	t.Run("approver approves; the key name is recorded", func(t *testing.T) {
		resp, err := approvals.ApproveToolCall(as(t, "alice"), &agentmeshv1.ApproveToolCallRequest{ApprovalId: a.approval.Id, Comment: "ok"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Approval.DecidedBy != "alice" {
			t.Errorf("decided_by = %q, want the key name alice", resp.Approval.DecidedBy)
		}
		waitAs(t, e, "a-reader", a.blocked.Id, taskstate.Completed)
	})
}
