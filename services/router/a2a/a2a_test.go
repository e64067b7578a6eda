package a2a

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/doortest"
)

func skillIDs(card *a2a.AgentCard) []string {
	var ids []string
	for _, s := range card.Skills {
		ids = append(ids, s.ID)
	}
	return ids
}

// The official A2A Go SDK's client finds agentmesh by its card, sends a
// message (blocking: the answer comes back as the task's artifact),
// continues the context (continue_from the context's newest task), and
// streams a message to its answer.
func TestGoClientSendsAndStreams(t *testing.T) {
	e := start(t)
	c, card := e.client(t, "a-op")
	if card.URL != e.srv.URL+"/a2a" || card.PreferredTransport != a2a.TransportProtocolJSONRPC || !card.Capabilities.Streaming ||
		card.Capabilities.PushNotifications || !card.SupportsAuthenticatedExtendedCard || card.ProtocolVersion != ProtocolVersion {
		t.Errorf("card %+v", card)
	}
	if ids := skillIDs(card); !slices.Contains(ids, "agent:plain") || !slices.Contains(ids, "agent:careful") || !slices.Contains(ids, "run-task") {
		t.Errorf("the extended card's skills are %v, want the org's agents", ids)
	}

	res, err := c.SendMessage(ctxT(t), &a2a.MessageSendParams{Message: userMessage("hello a2a"), Metadata: map[string]any{"agent": doortest.AgentPlain}})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != 1 || textOfParts(task.Artifacts[0].Parts) != "final answer: hello a2a" {
		t.Fatalf("message/send answered %#v", res)
	}
	got, err := e.stack.Tasks.GetTask(doortest.As(t, "a-reader"), &agentmeshv1.GetTaskRequest{Id: string(task.ID)})
	if err != nil || got.Task.Input != "hello a2a" || got.Task.Agent != doortest.AgentPlain {
		t.Fatalf("the A2A task is not agentmesh's task %s: %v %+v", task.ID, err, got.GetTask())
	}

	// The same context: the new task continues the first one.
	next := userMessage("and then?")
	next.ContextID = task.ContextID
	res, err = c.SendMessage(ctxT(t), &a2a.MessageSendParams{Message: next})
	if err != nil {
		t.Fatal(err)
	}
	followUp := res.(*a2a.Task)
	if followUp.ContextID != task.ContextID || followUp.ID == task.ID || followUp.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the follow-up is %+v", followUp)
	}
	got, err = e.stack.Tasks.GetTask(doortest.As(t, "a-reader"), &agentmeshv1.GetTaskRequest{Id: string(followUp.ID)})
	if err != nil || got.Task.ContinueFrom != string(task.ID) || got.Task.Agent != doortest.AgentPlain {
		t.Fatalf("the follow-up does not continue %s: %v %+v", task.ID, err, got.GetTask())
	}

	// A task from another door is a context too: its id continues it.
	other := e.stack.Submit(t, "a-op", &agentmeshv1.SubmitTaskRequest{Input: "from gRPC", Agent: doortest.AgentPlain})
	e.stack.WaitStatus(t, "a-reader", other.Id, taskstate.Completed)
	next = userMessage("go on from gRPC")
	next.ContextID = other.Id
	if res, err = c.SendMessage(ctxT(t), &a2a.MessageSendParams{Message: next}); err != nil {
		t.Fatal(err)
	}
	got, err = e.stack.Tasks.GetTask(doortest.As(t, "a-reader"), &agentmeshv1.GetTaskRequest{Id: string(res.(*a2a.Task).ID)})
	if err != nil || got.Task.ContinueFrom != other.Id || res.(*a2a.Task).ContextID != other.Id {
		t.Fatalf("a message in the context of %s: %v %+v", other.Id, err, got.GetTask())
	}

	// Streaming: the task, its progress, the answer, the final status.
	var events []a2a.Event
	for ev, err := range c.SendStreamingMessage(ctxT(t), &a2a.MessageSendParams{Message: userMessage("stream it"), Metadata: map[string]any{"agent": doortest.AgentPlain}}) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	if len(events) < 3 {
		t.Fatalf("%d events: %#v", len(events), events)
	}
	first, ok := events[0].(*a2a.Task)
	if !ok || first.Status.State.Terminal() {
		t.Fatalf("the stream starts with %#v, want the task not finished", events[0])
	}
	art, ok := events[len(events)-2].(*a2a.TaskArtifactUpdateEvent)
	if !ok || textOfParts(art.Artifact.Parts) != "final answer: stream it" || art.TaskID != first.ID {
		t.Errorf("the answer event is %#v", events[len(events)-2])
	}
	last, ok := events[len(events)-1].(*a2a.TaskStatusUpdateEvent)
	if !ok || !last.Final || last.Status.State != a2a.TaskStateCompleted {
		t.Errorf("the stream ends with %#v", events[len(events)-1])
	}
	var working bool
	for _, ev := range events[1 : len(events)-2] {
		if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && su.Status.State == a2a.TaskStateWorking && !su.Final {
			working = true
		}
	}
	if !working {
		t.Errorf("no working status-update in the stream: %#v", events)
	}

	// tasks/get with a history length.
	task, err = c.GetTask(ctxT(t), &a2a.TaskQueryParams{ID: first.ID, HistoryLength: ptr(1)})
	if err != nil || len(task.History) != 1 || task.History[0].Role != a2a.MessageRoleAgent || task.Status.State != a2a.TaskStateCompleted {
		t.Errorf("tasks/get answered %+v (%v)", task, err)
	}
}

