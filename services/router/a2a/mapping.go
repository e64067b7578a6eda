package a2a

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/router/door"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// How an A2A context lives on agentmesh's tasks: it is a thread
// (threadOf: SubmitTask's thread_id), and each task of the context carries
// the tag ContextTagPrefix+contextId (and the metadata MetaContextID), so
// the context's newest task is ListTasks(tag, page_size 1): a context
// opened before threads, or another door's task outside any thread, is
// continued with continue_from as before.
const (
	ContextTagPrefix = "a2a-ctx:"
	MetaContextID    = "a2a.context_id"
	MetaMessageID    = "a2a.message_id"
	// maxContextID keeps the tag within the API's 64 bytes.
	maxContextID = 64 - len(ContextTagPrefix)
)

var contextIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// threadIDRe is what a thread id may be (pkg/memory.CheckThreadID).
var threadIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// threadOf is the thread of context ctxID (SubmitTask's thread_id): the
// context id itself when it is a thread id, else "a2a-" and the first 40
// hex digits of its SHA-256. A context is a thread: its messages run one
// at a time, each continuing the one before (docs/memory.md, "Threads").
func threadOf(ctxID string) string {
	if ctxID == "" || threadIDRe.MatchString(ctxID) {
		return ctxID
	}
	sum := sha256.Sum256([]byte(ctxID))
	return "a2a-" + hex.EncodeToString(sum[:])[:40]
}

func checkContextID(id string) *door.RPCError {
	if len(id) > maxContextID || !contextIDRe.MatchString(id) {
		return &door.RPCError{Code: door.CodeInvalidParams,
			Message: fmt.Sprintf("message.contextId: %.70q: want 1-%d letters, digits, '.', '_', ':' or '-'", id, maxContextID)}
	}
	return nil
}

// contextOf is the A2A context of a task: the one it was created in, or
// (a task created by another door) the task's own id.
func contextOf(t *agentmeshv1.Task) string {
	if c := t.GetMetadata()[MetaContextID]; c != "" {
		return c
	}
	return t.GetId()
}

// idempotencyKey makes a retried message (same messageId) return the task
// its first sending created.
func idempotencyKey(messageID string) string {
	if len(messageID) <= 200 {
		return "a2a:" + messageID
	}
	sum := sha256.Sum256([]byte(messageID))
	return "a2a:sha256:" + hex.EncodeToString(sum[:])
}

// stateOf maps agentmesh's state machine onto A2A's states.
func stateOf(t *agentmeshv1.Task) string {
	switch t.GetStatus() {
	case agentmeshv1.TaskStatus_TASK_STATUS_CREATED, agentmeshv1.TaskStatus_TASK_STATUS_QUEUED:
		return StateSubmitted
	case agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED:
		return StateCompleted
	case agentmeshv1.TaskStatus_TASK_STATUS_FAILED:
		return StateFailed
	case agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED:
		return StateCanceled
	case agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED:
		if t.GetPendingApproval() != nil {
			return StateInputRequired
		}
	}
	return StateWorking
}

// final reports whether a state ends a stream: a terminal one, or
// input-required (the task waits for the client's next message).
func final(state string) bool {
	switch state {
	case StateCompleted, StateFailed, StateCanceled, StateInputRequired:
		return true
	}
	return false
}

func stamp(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339Nano)
}

func textPart(s string) Part { return Part{Kind: "text", Text: s} }

// taskOf is the A2A task of an agentmesh task; historyLength < 0 keeps the
// whole history (the input, and the answer of a completed task).
func taskOf(t *agentmeshv1.Task, historyLength int) *Task {
	ctx := contextOf(t)
	out := &Task{Kind: "task", ID: t.GetId(), ContextID: ctx, Status: statusOf(t),
		Metadata: map[string]any{"agentmesh": map[string]any{
			"status": taskstate.Name(t.GetStatus()), "agent": t.GetAgent(), "steps": t.GetStepCount(),
			"priority": door.PriorityName(t.GetPriority()),
		}}}
	msgID := t.GetMetadata()[MetaMessageID]
	if msgID == "" {
		msgID = t.GetId() + "-input"
	}
	history := []Message{{Kind: "message", Role: "user", Parts: []Part{textPart(t.GetInput())}, MessageID: msgID, TaskID: t.GetId(), ContextID: ctx}}
	if t.GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED {
		out.Artifacts = []Artifact{resultArtifact(t)}
		history = append(history, *agentMessage(t, t.GetId()+"-result", t.GetResult()))
	}
	if historyLength >= 0 && historyLength < len(history) {
		history = history[len(history)-historyLength:]
	}
	if len(history) > 0 {
		out.History = history
	}
	return out
}

func resultArtifact(t *agentmeshv1.Task) Artifact {
	return Artifact{ArtifactID: t.GetId() + "-result", Name: "result", Description: "the agent's final answer",
		Parts: []Part{textPart(t.GetResult())}}
}

