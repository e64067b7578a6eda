// Package mcp makes the tools of Model Context Protocol servers agentmesh
// tools. An agent names its MCP servers (agentmesh.v1.McpServer): a stdio
// command, which the agent child starts inside its sandbox, or a streamable
// HTTP URL, which the executor calls on the child's behalf (the child has no
// network). Each tool of server "fs" called "list_directory" becomes the
// agentmesh tool "fs__list_directory" (category mcp, risk "external", needing
// approval when the server says require_approval); its arguments are
// checked against the server's own JSON Schema with a full validator
// (github.com/google/jsonschema-go, drafts 2020-12 and 07) before anything
// runs, at the executor's gate and again before the call is made.
//
// This package holds what both sides share: naming, the configuration and
// schema checks, result flattening and Server (a connected server's tools
// and calls) — and the stdio client (stdio.go), agentmesh's own: JSON-RPC
// 2.0 over the server's stdin and stdout, the lifecycle, tools/list and
// tools/call, nothing more. It links neither an MCP SDK nor the public API
// (a server's configuration is read through Config), so the agent child,
// which starts one process per task, does not pay for them at start
// (docs/benchmarks.md, "The agent child without the public API and the MCP
// SDK"). Streamable HTTP servers are reached with the SDK, by
// pkg/mcp/mcphttp, in the executor only.
package mcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/pkg/tail"
	"github.com/agentmesh/agentmesh/pkg/tools"
	"github.com/google/jsonschema-go/jsonschema"
)

// Config is a server's configuration as this package reads it: the
// getters of agentmesh.v1.McpServer (and of the agent child's own copy of
// that message).
type Config interface {
	GetName() string
	GetCommand() []string
	GetEnv() map[string]string
	GetUrl() string
	GetRequireApproval() bool
}

// Sep joins a server's name and its tool's name.
const Sep = "__"

// Limits.
const (
	// MaxToolName is the longest tool name models accept (OpenAI:
	// [a-zA-Z0-9_-]{1,64}).
	MaxToolName = 64
	// MaxServerName bounds a server's name.
	MaxServerName = 32
	// MaxServers bounds the MCP servers of one agent.
	MaxServers = 16
	// MaxCommandArgs and MaxEnv bound a stdio server's command line and
	// environment; MaxURL bounds an HTTP server's URL.
	MaxCommandArgs = 64
	MaxEnv         = 64
	MaxURL         = 2048
	// MaxTools bounds the tools one server may publish.
	MaxTools = 128
	// MaxSchema bounds one tool's JSON Schema (bytes).
	MaxSchema = 64 << 10
	// MaxDescription: longer descriptions are cut.
	MaxDescription = 4 << 10
)

// RiskExternal is the risk class of MCP tools: what they do is up to a
// server agentmesh does not know.
const RiskExternal tools.Risk = "external"

// DefaultConnectTimeout bounds starting (or reaching) a server and listing
// its tools.
const DefaultConnectTimeout = 30 * time.Second

