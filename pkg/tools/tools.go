// Package tools defines the tools an agent may use: for each, its name, a
// description for the model, the JSON Schema of its arguments, a category,
// a risk class, its approval rule and where it runs.
//
// The executor is the gatekeeper of every call: it validates the arguments
// against the schema, applies the approval policy (Spec.NeedsApproval, the
// per-call Spec.Assess, the agent's overrides) and audits the call before
// anything runs. Tools that run InChild (code, shell, files) run inside the
// agent's sandboxed child process; tools that run InExecutor (web_fetch,
// sql_query, HTTP MCP servers) need the network or secrets the child must
// not have, and the executor runs them on the child's behalf.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // current_time resolves IANA zones without the host's zoneinfo
)

// Category groups tools for people listing them.
type Category string

const (
	// CategoryUtility: small helpers without side effects.
	CategoryUtility    Category = "utility"
	CategoryCode       Category = "code"
	CategoryFilesystem Category = "filesystem"
	CategoryNetwork    Category = "network"
	CategoryDatabase   Category = "database"
	CategoryMCP        Category = "mcp"
)

// Risk is a tool's risk class: what a call can do beyond returning text.
// Policy (approvals) is decided from it.
type Risk string

const (
	// RiskNone: no side effects, no access to data outside the call.
	RiskNone Risk = "none"
	// RiskRead: reads data (files, the network, a database).
	RiskRead Risk = "read"
	// RiskWrite: changes something outside the conversation.
	RiskWrite Risk = "write"
	// RiskExecute: runs arbitrary code or commands (in the sandbox).
	RiskExecute Risk = "execute"
	// RiskNetwork: reaches other hosts.
	RiskNetwork Risk = "network"
)

// Where says which process runs a tool.
type Where string

const (
	// InChild: the agent child process runs the tool in its sandbox.
	InChild Where = "child"
	// InExecutor: the executor runs the tool on the child's behalf (it has
	// the network access or the secrets the child must not have).
	InExecutor Where = "executor"
)

// Spec describes a tool.
type Spec struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments (an object schema).
	Parameters json.RawMessage
	Category   Category
	Risk       Risk
	Runs       Where
	// NeedsApproval: every call needs a person's approval unless the
	// agent's policy says otherwise.
	NeedsApproval bool
	// Assess, when set, judges one call's (schema-valid) arguments: it can
	// ask for approval or refuse a call the static rule would allow (e.g.
	// sql_query and a DROP TABLE).
	Assess func(args json.RawMessage) Assessment
	// Validator, when set, checks the arguments in place of Validate and
	// Parameters (tools of MCP servers bring arbitrary JSON Schemas, which
	// need a full validator).
	Validator func(args json.RawMessage) error
}

// Assessment is a per-call policy judgement.
type Assessment struct {
	// Deny refuses the call; Reason says why (shown to the model).
	Deny bool
	// NeedsApproval asks a person; Reason says why (shown to the person).
	NeedsApproval bool
	Reason        string
	// Risk, when set, overrides the tool's risk class for this call.
	Risk Risk
}

// Env is what a tool running in the child may use.
type Env struct {
	// Workspace is the task's working directory; file tools stay inside it.
	Workspace string
	// IdempotencyKey is stable per task and tool call: a tool with side
	// effects passes it on so a resumed task does not repeat them.
	IdempotencyKey string
	// Traceparent is the W3C traceparent of the call's span (empty when
	// not traced): a tool that runs programs gives it to them as
	// TRACEPARENT, so they can continue the task's trace.
	Traceparent string
}

// Func runs a tool with arguments that already passed the schema.
type Func func(ctx context.Context, env Env, args json.RawMessage) (string, error)

// Tool is a Spec and the function that runs it.
type Tool struct {
	Spec
	Run Func
}

// MaxOutput caps what a tool returns to the model (bytes); longer output is
// cut and marked as cut.
const MaxOutput = 256 << 10

// ErrUnknownTool is returned (wrapped) for a tool name nobody defines.
var ErrUnknownTool = errors.New("unknown tool")

// ErrInvalidArguments is returned (wrapped) for arguments that are not
// JSON or do not satisfy the tool's schema. Nothing ran.
var ErrInvalidArguments = errors.New("invalid arguments")

// ErrNotHere is returned (wrapped) when a process is asked to run a tool
// that runs elsewhere (an executor tool in the child, or the reverse).
var ErrNotHere = errors.New("tool does not run in this process")

// Check validates args against the tool's schema; nothing runs.
func (t Tool) Check(args string) error {
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	var err error
	if t.Validator != nil {
		err = t.Validator(json.RawMessage(args))
	} else {
		err = Validate(t.Parameters, []byte(args))
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %w", t.Name, ErrInvalidArguments, err)
	}
	return nil
}

