package a2a

import (
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/doortest"
)

// An A2A context is a thread: each message's task carries the thread id
// (the contextId, or a digest of one with characters a thread id lacks)
// and continues the context's previous task.
func TestContextIsAThread(t *testing.T) {
	e := start(t)
	c, _ := e.client(t, "a-op")
	for _, ctxID := range []string{"chat-7", "urn:chat:8"} {
		var prev string
		for i, text := range []string{"hello", "and then?"} {
			m := userMessage(text)
			m.ContextID = ctxID
			res, err := c.SendMessage(ctxT(t), &a2a.MessageSendParams{Message: m, Metadata: map[string]any{"agent": doortest.AgentPlain}})
			if err != nil {
				t.Fatal(err)
			}
			task := res.(*a2a.Task)
			got, err := e.stack.Tasks.GetTask(doortest.As(t, "a-reader"), &agentmeshv1.GetTaskRequest{Id: string(task.ID)})
			if err != nil {
				t.Fatal(err)
			}
			want := threadOf(ctxID)
			if got.Task.ThreadId != want || got.Task.ContinueFrom != prev || string(task.ContextID) != ctxID {
				t.Errorf("context %s, message %d: thread %q continue_from %q context %q; want %q, %q, %q",
					ctxID, i, got.Task.ThreadId, got.Task.ContinueFrom, task.ContextID, want, prev, ctxID)
			}
			prev = got.Task.Id
		}
	}
	if got := threadOf("urn:chat:8"); !strings.HasPrefix(got, "a2a-") || len(got) != 44 {
		t.Errorf("threadOf of a context id with ':' = %q", got)
	}
}