// serverNameRE: lower-case letters, digits, '-' and '_', starting with a
// letter or digit, with no "__" and no trailing '_' (so the first "__" of
// a tool name ends the server's name).
var serverNameRE = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]|_[a-z0-9-])*$`)

// ValidServerName reports whether name may name an MCP server.
func ValidServerName(name string) error {
	if len(name) == 0 || len(name) > MaxServerName || !serverNameRE.MatchString(name) {
		return fmt.Errorf("must be 1-%d lower-case letters, digits, '-' and single '_' (not at the end), got %q", MaxServerName, name)
	}
	return nil
}

// Validate checks one server's configuration (the registry's and the
// executor's check).
func Validate(s Config) error {
	if err := ValidServerName(s.GetName()); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	switch {
	case len(s.GetCommand()) > 0 && s.GetUrl() != "":
		return errors.New("set command or url, not both")
	case len(s.GetCommand()) == 0 && s.GetUrl() == "":
		return errors.New("set command (stdio) or url (streamable HTTP)")
	case len(s.GetCommand()) > MaxCommandArgs:
		return fmt.Errorf("command: more than %d arguments", MaxCommandArgs)
	case len(s.GetCommand()) > 0 && s.GetCommand()[0] == "":
		return errors.New("command: the program is empty")
	case len(s.GetEnv()) > MaxEnv:
		return fmt.Errorf("env: more than %d variables", MaxEnv)
	case s.GetUrl() != "" && len(s.GetEnv()) > 0:
		return errors.New("env: only for stdio servers")
	case len(s.GetUrl()) > MaxURL:
		return fmt.Errorf("url: longer than %d bytes", MaxURL)
	}
	for k := range s.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("env: bad variable name %q", k)
		}
	}
	if u := s.GetUrl(); u != "" {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("url: must be an http or https URL, got %q", u)
		}
	}
	return nil
}

// ToolName is the agentmesh name of server's tool: "<server>__<tool>",
// characters outside [a-zA-Z0-9_-] replaced by '_', capped at MaxToolName
// (a capped name ends with 8 hex digits of a hash of the full name, so
// names that differ only past the cap stay apart).
func ToolName(server, tool string) string {
	var b strings.Builder
	b.WriteString(server)
	b.WriteString(Sep)
	for _, r := range tool {
		if r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > MaxToolName {
		sum := sha256.Sum256([]byte(server + Sep + tool))
		name = name[:MaxToolName-9] + "_" + hex.EncodeToString(sum[:4])
	}
	return name
}

// ServerOf returns the server part of an MCP tool name ("fs" of
// "fs__read_file"), or false when name is not one.
func ServerOf(name string) (string, bool) {
	server, _, ok := strings.Cut(name, Sep)
	return server, ok && server != ""
}

// Compile parses a tool's JSON Schema and returns a check of arguments
// against it (the full schema: $ref, oneOf, patterns, formats as the
// validator knows them).
func Compile(schema json.RawMessage) (func(args json.RawMessage) error, error) {
	if len(schema) > MaxSchema {
		return nil, fmt.Errorf("schema larger than %d bytes", MaxSchema)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("schema does not parse: %w", err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return func(args json.RawMessage) error {
		dec := json.NewDecoder(bytes.NewReader(args))
		var v any
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("arguments are not JSON: %w", err)
		}
		if dec.More() {
			return errors.New("arguments are not one JSON value")
		}
		if _, ok := v.(map[string]any); !ok {
			return errors.New("arguments must be a JSON object")
		}
		if err := rs.Validate(v); err != nil {
			return fmt.Errorf("arguments do not match the tool's schema: %w", err)
		}
		return nil
	}, nil
}

// NewTool builds the agentmesh tool standing for an MCP tool: name is its
// agentmesh name (ToolName), schema the server's JSON Schema of its
// arguments; run may be nil (the process that checks calls is not the one
// that makes them).
func NewTool(srv Config, name, description string, schema json.RawMessage, runs tools.Where, run tools.Func) (tools.Tool, error) {
	check, err := Compile(schema)
	if err != nil {
		return tools.Tool{}, fmt.Errorf("tool %s: %w", name, err)
	}
	if len(description) > MaxDescription {
		description = description[:MaxDescription]
	}
	return tools.Tool{Spec: tools.Spec{
		Name:          name,
		Description:   description,
		Parameters:    schema,
		Category:      tools.CategoryMCP,
		Risk:          RiskExternal,
		Runs:          runs,
		NeedsApproval: srv.GetRequireApproval(),
		Validator:     check,
	}, Run: run}, nil
}

// Result is the result of a tools/call as the server sent it.
type Result struct {
	// Content holds the content blocks, each a JSON object with a "type".
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
	IsError           bool              `json:"isError,omitempty"`
}

// content is what Flatten reads of one content block.
type content struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Data        string `json:"data"` // base64 (image, audio)
	MIMEType    string `json:"mimeType"`
	URI         string `json:"uri"`
	Name        string `json:"name"`
	Description string `json:"description"`
	Resource    *struct {
		URI      string `json:"uri"`
		MIMEType string `json:"mimeType"`
		Text     string `json:"text"`
		Blob     string `json:"blob"` // base64
	} `json:"resource"`
}

// Flatten turns a tool result into the observation for the model: text
// parts joined by newlines, other content summarised; with no content, the
// structured content as JSON. isError is the server's isError.
func Flatten(res *Result) (text string, isError bool) {
	if res == nil {
		return "", false
	}
	var parts []string
	for _, raw := range res.Content {
		parts = append(parts, flattenContent(raw))
	}
	if len(parts) == 0 && len(res.StructuredContent) > 0 && !bytes.Equal(res.StructuredContent, []byte("null")) {
		var b bytes.Buffer
		if json.Compact(&b, res.StructuredContent) == nil {
			parts = append(parts, b.String())
		}
	}
	return strings.Join(parts, "\n"), res.IsError
}

// flattenContent is the observation's text for one content block.
func flattenContent(raw json.RawMessage) string {
	var c content
	if err := json.Unmarshal(raw, &c); err != nil {
		c = content{}
	}
	switch c.Type {
	case "text":
		return c.Text
	case "image", "audio":
		return fmt.Sprintf("[%s %s, %d bytes]", c.Type, orUnknown(c.MIMEType), decodedLen(c.Data))
	case "resource_link":
		s := "[resource link " + c.URI
		if c.Name != "" {
			s += " (" + c.Name + ")"
		}
		if c.Description != "" {
			s += ": " + c.Description
		}
		return s + "]"
	case "resource":
		r := c.Resource
		switch {
		case r == nil:
			return "[resource]"
		case r.Text != "":
			return fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text)
		default:
			return fmt.Sprintf("[resource %s, %s, %d bytes]", r.URI, orUnknown(r.MIMEType), decodedLen(r.Blob))
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.WriteString(`""`)
	}
	return fmt.Sprintf("[content %s]", b.String())
}

// decodedLen is the length of the bytes base64 s encodes (of s itself when
// it is not base64).
func decodedLen(s string) int {
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return len(b)
	}
	return len(s)
}

func orUnknown(s string) string {
	if s == "" {
		return "of unknown type"
	}
	return s
}

// Options say how to reach a server.
type Options struct {
	// Workspace is a stdio server's working directory and HOME; the string
	// "${WORKSPACE}" in its command and env is replaced by it.
	Workspace string
	// Runs says which process calls the tools (tools.InChild for stdio
	// servers the child starts, tools.InExecutor for HTTP ones).
	Runs tools.Where
	// Timeout bounds connecting and listing the tools
	// (DefaultConnectTimeout).
	Timeout time.Duration
}

// ToolInfo is what Server keeps of a tool the server lists.
type ToolInfo struct {
	Name        string          `json:"name"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Session is a client's connection to one server: what Server needs of
