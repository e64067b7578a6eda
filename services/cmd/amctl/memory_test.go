package main

import (
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/stack"
)

// The README's memory demo on the quickstart's own stack (the default
// script, its scripted embeddings): an agent told "remember: …" stores the
// fact; the next task, "recall: …", finds it. Then the state, memories
// and threads commands.
func TestMemoryDemoOnTheDefaultScript(t *testing.T) {
	addr := realStackWith(t, stack.Config{SeedSkills: stack.DefaultSkills(), SeedAgents: []*agentmeshv1.Agent{stack.DefaultAgent()}})
	mustRun(t, addr, []string{"agent notes created"}, "agents", "create", "notes", "--tool", "remember,recall", "--memory-write", "agent", "--cache-ttl", "1h")
	mustRun(t, addr, []string{"completed", "Remembered"}, "submit", "--agent", "notes", "--wait", "remember: our deploy window is Tuesday 10:00 UTC")
	mustRun(t, addr, []string{"completed", "our deploy window is Tuesday 10:00 UTC"}, "submit", "--agent", "notes", "--wait", "recall: when is the deploy window?")
	list := mustRun(t, addr, []string{"agent/notes", "deploy window"}, "memories", "list", "--scope", "agent", "--id", "notes")
	id := strings.Fields(strings.Split(list, "\n")[1])[0]
	mustRun(t, addr, []string{"memory " + id, "scripted-embedding, 256 dimensions"}, "memories", "get", id)
	mustRun(t, addr, []string{"1 memories would be deleted"}, "memories", "prune", "--max-items", "0", "--max-age", "1ns", "--dry-run")

	mustRun(t, addr, []string{"org/ plan = {\"step\":1}", "revision 1"}, "state", "set", "plan", `{"step": 1}`, "--persist")
	if code, _, errOut := amctl(t, addr, "state", "set", "plan", `2`, "--if-revision", "0"); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("create-only set of an existing key: exit %d, %q", code, errOut)
	}
	mustRun(t, addr, []string{"revision 2"}, "state", "set", "plan", `2`, "--if-revision", "1")
	mustRun(t, addr, []string{"plan", "true"}, "state", "list")
	mustRun(t, addr, []string{"deleted plan (revision 2)"}, "state", "delete", "plan")
	if code, _, _ := amctl(t, addr, "state", "set", "k", "not json"); code != 2 {
		t.Errorf("a value that is not JSON: exit %d, want 2", code)
	}

	mustRun(t, addr, []string{"completed"}, "submit", "--agent", "assistant", "--thread", "chat", "--wait", "hello")
	mustRun(t, addr, []string{"completed"}, "submit", "--thread", "chat", "--thread-policy", "enqueue", "--wait", "and again")
	mustRun(t, addr, []string{"chat", "2"}, "threads", "list")
	mustRun(t, addr, []string{"thread chat: 2 tasks, agent assistant", "> hello", "> and again"}, "threads", "get", "chat")
	mustRun(t, addr, []string{"thread chat deleted with its 2 tasks"}, "threads", "delete", "chat")
	if code, _, _ := amctl(t, addr, "submit", "--thread-policy", "enqueue", "x"); code != 2 {
		t.Errorf("--thread-policy without --thread: exit %d, want 2", code)
	}
}