func agentMessage(t *agentmeshv1.Task, id string, parts ...any) *Message {
	m := &Message{Kind: "message", Role: "agent", MessageID: id, TaskID: t.GetId(), ContextID: contextOf(t)}
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			m.Parts = append(m.Parts, textPart(p))
		case Part:
			m.Parts = append(m.Parts, p)
		}
	}
	return m
}

// statusOf is the task's A2A status; its message says, for a person, what
// the state means: the answer, the error, or the approval asked for.
func statusOf(t *agentmeshv1.Task) TaskStatus {
	st := TaskStatus{State: stateOf(t), Timestamp: stamp(t.GetUpdatedAt())}
	id := fmt.Sprintf("%s-status-%d", t.GetId(), t.GetLastEventSeq())
	switch st.State {
	case StateCompleted:
		st.Message = agentMessage(t, id, t.GetResult())
	case StateFailed, StateCanceled:
		st.Message = agentMessage(t, id, t.GetError())
	case StateInputRequired:
		st.Message = approvalMessage(t, id)
	case StateWorking:
		if t.GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED {
			st.Message = agentMessage(t, id, "waiting on "+door.BlockedOnName(t.GetBlockedOn()))
		}
	}
	return st
}

// approvalMessage asks the client to decide the tool call the task waits
// on: the call's exact arguments in words and as data.
func approvalMessage(t *agentmeshv1.Task, id string) *Message {
	a := t.GetPendingApproval()
	text := fmt.Sprintf("The agent %s asks to run the tool %s with the arguments %s", t.GetAgent(), a.GetTool(), a.GetArguments())
	if a.GetRisk() != "" {
		text += " (risk: " + a.GetRisk() + ")"
	}
	if a.GetReason() != "" {
		text += ". " + a.GetReason()
	}
	text += `. Reply to this task with "approve" or "reject" (a comment may follow), or a data part {"decision": "approve"|"reject", "comment": "..."}.`
	args := json.RawMessage(a.GetArguments())
	if !json.Valid(args) {
		args, _ = json.Marshal(a.GetArguments())
	}
	data, _ := json.Marshal(map[string]any{"approval": map[string]any{
		"id": a.GetId(), "tool": a.GetTool(), "arguments": args, "arguments_sha256": a.GetArgumentsSha256(),
		"risk": a.GetRisk(), "reason": a.GetReason(), "deadline": stamp(a.GetDeadline()),
	}})
	return agentMessage(t, id, text, Part{Kind: "data", Data: data})
}

// inputOf is a user message's text: its text parts, and its data parts as
// JSON, in order. A file part is refused (not supported yet).
func inputOf(m *Message) (string, *door.RPCError) {
	var b strings.Builder
	for i, p := range m.Parts {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		switch p.Kind {
		case "text":
			b.WriteString(p.Text)
		case "data":
			var compact bytes.Buffer
			if len(p.Data) == 0 || json.Compact(&compact, p.Data) != nil || compact.Bytes()[0] != '{' {
				return "", &door.RPCError{Code: door.CodeInvalidParams, Message: fmt.Sprintf("message.parts[%d].data: must be an object", i)}
			}
			b.Write(compact.Bytes())
		case "file":
			return "", &door.RPCError{Code: CodeContentTypeNotSupported,
				Message: fmt.Sprintf("message.parts[%d]: file parts are not supported yet; send text or data parts", i)}
		default:
			return "", &door.RPCError{Code: door.CodeInvalidParams, Message: fmt.Sprintf("message.parts[%d].kind: %.30q, want text, data or file", i, p.Kind)}
		}
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", &door.RPCError{Code: door.CodeInvalidParams, Message: "message.parts: no text: the message says nothing to do"}
	}
	return b.String(), nil
}

// decisionOf reads a reply to an approval: a data part {"decision":
// "approve"|"reject", "comment": ...}, or text starting with approve (yes,
// ok) or reject (no, deny), the rest being the comment.
func decisionOf(m *Message) (approve bool, comment string, rerr *door.RPCError) {
	for _, p := range m.Parts {
		if p.Kind != "data" {
			continue
		}
		var d struct{ Decision, Comment string }
		if json.Unmarshal(p.Data, &d) == nil && d.Decision != "" {
			if ok, known := decisionWord(d.Decision); known {
				return ok, d.Comment, nil
			}
		}
	}
	for _, p := range m.Parts {
		if p.Kind != "text" {
			continue
		}
		word, rest, _ := strings.Cut(strings.TrimSpace(p.Text), " ")
		if ok, known := decisionWord(strings.Trim(word, ".,:;!")); known {
			return ok, strings.TrimSpace(rest), nil
		}
	}
	return false, "", &door.RPCError{Code: door.CodeInvalidParams,
		Message: `message: the task waits for a decision on a tool call: reply "approve" or "reject" (or a data part {"decision": ...})`}
}

func decisionWord(w string) (approve, known bool) {
	switch strings.ToLower(w) {
	case "approve", "approved", "yes", "ok", "allow":
		return true, true
	case "reject", "rejected", "no", "deny", "denied":
		return false, true
	}
	return false, false
}
