package executor

// Conversations that continue: a task submitted with continue_from carries
// the earlier task's conversation. Before the attempt starts, the executor
// reads the thread — the earlier task's input, its model turns and tool
// results (its final answer is its last model turn), and, when the earlier
// task itself continued another, that one's before it — and every model
// request of the attempt is sent as: the system prompt, the thread, then
// the new task's own messages (its input and its own turns). The child
// process does not know: it builds its conversation as for any task, and
// the hook in modelTurn (withConversation) inserts the thread.

import (
	"context"
	"errors"
	"fmt"
	"sort"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// maxThread bounds how many earlier tasks a continued conversation
// carries (a chain of continue_from).
const maxThread = 32

// unranToolResult stands for the result of a tool call the earlier task
// never ran (it ended first): a model API wants every call answered.
const unranToolResult = "(no result: the task ended before this tool ran)"

// conversation returns the thread task continues (nil when it continues
// none), oldest message first, or how the attempt ends when it cannot be
// read.
func (s *Service) conversation(ctx context.Context, task *agentmeshv1.Task) ([]*childv1.Message, *outcome) {
	var chain []*agentmeshv1.Task
	seen := map[string]bool{task.GetId(): true}
	for id := task.GetContinueFrom(); id != ""; {
		if seen[id] || len(chain) >= maxThread {
			break
		}
		seen[id] = true
		var resp busv1.GetTaskResponse
		err := bus.Retry(ctx, bus.DefaultBackoff, func(ctx context.Context) error {
			return s.request(ctx, subjects.StateGetTask, &busv1.GetTaskRequest{Id: id, Org: task.GetOrg()}, &resp)
		})
		switch {
		case errors.Is(err, bus.ErrNotFound):
			return nil, &outcome{kind: outFailed, failKind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT,
				reason: fmt.Sprintf("continue_from: task %s not found (deleted?): its conversation cannot be carried", id)}
		case err != nil:
			return nil, &outcome{kind: outRequeue, reason: fmt.Sprintf("could not read task %s to continue its conversation: %v", id, err)}
		case !taskstate.Terminal(resp.GetTask().GetStatus()):
			return nil, &outcome{kind: outFailed, failKind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT,
				reason: fmt.Sprintf("continue_from: task %s is %s, not finished", id, taskstate.Name(resp.GetTask().GetStatus()))}
		}
		chain = append(chain, resp.GetTask())
		id = resp.GetTask().GetContinueFrom()
	}
	var thread []*childv1.Message
	for i := len(chain) - 1; i >= 0; i-- {
		t := chain[i]
		var steps []*agentmeshv1.Step
		if t.GetStepCount() > 0 {
			var err error
			if steps, _, err = s.history(ctx, t.GetId()); err != nil {
				if gone(err) {
					return nil, &outcome{kind: outFailed, failKind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT,
						reason: fmt.Sprintf("continue_from: the history of task %s is gone: %v", t.GetId(), err)}
				}
				return nil, &outcome{kind: outRequeue, reason: fmt.Sprintf("could not read the history of task %s: %v", t.GetId(), err)}
			}
		}
		thread = append(thread, threadOf(inputWithDependencies(t), steps)...)
	}
	return thread, nil
}

// threadOf renders one finished task's conversation: its input, then its
// model turns and tool results in step order (a result recorded twice, by
// a resumed attempt, counts once; a call never answered gets
// unranToolResult).
func threadOf(input string, history []*agentmeshv1.Step) []*childv1.Message {
	steps := append([]*agentmeshv1.Step(nil), history...)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Index < steps[j].Index })
	out := []*childv1.Message{{Role: "user", Content: input}}
	var open []*agentmeshv1.ToolCall // calls of the last turn not yet answered
	answered := map[string]bool{}
	closeTurn := func() {
		for _, c := range open {
			if !answered[c.Id] {
				out = append(out, &childv1.Message{Role: "tool", Content: unranToolResult, ToolCallId: c.Id, Name: c.Name})
			}
		}
		open = nil
	}
	lastTurn := int32(-1)
	for _, s := range steps {
		switch s.Kind {
		case agentmeshv1.StepKind_STEP_KIND_MODEL_TURN:
			if s.Index == lastTurn {
				continue // the same turn recorded by two attempts
			}
			lastTurn = s.Index
			closeTurn()
			answered = map[string]bool{}
			out = append(out, &childv1.Message{Role: "assistant", Content: s.Content, ToolCalls: s.ToolCalls})
			open = s.ToolCalls
		case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
			if answered[s.ToolCallId] || !callOf(open, s.ToolCallId) {
				continue
			}
			answered[s.ToolCallId] = true
			out = append(out, &childv1.Message{Role: "tool", Content: s.Content, ToolCallId: s.ToolCallId, Name: s.ToolName})
		}
	}
	closeTurn()
	return out
}

func callOf(calls []*agentmeshv1.ToolCall, id string) bool {
	for _, c := range calls {
		if c.Id == id {
			return true
		}
	}
	return false
}

// withConversation returns req with the thread inserted after its leading
// system messages (req itself when there is no thread).
func withConversation(req *childv1.ModelRequest, thread []*childv1.Message) *childv1.ModelRequest {
	if len(thread) == 0 {
		return req
	}
	msgs := req.GetMessages()
	i := 0
	for i < len(msgs) && msgs[i].GetRole() == "system" {
		i++
	}
	all := make([]*childv1.Message, 0, len(msgs)+len(thread))
	all = append(all, msgs[:i]...)
	all = append(all, thread...)
	all = append(all, msgs[i:]...)
	return &childv1.ModelRequest{Id: req.GetId(), Messages: all, Tools: req.GetTools()}
}