// it. The stdio client here is one; pkg/mcp/mcphttp's is the other.
type Session interface {
	// ListTools returns one page of the server's tools and the cursor of
	// the next page ("" after the last).
	ListTools(ctx context.Context, cursor string) ([]ToolInfo, string, error)
	// CallTool calls the server's tool name; meta, when not nil, is the
	// request's _meta.
	CallTool(ctx context.Context, name string, args json.RawMessage, meta map[string]any) (*Result, error)
	// Close ends the session (a stdio server is stopped).
	Close() error
}

// Dialer opens a session; stderr, when not nil, is what the server wrote
// to its stderr (shown with an error to start or list).
type Dialer func(ctx context.Context) (sess Session, stderr *tail.Buffer, err error)

// Server is a connected MCP server.
type Server struct {
	cfg     Config
	session Session
	tools   []tools.Tool
	// remote maps an agentmesh tool name to the server's name for it.
	remote map[string]string
	stderr *tail.Buffer
	once   sync.Once
}

// Connect starts a stdio server (cfg.command) and lists its tools. Its
// errors begin "mcp server <name>: ". (Streamable HTTP servers: see
// pkg/mcp/mcphttp.)
func Connect(ctx context.Context, cfg Config, opts Options) (*Server, error) {
	if len(cfg.GetCommand()) == 0 && cfg.GetUrl() != "" {
		return nil, fmt.Errorf("mcp server %s: %w", cfg.GetName(), ErrHTTPElsewhere)
	}
	return Open(ctx, cfg, opts, func(ctx context.Context) (Session, *tail.Buffer, error) {
		return startStdio(ctx, cfg, opts.Workspace)
	})
}

// ErrHTTPElsewhere: this package starts stdio servers only; the executor
// reaches streamable HTTP servers with pkg/mcp/mcphttp.
var ErrHTTPElsewhere = errors.New("a streamable HTTP server is reached with pkg/mcp/mcphttp")

// Open checks cfg, opens a session with dial and lists the server's tools,
// all within opts.Timeout. Its errors begin "mcp server <name>: ".
func Open(ctx context.Context, cfg Config, opts Options, dial Dialer) (*Server, error) {
	s, err := open(ctx, cfg, opts, dial)
	if err != nil {
		return nil, fmt.Errorf("mcp server %s: %w", cfg.GetName(), err)
	}
	return s, nil
}

func open(ctx context.Context, cfg Config, opts Options, dial Dialer) (*Server, error) {
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	s := &Server{cfg: cfg, remote: map[string]string{}}
	session, stderr, err := dial(ctx)
	s.stderr = stderr
	if err != nil {
		return nil, s.explain(ctx, "start", timeout, err)
	}
	s.session = session
	if err := s.list(ctx); err != nil {
		_ = s.Close()
		return nil, s.explain(ctx, "list tools", timeout, err)
	}
	return s, nil
}