func ptr[T any](v T) *T { return &v }

// A task waiting for a person's approval is input-required, with the tool
// call's exact arguments; a message to it from an approver answers it
// (others get the API's permission denied), and it runs to its answer.
func TestInputRequiredIsAnApproval(t *testing.T) {
	e := start(t)
	op, _ := e.client(t, "a-op")
	res, err := op.SendMessage(ctxT(t), &a2a.MessageSendParams{Message: userMessage("ship it"), Metadata: map[string]any{"agent": doortest.AgentCareful}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	if task.Status.State != a2a.TaskStateInputRequired || task.Status.Message == nil {
		t.Fatalf("message/send to careful answered %+v", task)
	}
	blocked := e.stack.WaitStatus(t, "a-reader", string(task.ID), taskstate.Blocked)
	approval := blocked.GetPendingApproval()
	var data struct {
		Approval struct {
			ID        string          `json:"id"`
			Tool      string          `json:"tool"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"approval"`
	}
	for _, p := range task.Status.Message.Parts {
		if dp, ok := p.(a2a.DataPart); ok {
			b, _ := json.Marshal(dp.Data)
			_ = json.Unmarshal(b, &data)
		}
	}
	if data.Approval.ID != approval.Id || data.Approval.Tool != "echo" || !jsonEqual(data.Approval.Arguments, approval.Arguments) ||
		!strings.Contains(textOfParts(task.Status.Message.Parts), approval.Arguments) {
		t.Fatalf("the input-required message %+v, approval %+v", task.Status.Message, approval)
	}

	reply := a2a.NewMessageForTask(a2a.MessageRoleUser, task, a2a.TextPart{Text: "approve: looks right"})
	if _, err := op.SendMessage(ctxT(t), &a2a.MessageSendParams{Message: reply}); err == nil || !strings.Contains(err.Error(), "approver") {
		t.Fatalf("the operator's approval: %v, want permission denied naming approver", err)
	}
	approver, _ := e.client(t, "a-approver")
	res, err = approver.SendMessage(ctxT(t), &a2a.MessageSendParams{Message: a2a.NewMessageForTask(a2a.MessageRoleUser, task, a2a.TextPart{Text: "approve: looks right"})})
	if err != nil {
		t.Fatal(err)
	}
	done := res.(*a2a.Task)
	if done.ID != task.ID || done.Status.State != a2a.TaskStateCompleted || textOfParts(done.Artifacts[0].Parts) != "final answer: ship it" {
		t.Fatalf("after the approval: %+v", done)
	}
	// A finished task takes no more messages.
	_, err = approver.SendMessage(ctxT(t), &a2a.MessageSendParams{Message: a2a.NewMessageForTask(a2a.MessageRoleUser, done, a2a.TextPart{Text: "approve"})})
	if !errors.Is(err, a2a.ErrUnsupportedOperation) {
		t.Errorf("a message to a finished task: %v", err)
	}
}

func jsonEqual(a json.RawMessage, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && string(mustJSON(x)) == string(mustJSON(y))
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// tasks/cancel cancels; a second cancel is TaskNotCancelable; a
// resubscribed stream ends with the cancellation.
func TestCancelAndResubscribe(t *testing.T) {
	e := start(t)
	c, _ := e.client(t, "a-op")
	res, err := c.SendMessage(ctxT(t), &a2a.MessageSendParams{Message: userMessage("slow work"),
		Config: &a2a.MessageSendConfig{Blocking: ptr(false)}, Metadata: map[string]any{"agent": doortest.AgentPlain}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	if task.Status.State.Terminal() {
		t.Fatalf("a non-blocking send answered %+v", task)
	}
	e.stack.WaitStatus(t, "a-reader", string(task.ID), taskstate.Running)
	events := make(chan a2a.Event, 16)
	errs := make(chan error, 1)
	go func() {
		defer close(events)
		for ev, err := range c.ResubscribeToTask(ctxT(t), &a2a.TaskIDParams{ID: task.ID}) {
			if err != nil {
				errs <- err
				return
			}
			events <- ev
		}
	}()
	if first, ok := (<-events).(*a2a.Task); !ok || first.ID != task.ID {
		t.Fatalf("the resubscribed stream starts with %#v", first)
	}
	cancelled, err := c.CancelTask(ctxT(t), &a2a.TaskIDParams{ID: task.ID})
	if err != nil || cancelled.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("tasks/cancel answered %+v (%v)", cancelled, err)
	}
	var last a2a.Event
	for ev := range events {
		last = ev
	}
	select {
	case err := <-errs:
		t.Fatalf("the resubscribed stream failed: %v", err)
	default:
	}
	if su, ok := last.(*a2a.TaskStatusUpdateEvent); !ok || !su.Final || su.Status.State != a2a.TaskStateCanceled {
		t.Errorf("the resubscribed stream ended with %#v", last)
	}
	if _, err := c.CancelTask(ctxT(t), &a2a.TaskIDParams{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Errorf("a second cancel: %v, want TaskNotCancelable", err)
	}
	if _, err := c.SetTaskPushConfig(ctxT(t), &a2a.TaskPushConfig{TaskID: task.ID, Config: a2a.PushConfig{URL: "https://example.com/hook"}}); !errors.Is(err, a2a.ErrPushNotificationNotSupported) {
		t.Errorf("push config: %v, want PushNotificationNotSupported", err)
	}
}
