package webhook

import (
	"net/http"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Sign's headers verify with the reference implementation, with each
// secret when signed with two, and with neither when the body changes.
func TestSignVerifiesWithTheReference(t *testing.T) {
	a, _ := NewSecret()
	b, _ := NewSecret()
	body := []byte(`{"type":"task.completed","data":{}}`)
	h := http.Header{}
	if err := Sign(h, "msg_01", time.Now(), body, []string{a, b}); err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(h.Get(HeaderSignature))); n != 2 {
		t.Fatalf("%d signatures, want 2", n)
	}
	for _, secret := range []string{a, b} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, h); err != nil {
			t.Errorf("secret %s…: %v", Hint(secret), err)
		}
		if err := wh.Verify(append(body, ' '), h); err == nil {
			t.Error("a changed body verifies")
		}
	}
	other, _ := NewSecret()
	wh, _ := standardwebhooks.NewWebhook(other)
	if err := wh.Verify(body, h); err == nil {
		t.Error("another secret verifies")
	}
	if _, err := Signature("x", time.Now(), body, []string{"not-a-secret"}); err == nil {
		t.Error("a secret without whsec_ signs")
	}
}

func TestTaskEventType(t *testing.T) {
	st := agentmeshv1.EventType_EVENT_TYPE_STATUS
	tests := []struct {
		ev   *agentmeshv1.TaskEvent
		want string
	}{
		{&agentmeshv1.TaskEvent{Type: st, Status: agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED}, TaskCompleted},
		{&agentmeshv1.TaskEvent{Type: st, Status: agentmeshv1.TaskStatus_TASK_STATUS_FAILED}, TaskFailed},
		{&agentmeshv1.TaskEvent{Type: st, Status: agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED}, TaskCancelled},
		{&agentmeshv1.TaskEvent{Type: st, Status: agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED,
			Approval: &agentmeshv1.Approval{Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING}}, TaskApprovalRequired},
		{&agentmeshv1.TaskEvent{Type: st, Status: agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED}, ""}, // on dependencies
		{&agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_PROPOSAL,
			Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING}}, ProposalCreated},
		{&agentmeshv1.TaskEvent{Type: st, Status: agentmeshv1.TaskStatus_TASK_STATUS_RUNNING}, ""},
		{&agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STEP}, ""},
	}
	for _, tc := range tests {
		if got := TaskEventType(tc.ev); got != tc.want {
			t.Errorf("%v %v: got %q, want %q", tc.ev.Type, tc.ev.Status, got, tc.want)
		}
	}
}

// A delivery's id is the same however often its event is read, differs
// per endpoint and event, and sorts by the event's time.
func TestDeliveryID(t *testing.T) {
	at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	a := DeliveryID("ep_1", "T1:3", at)
	if a != DeliveryID("ep_1", "T1:3", at) || !strings.HasPrefix(a, "msg_") {
		t.Fatalf("not stable: %s", a)
	}
	if a == DeliveryID("ep_2", "T1:3", at) || a == DeliveryID("ep_1", "T1:4", at) {
		t.Error("two deliveries share an id")
	}
	if later := DeliveryID("ep_0", "T0:1", at.Add(time.Millisecond)); later <= a {
		t.Errorf("a later event's id %s sorts before %s", later, a)
	}
	if !Wants(nil, TaskFailed) || Wants([]string{TaskCompleted}, TaskFailed) || !Wants([]string{TaskFailed}, TaskFailed) {
		t.Error("Wants")
	}
}
