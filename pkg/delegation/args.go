package delegation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// ErrBadArguments: a delegation tool's arguments do not parse.
var ErrBadArguments = errors.New("invalid arguments")

// CallAgent are call_agent's arguments.
type CallAgent struct {
	Agent        string   `json:"agent"`
	Skills       []string `json:"skills"`
	Input        string   `json:"input"`
	Title        string   `json:"title"`
	Model        string   `json:"model"`
	SystemPrompt *string  `json:"system_prompt"`
	// Tools, when set (even empty), replace the target agent's tools by
	// this subset.
	Tools *[]string `json:"tools"`
}

// CallModel are call_model's arguments.
type CallModel struct {
	Model        string `json:"model"`
	Input        string `json:"input"`
	SystemPrompt string `json:"system_prompt"`
	Title        string `json:"title"`
}

// GetTaskStatus are get_task_status's arguments.
type GetTaskStatus struct {
	Task string `json:"task"`
}

// WaitTasks are wait_tasks' arguments, with the ids parsed.
type WaitTasks struct {
	Tasks          []string `json:"tasks"`
	Mode           string   `json:"mode"`
	TimeoutSeconds int      `json:"timeout_seconds"`
	// IDs are Tasks' ids (URIs resolved), in order, without repeats.
	IDs []string `json:"-"`
}

// Any reports whether the wait ends with the first sub-task.
func (w WaitTasks) Any() bool { return w.Mode == "any" }

const (
	maxInput  = 1 << 20
	maxTitle  = 500
	maxPrompt = 256 << 10
	maxName   = 200
	maxList   = 100
)

func decode(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadArguments, err)
	}
	if d.More() {
		return fmt.Errorf("%w: trailing data after the arguments object", ErrBadArguments)
	}
	return nil
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadArguments, fmt.Sprintf(format, args...))
}

func checkName(field, v string) error {
	if len(v) > maxName || strings.ContainsAny(v, " \t\r\n") {
		return bad("%s %q is not a valid name", field, clip(v))
	}
	return nil
}

// ParseCallAgent parses and checks call_agent's arguments: exactly one of
// agent or skills, an input.
func ParseCallAgent(raw []byte) (CallAgent, error) {
	var a CallAgent
	if err := decode(raw, &a); err != nil {
		return a, err
	}
	switch {
	case a.Agent == "" && len(a.Skills) == 0:
		return a, bad("name the agent (\"agent\") or the skills it needs (\"skills\")")
	case a.Agent != "" && len(a.Skills) > 0:
		return a, bad("give either \"agent\" or \"skills\", not both")
	case strings.TrimSpace(a.Input) == "":
		return a, bad("\"input\" (what the sub-task should do) is required")
	case len(a.Input) > maxInput:
		return a, bad("\"input\" is longer than %d bytes", maxInput)
	case len(a.Title) > maxTitle:
		return a, bad("\"title\" is longer than %d bytes", maxTitle)
	case a.SystemPrompt != nil && len(*a.SystemPrompt) > maxPrompt:
		return a, bad("\"system_prompt\" is longer than %d bytes", maxPrompt)
	case len(a.Skills) > maxList:
		return a, bad("at most %d skills", maxList)
	case a.Tools != nil && len(*a.Tools) > maxList:
		return a, bad("at most %d tools", maxList)
	}
	if err := checkName("agent", a.Agent); err != nil {
		return a, err
	}
	if err := checkName("model", a.Model); err != nil {
		return a, err
	}
	for _, s := range a.Skills {
		if s == "" {
			return a, bad("a skill is empty")
		}
		if err := checkName("skill", s); err != nil {
			return a, err
		}
	}
	if a.Tools != nil {
		for _, t := range *a.Tools {
			if t == "" {
				return a, bad("a tool name is empty")
			}
			if err := checkName("tool", t); err != nil {
				return a, err
			}
		}
	}
	return a, nil
}

// ParseCallModel parses and checks call_model's arguments.
func ParseCallModel(raw []byte) (CallModel, error) {
	var a CallModel
	if err := decode(raw, &a); err != nil {
		return a, err
	}
	switch {
	case strings.TrimSpace(a.Input) == "":
		return a, bad("\"input\" is required")
	case len(a.Input) > maxInput:
		return a, bad("\"input\" is longer than %d bytes", maxInput)
	case len(a.SystemPrompt) > maxPrompt:
		return a, bad("\"system_prompt\" is longer than %d bytes", maxPrompt)
	case len(a.Title) > maxTitle:
		return a, bad("\"title\" is longer than %d bytes", maxTitle)
	}
	if a.Model == "" {
		return a, nil // the agent's small model (ModelFor)
	}
	return a, checkName("model", a.Model)
}

// ModelFor is the model a call_model call asks: the one it names, else
// the agent's model.small_model; an error when neither is there.
func ModelFor(a CallModel, agent *agentmeshv1.Agent) (string, error) {
	if a.Model != "" {
		return a.Model, nil
	}
	if m := agent.GetModel().GetSmallModel(); m != "" {
		return m, nil
	}
	return "", bad("\"model\" is required: the agent names no model.small_model to ask instead")
}

// ParseGetTaskStatus parses get_task_status's arguments and returns the id.
func ParseGetTaskStatus(raw []byte) (string, error) {
	var a GetTaskStatus
	if err := decode(raw, &a); err != nil {
		return "", err
	}
	if a.Task == "" {
		return "", bad("\"task\" (a subtask:// URI) is required")
	}
	id, err := TaskID(a.Task)
	if err != nil {
		return "", fmt.Errorf("%w: task: %v", ErrBadArguments, err)
	}
	return id, nil
}

// ParseWaitTasks parses and checks wait_tasks' arguments.
func ParseWaitTasks(raw []byte) (WaitTasks, error) {
	var a WaitTasks
	if err := decode(raw, &a); err != nil {
		return a, err
	}
	switch a.Mode {
	case "":
		a.Mode = "all"
	case "all", "any":
	default:
		return a, bad("\"mode\" must be \"all\" or \"any\", not %q", clip(a.Mode))
	}
	if a.TimeoutSeconds < 0 || a.TimeoutSeconds > MaxWaitSeconds {
		return a, bad("\"timeout_seconds\" must be within 0..%d", MaxWaitSeconds)
	}
	if len(a.Tasks) > MaxWaitTasks {
		return a, bad("at most %d tasks", MaxWaitTasks)
	}
	for i, ref := range a.Tasks {
		id, err := TaskID(ref)
		if err != nil {
			return a, fmt.Errorf("%w: tasks[%d]: %v", ErrBadArguments, i, err)
		}
		if !slices.Contains(a.IDs, id) {
			a.IDs = append(a.IDs, id)
		}
	}
	return a, nil
}
