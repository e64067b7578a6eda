package taskstate

import (
	"slices"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Update mask paths UpdateTask accepts.
const (
	FieldTitle     = "title"
	FieldPriority  = "priority"
	FieldMetadata  = "metadata"
	FieldTags      = "tags"
	FieldDependsOn = "depends_on"
)

// applyGraph folds what dependencies, updates and timing add to an event
// into t (already updated by Apply's main switch).
func applyGraph(t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent) {
	if u := ev.GetUpdate(); u != nil {
		applyUpdate(t, u)
	}
	if d := ev.GetDependency(); d != nil {
		if i := slices.Index(t.WaitingOn, d.TaskId); i >= 0 {
			subtask := t.SubtaskWait != nil && slices.Contains(t.SubtaskWait.Tasks, d.TaskId)
			t.WaitingOn = slices.Delete(slices.Clone(t.WaitingOn), i, i+1)
			// A sub-task's outcome reaches the model through wait_tasks,
			// not as a dependency result added to the task's input.
			if !subtask {
				t.DependencyResults = append(t.DependencyResults, proto.Clone(d).(*agentmeshv1.DependencyResult))
			}
		}
	}
	if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STATUS {
		switch {
		case ev.Status == Queued:
			t.QueuedAt = ev.Time
		case ev.Status == Running && ev.FromStatus != Blocked && t.QueuedAt != nil:
			t.QueueWait = durationpb.New(ev.Time.AsTime().Sub(t.QueuedAt.AsTime()))
		case Terminal(ev.Status) && t.StartedAt != nil:
			t.RunTime = durationpb.New(ev.Time.AsTime().Sub(t.StartedAt.AsTime()))
		}
		if Terminal(ev.Status) {
			// Nothing is awaited any more.
			t.WaitingOn = nil
		}
	}
	if w := ev.GetSubtaskWait(); w != nil && ev.Status == Blocked {
		// A wait_tasks call: it waits on the sub-tasks not finished yet.
		t.SubtaskWait = proto.Clone(w).(*agentmeshv1.SubtaskWait)
		t.WaitingOn = slices.Clone(w.Waiting)
		t.SubtaskWait.Waiting = nil
	} else if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STATUS && ev.FromStatus == Blocked && ev.Status != Blocked &&
		t.SubtaskWait != nil && waitsOnSubtasks(t) {
		// Released (mode any, the deadline, cancel): nothing is awaited.
		t.WaitingOn = nil
	}
	t.BlockedOn = BlockedOn(t)
}

// BlockedOn says what a blocked task waits for.
func BlockedOn(t *agentmeshv1.Task) agentmeshv1.BlockedOn {
	switch {
	case t.Status != Blocked:
		return agentmeshv1.BlockedOn_BLOCKED_ON_UNSPECIFIED
	case t.PendingApproval != nil:
		return agentmeshv1.BlockedOn_BLOCKED_ON_APPROVAL
	case ProposalPending(t):
		return agentmeshv1.BlockedOn_BLOCKED_ON_PROPOSAL
	case len(t.WaitingOn) > 0 && t.SubtaskWait != nil && waitsOnSubtasks(t):
		return agentmeshv1.BlockedOn_BLOCKED_ON_SUBTASKS
	case len(t.WaitingOn) > 0:
		return agentmeshv1.BlockedOn_BLOCKED_ON_DEPENDENCIES
	}
	return agentmeshv1.BlockedOn_BLOCKED_ON_UNSPECIFIED
}

func applyUpdate(t *agentmeshv1.Task, u *agentmeshv1.TaskUpdate) {
	for _, f := range u.Mask {
		switch f {
		case FieldTitle:
			t.Title = u.Title
		case FieldPriority:
			t.Priority = u.Priority
		case FieldMetadata:
			t.Metadata = maps(u.Metadata)
		case FieldTags:
			t.Tags = slices.Clone(u.Tags)
		case FieldDependsOn:
			t.DependsOn = slices.Clone(u.DependsOn)
			t.WaitingOn = slices.Clone(u.WaitingOn)
			t.DependencyResults = nil
			for _, d := range u.DependencyResults {
				t.DependencyResults = append(t.DependencyResults, proto.Clone(d).(*agentmeshv1.DependencyResult))
			}
		}
	}
}

func maps(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// waitsOnSubtasks reports whether what a blocked task waits on is its
// wait_tasks call's sub-tasks (not dependencies: a task waits on either,
// never both — dependencies block it before it starts, a wait only while
// it runs).
func waitsOnSubtasks(t *agentmeshv1.Task) bool {
	for _, id := range t.WaitingOn {
		if !slices.Contains(t.SubtaskWait.GetTasks(), id) {
			return false
		}
	}
	return true
}