// Call validates args against the tool's schema and, if they pass, runs
// the tool. The output is capped at MaxOutput.
func (t Tool) Call(ctx context.Context, env Env, args string) (string, error) {
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	if err := t.Check(args); err != nil {
		return "", err
	}
	if t.Run == nil {
		return "", fmt.Errorf("%s: %w", t.Name, ErrNotHere)
	}
	out, err := t.Run(ctx, env, json.RawMessage(args))
	if err != nil {
		return "", err
	}
	if len(out) > MaxOutput {
		out = out[:MaxOutput] + "\n[output cut at 256 KiB]"
	}
	return out, nil
}

var builtin = []Tool{
	{
		Spec: Spec{
			Name:        "echo",
			Description: "Returns the given text unchanged. Useful to check that tool calls work.",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"text":{"type":"string","description":"The text to return.","maxLength":65536}},` +
				`"required":["text"],"additionalProperties":false}`),
			Category: CategoryUtility,
			Risk:     RiskNone,
			Runs:     InChild,
		},
		Run: runEcho,
	},
	{
		Spec: Spec{
			Name:        "current_time",
			Description: "Returns the current date and time in RFC 3339 format, in the given IANA time zone (UTC when none is given).",
			Parameters: json.RawMessage(`{"type":"object","properties":{` +
				`"timezone":{"type":"string","description":"An IANA time zone name such as Europe/Paris; UTC when empty.","maxLength":64}},` +
				`"additionalProperties":false}`),
			Category: CategoryUtility,
			Risk:     RiskNone,
			Runs:     InChild,
		},
		Run: runCurrentTime,
	},
}

// Register adds (or replaces) the implementation of a built-in tool whose
// spec is declared here; packages that implement tools call it from init
// (the child's local tools, the executor's privileged ones). It panics on
// a name with no spec: every tool is declared in this package.
func Register(name string, run Func, assess func(json.RawMessage) Assessment) {
	regMu.Lock()
	defer regMu.Unlock()
	for i := range builtin {
		if builtin[i].Name == name {
			if run != nil {
				builtin[i].Run = run
			}
			if assess != nil {
				builtin[i].Assess = assess
			}
			return
		}
	}
	panic("tools: Register of undeclared tool " + name)
}

// RegisterValidator sets the argument check of a built-in tool whose spec
// is declared here (Spec.Validator, in place of its JSON Schema). The
// packages that own a tool's arguments call it from init (delegation,
// memory: the executor's gate links them), so that this package, which
// the agent child links too, does not link them and the public API they
// use. It panics on a name with no spec.
func RegisterValidator(name string, validate func(json.RawMessage) error) {
	regMu.Lock()
	defer regMu.Unlock()
	for i := range builtin {
		if builtin[i].Name == name {
			builtin[i].Validator = validate
			return
		}
	}
	panic("tools: RegisterValidator of undeclared tool " + name)
}

var regMu sync.RWMutex

// Builtin returns the built-in tools, sorted by name.
func Builtin() []Tool {
	regMu.RLock()
	defer regMu.RUnlock()
	out := slices.Clone(builtin)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the built-in tool called name.
func Lookup(name string) (Tool, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	for _, t := range builtin {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Resolve returns the tools named, in order, or an error naming the first
// unknown one.
func Resolve(names []string) ([]Tool, error) {
	out := make([]Tool, 0, len(names))
	for _, n := range names {
		t, ok := Lookup(n)
		if !ok {
			return nil, fmt.Errorf("%w %q", ErrUnknownTool, n)
		}
		out = append(out, t)
	}
	return out, nil
}

// Now is the clock current_time reads; tests replace it.
var Now = time.Now

func runEcho(_ context.Context, _ Env, args json.RawMessage) (string, error) {
	var a struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return "", fmt.Errorf("echo: %w: %w", ErrInvalidArguments, err)
	}
	return a.Text, nil
}

func runCurrentTime(_ context.Context, _ Env, args json.RawMessage) (string, error) {
	var a struct {
		Timezone string `json:"timezone"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return "", fmt.Errorf("current_time: %w: %w", ErrInvalidArguments, err)
	}
	loc := time.UTC
	if a.Timezone != "" {
		l, err := time.LoadLocation(a.Timezone)
		if err != nil {
			return "", fmt.Errorf("current_time: %w: unknown time zone %q", ErrInvalidArguments, a.Timezone)
		}
		loc = l
	}
	return Now().In(loc).Format(time.RFC3339), nil
}

// UnknownToolMessage is the observation a model gets for a call of a tool
// it may not use: the name it asked for and the names it may call.
func UnknownToolMessage[T any](name string, available map[string]T) string {
	names := make([]string, 0, len(available))
	for n := range available {
		names = append(names, n)
	}
	sort.Strings(names)
	avail := "none"
	if len(names) > 0 {
		avail = strings.Join(names, ", ")
	}
	return fmt.Sprintf("error: unknown tool %q; the tools you may call are: %s", name, avail)
}