// explain words a failure to start or list, with what the server wrote to
// its stderr.
func (s *Server) explain(ctx context.Context, what string, timeout time.Duration, err error) error {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %s", timeout)
	}
	err = fmt.Errorf("%s: %w", what, err)
	if s.stderr != nil {
		if t := strings.TrimSpace(s.stderr.String()); t != "" {
			err = fmt.Errorf("%w; its stderr: %s", err, t)
		}
	}
	return err
}

// list lists the server's tools, page by page, and makes them agentmesh
// tools.
func (s *Server) list(ctx context.Context) error {
	seen := map[string]string{}
	for cursor, first := "", true; first || cursor != ""; first = false {
		page, next, err := s.session.ListTools(ctx, cursor)
		if err != nil {
			return err
		}
		for _, t := range page {
			if err := s.add(t, seen); err != nil {
				return err
			}
		}
		if next == cursor {
			break // a server that repeats its cursor would loop forever
		}
		cursor = next
	}
	return nil
}

// add makes one listed tool an agentmesh tool.
func (s *Server) add(t ToolInfo, seen map[string]string) error {
	if t.Name == "" {
		return errors.New("a tool without a name")
	}
	if len(s.tools) == MaxTools {
		return fmt.Errorf("more than %d tools", MaxTools)
	}
	name := ToolName(s.cfg.GetName(), t.Name)
	if other, dup := seen[name]; dup {
		return fmt.Errorf("tools %q and %q both become %s", other, t.Name, name)
	}
	seen[name] = t.Name
	schema, err := normalSchema(t.InputSchema)
	if err != nil {
		return fmt.Errorf("tool %s: schema: %w", t.Name, err)
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	remote := t.Name
	tool, err := NewTool(s.cfg, name, desc, schema, "", func(ctx context.Context, env tools.Env, args json.RawMessage) (string, error) {
		out, isErr, err := s.CallKeyed(ctx, remote, args, env.IdempotencyKey)
		if err != nil {
			return "", err
		}
		if isErr {
			return "", toolError(out)
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	s.remote[name] = remote
	s.tools = append(s.tools, tool)
	return nil
}

// normalSchema is a tool's input schema as agentmesh keeps it: compact
// JSON with its keys sorted, {"type":"object"} when the server gave none.
func normalSchema(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// toolError is a result the server flagged isError; its text is the
// observation.
type toolError string

func (e toolError) Error() string {
	if e == "" {
		return "the tool reported an error"
	}
	return string(e)
}

// Tools returns the server's tools, named for agentmesh, with Runs set to
// runs.
func (s *Server) Tools(runs tools.Where) []tools.Tool {
	out := make([]tools.Tool, len(s.tools))
	for i, t := range s.tools {
		t.Runs = runs
		out[i] = t
	}
	return out
}

// Call calls the tool the agent knows as name (an agentmesh name) with
// arguments that passed its schema, and returns the flattened result.
func (s *Server) Call(ctx context.Context, name string, args json.RawMessage) (string, bool, error) {
	return s.CallKeyed(ctx, name, args, "")
}

// MetaIdempotencyKey is the key under the tools/call request's _meta that
// carries the call's idempotency key (stable per task and tool call), so a
// server with side effects can recognise a call it already ran: {"_meta":
// {"agentmesh/idempotency_key": "<task>:<call id>"}}.
const MetaIdempotencyKey = "agentmesh/idempotency_key"

// CallKeyed is Call with the call's idempotency key in the request's _meta
// (MetaIdempotencyKey); an empty key sends no _meta.
func (s *Server) CallKeyed(ctx context.Context, name string, args json.RawMessage, idempotencyKey string) (string, bool, error) {
	remote, ok := s.remote[name]
	if !ok {
		remote = name // a server-side name
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	var meta map[string]any
	if idempotencyKey != "" {
		meta = map[string]any{MetaIdempotencyKey: idempotencyKey}
	}
	res, err := s.session.CallTool(ctx, remote, args, meta)
	if err != nil {
		return "", false, fmt.Errorf("mcp server %s: %w", s.cfg.GetName(), err)
	}
	out, isErr := Flatten(res)
	return out, isErr, nil
}

// Close ends the session; a stdio server is told to stop (stdin closed),
// then terminated, then killed.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		if s.session != nil {
			err = s.session.Close()
		}
	})
	return err
}
