package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/grpcretry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Environment variables that set defaults of the global flags.
const (
	envServer = "AGENTMESH_SERVER"
	envAPIKey = "AGENTMESH_API_KEY"
)

const (
	defaultServer  = "127.0.0.1:7400"
	defaultTimeout = 30 * time.Second
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// cli holds one invocation's settings and connection.
type cli struct {
	stdout, stderr io.Writer

	server string
	apiKey string
	// TLS: useTLS (--tls), a CA bundle to trust (--ca) and a client
	// certificate for mutual TLS (--cert, --key). --ca or --cert imply --tls.
	useTLS            bool
	caFile            string
	certFile, keyFile string
	output            string
	timeout           time.Duration
	// timeoutSet: --timeout was given, so it bounds watches too.
	timeoutSet bool
	// context: the profile (--context, AGENTMESH_CONTEXT; profiles.go);
	// set: the flags given on the command line.
	context string
	set     map[string]bool
	// tokens: print streamed model output (TOKEN events) as it arrives;
	// midLine: the last thing printed was a token without a newline.
	tokens, midLine bool

	conn    *grpc.ClientConn
	tasks   agentmeshv1.TaskServiceClient
	agents  agentmeshv1.AgentServiceClient
	graph   agentmeshv1.TaskGraphServiceClient
	metrics agentmeshv1.MetricsServiceClient
}

// usageError is a mistake in the command line (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// taskEndedError reports a watched task that failed or was cancelled.
type taskEndedError struct{ msg string }

func (e *taskEndedError) Error() string { return e.msg }

// command is one amctl command.
type command struct {
	name    string
	summary string
	run     func(c *cli, ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"submit", "submit a task (and with --wait, follow it to its answer)", (*cli).submit},
		{"get", "show a task", (*cli).get},
		{"explain", "show why a task went to its agent (candidates, scores, weights)", (*cli).explain},
		{"list", "list tasks, newest first", (*cli).list},
		{"cancel", "cancel a task that has not finished", (*cli).cancel},
		{"cancel-tasks", "cancel every unfinished task matching a filter", (*cli).cancelTasks},
		{"update", "change a task's title, priority, tags, metadata or dependencies", (*cli).update},
		{"delete", "delete finished tasks and their history", (*cli).deleteCmd},
		{"submit-graph", "submit a graph of dependent tasks at once (all or none)", (*cli).submitGraph},
		{"metrics", "show your org's task metrics", (*cli).metricsCmd},
		{"watch", "follow a task's events until it ends", (*cli).watch},
		{"history", "show a task's recorded events", (*cli).history},
		{"tree", "show a task's tree of sub-tasks with their costs (and with --watch, follow it)", (*cli).tree},
		{"agents", "manage agents: create, list, get, versions, update, delete, match", (*cli).agentsCmd},
		{"skills", "manage the skill catalogue: create, list, get, update, delete", (*cli).skillsCmd},
		{"approvals", "list, approve or reject tool calls waiting for a person", (*cli).approvalsCmd},
		{"proposals", "list, show, approve or reject agents proposed for tasks no agent fits", (*cli).proposalsCmd},
		{"tools", "list the built-in tools", (*cli).toolsCmd},
		{"usage", "sum the tokens and cost of your org's tasks", (*cli).usage},
		{"taps", "create a subscribe-only bus credential for your org's events (admin)", (*cli).tapsCmd},
		{"schedules", "run tasks on a schedule: create, list, get, update, pause, resume, delete, trigger, runs", (*cli).schedulesCmd},
		{"webhooks", "send your org's events to HTTP endpoints: create, list, update, rotate, deliveries, redeliver", (*cli).webhooksCmd},
		{"keys", "manage API keys: create, list, revoke, rotate (admin)", (*cli).keysCmd},
		{"state", "read and write working state: get, set, delete, list", (*cli).stateCmd},
		{"memories", "list, show, delete or prune long-term memories", (*cli).memoriesCmd},
		{"threads", "list, show or delete threads (conversations)", (*cli).threadsCmd},
		{"mcp", "serve agentmesh as an MCP server on stdin/stdout (for desktop MCP clients)", (*cli).mcpCmd},
		{"contexts", "list the contexts (server, key, TLS files) of the config file", (*cli).contextsCmd},
		{"version", "show amctl's version and the server's", (*cli).versionCmd},
		{"completion", "print a shell completion script: bash, zsh or fish", (*cli).completion},
		{"help", "show help for amctl or a command", nil},
	}
}

// run is amctl: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr}
	top := flag.NewFlagSet("amctl", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	c.globalFlags(top)
	err := top.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.mainUsage(stdout)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "amctl: %v\nRun 'amctl help' for usage.\n", err)
		return exitUsage
	}
	c.noteFlags(top)
	rest := top.Args()
	if len(rest) == 0 {
		c.mainUsage(stderr)
		return exitUsage
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		return c.help(ctx, rest)
	}
	for _, cmd := range commands() {
		if cmd.name == name && cmd.run != nil {
			err := cmd.run(c, ctx, rest)
			if c.conn != nil {
				_ = c.conn.Close()
			}
			return c.report(err)
		}
	}
	fmt.Fprintf(stderr, "amctl: unknown command %q\nRun 'amctl help' for usage.\n", name)
	return exitUsage
}

func (c *cli) help(ctx context.Context, args []string) int {
	if len(args) == 0 {
		c.mainUsage(c.stdout)
		return exitOK
	}
	for _, cmd := range commands() {
		if cmd.name == args[0] && cmd.run != nil {
			return c.report(cmd.run(c, ctx, append(args[1:], "-h")))
		}
	}
	fmt.Fprintf(c.stderr, "amctl: unknown command %q\nRun 'amctl help' for usage.\n", args[0])
	return exitUsage
}

func (c *cli) mainUsage(w io.Writer) {
	fmt.Fprint(w, `amctl is the command line client of agentmesh.

Usage: amctl [global flags] COMMAND [flags] [args]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, cmd := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", cmd.name, cmd.summary)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, `
Global flags (also accepted after the command):
  --context NAME    a context of the config file: server, key, TLS files (env %s; see amctl contexts)
  --server ADDR     agentmesh gRPC address (env %s; default %s)
  --api-key KEY     API key (env %s)
  --tls             speak TLS to the server (system roots unless --ca)
  --ca FILE         PEM CA bundle to verify the server with (implies --tls)
  --cert FILE       client certificate (PEM) for mutual TLS, with --key (implies --tls)
  --key FILE        private key (PEM) of --cert
  -o table|json     output format of reads (default table)
  --timeout D       bound each call (default %s; watches wait unbounded unless set)

Run 'amctl COMMAND -h' for a command's flags. Flags and the environment win
over the context.
`, envContext, envServer, defaultServer, envAPIKey, defaultTimeout)
}

// globalFlags registers the global flags on fs.
func (c *cli) globalFlags(fs *flag.FlagSet) {
	server := os.Getenv(envServer)
	if server == "" {
		server = defaultServer
	}
	if c.server != "" {
		server = c.server // keep what the top level parsed
	}
	apiKey := os.Getenv(envAPIKey)
	if c.apiKey != "" {
		apiKey = c.apiKey
	}
	output := "table"
	if c.output != "" {
		output = c.output
	}
	timeout := defaultTimeout
	if c.timeout != 0 {
		timeout = c.timeout
	}
	ctxName := os.Getenv(envContext)
	if c.context != "" {
		ctxName = c.context
	}
	fs.StringVar(&c.context, "context", ctxName, "the config file's context to use (env "+envContext+")")
	fs.StringVar(&c.server, "server", server, "agentmesh gRPC address (env "+envServer+")")
	c.apiKey = apiKey
	fs.Var(secretValue{&c.apiKey}, "api-key", "API key (env "+envAPIKey+")")
	fs.BoolVar(&c.useTLS, "tls", c.useTLS, "speak TLS to the server")
	fs.StringVar(&c.caFile, "ca", c.caFile, "PEM CA bundle to verify the server with (implies --tls)")
	fs.StringVar(&c.certFile, "cert", c.certFile, "client certificate (PEM) for mutual TLS (implies --tls)")
	fs.StringVar(&c.keyFile, "key", c.keyFile, "private key (PEM) of --cert")
	fs.StringVar(&c.output, "o", output, "output format: table or json")
	fs.DurationVar(&c.timeout, "timeout", timeout, "bound each call")
}

// secretValue is a string flag whose value is never shown: a command's
// help prints each flag's default, and the API key's default comes from
// the environment.
type secretValue struct{ p *string }

func (v secretValue) Set(s string) error { *v.p = s; return nil }
func (v secretValue) String() string     { return "" }

// cmdFlags is a command's flag set and its help.
type cmdFlags struct {
	*flag.FlagSet
	help func()
}

// flags returns a flag set for command name with the global flags on it.
func (c *cli) flags(name, args, about string) *cmdFlags {
	fs := flag.NewFlagSet("amctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // errors are reported by report, help by parse
	c.globalFlags(fs)
	return &cmdFlags{FlagSet: fs, help: func() {
		fmt.Fprintf(c.stdout, "Usage: amctl %s %s\n\n%s\n\nFlags:\n", name, args, about)
		fs.SetOutput(c.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}}
}

// errHelp means help was printed; the command succeeds.
var errHelp = errors.New("help shown")

// parse parses flags and positional arguments in any order ("--" ends
// flags) and checks the output format.
func (c *cli) parse(fs *cmdFlags, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.help()
				return nil, errHelp
			}
			return nil, usagef("%s: %v", strings.TrimPrefix(fs.Name(), "amctl "), err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	c.noteFlags(fs.FlagSet)
	if !strings.Contains(fs.Name(), "submit") {
		pos = taskRefs(pos) // subtask://ID wherever an ID is (tree.go)
	}
	if c.output != "table" && c.output != "json" {
		return nil, usagef("-o: unknown output format %q (want table or json)", c.output)
	}
	if c.timeout < 0 {
		return nil, usagef("--timeout: must not be negative, got %s (0: no bound)", c.timeout)
	}
	return pos, nil
}

// noteFlags records the flags the command line gave (the context fills
// only the others; --timeout then bounds watches too).
func (c *cli) noteFlags(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		if c.set == nil {
			c.set = map[string]bool{}
		}
		c.set[f.Name] = true
		if f.Name == "timeout" {
			c.timeoutSet = true
		}
	})
}

// exactly checks the number of positional arguments.
func exactly(cmd string, pos []string, names ...string) error {
	if len(pos) != len(names) {
		return usagef("%s: want %s, got %d argument(s)", cmd, strings.Join(names, " "), len(pos))
	}
	return nil
}

// parseConnect parses args with fs, wants exactly the positional
// arguments names (cmd names the command in the error), and connects.
func (c *cli) parseConnect(fs *cmdFlags, args []string, cmd string, names ...string) ([]string, error) {
	pos, err := c.parse(fs, args)
	if err != nil {
		return nil, err
	}
	if err := exactly(cmd, pos, names...); err != nil {
		return nil, err
	}
	return pos, c.connect()
}

// connect opens the client connection (lazily: a bad server shows at the
// first call).
func (c *cli) connect() error {
	if c.conn != nil {
		return nil
	}
	if err := c.applyContext(); err != nil {
		return err
	}
	if c.server == "" {
		return usagef("--server: an address is required")
	}
	if err := checkServer(c.server); err != nil {
		return err
	}
	if strings.IndexFunc(c.apiKey, func(r rune) bool { return r < ' ' || r > '~' }) >= 0 {
		// Never printed: it is a secret, and one mistyped.
		return usagef("--api-key: the key holds a character that cannot be sent (a newline, a control or a non-ASCII character; from --api-key, %s or the context)", envAPIKey)
	}
	creds, err := c.transport()
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(c.server,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(apiKeyCreds(c.apiKey)),
		grpc.WithUserAgent("amctl"),
		// UNAVAILABLE (a service restarting, the database down) is retried
		// with backoff, bounded by the tries and by --timeout.
		grpc.WithChainUnaryInterceptor(grpcretry.Unary(grpcretry.Default)),
	)
	if err != nil {
		return fmt.Errorf("cannot reach agentmesh at %s: %v", c.server, err)
	}
	c.conn = conn
	c.tasks = agentmeshv1.NewTaskServiceClient(conn)
	c.agents = agentmeshv1.NewAgentServiceClient(conn)
	c.graph = agentmeshv1.NewTaskGraphServiceClient(conn)
	c.metrics = agentmeshv1.NewMetricsServiceClient(conn)
	return nil
}

// checkServer refuses a --server gRPC cannot dial as written, with what
// to write instead: a URL (gRPC wants HOST:PORT; https is --tls) or an
// address that is not HOST:PORT. gRPC targets (dns:///, unix:, ...) and a
// host without a port (443) pass.
func checkServer(addr string) error {
	if scheme, _, ok := strings.Cut(addr, "://"); ok {
		switch strings.ToLower(scheme) {
		case "http", "https", "grpc", "grpcs":
			return usagef("--server: want HOST:PORT (such as %s), not the URL %q (add --tls for a TLS server; from --server, %s or the context)", defaultServer, addr, envServer)
		}
		return nil
	}
	if strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix-abstract:") {
		return nil
	}
	var ae *net.AddrError
	if _, _, err := net.SplitHostPort(addr); err != nil && !(errors.As(err, &ae) && ae.Err == "missing port in address") {
		return usagef("--server: %q is not HOST:PORT: %v", addr, err)
	}
	return nil
}

// transport returns plaintext, or TLS when --tls, --ca or --cert ask.
func (c *cli) transport() (credentials.TransportCredentials, error) {
	if (c.certFile == "") != (c.keyFile == "") {
		return nil, usagef("--cert and --key go together")
	}
	if !c.useTLS && c.caFile == "" && c.certFile == "" {
		return insecure.NewCredentials(), nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca: %v", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca: %s holds no PEM certificate", c.caFile)
		}
	}
	if c.certFile != "" {
		cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(tc), nil
}

// apiKeyCreds sends the API key as a bearer token.
type apiKeyCreds string

func (k apiKeyCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if k == "" {
		return nil, nil
	}
	return map[string]string{"authorization": "Bearer " + string(k)}, nil
}

// RequireTransportSecurity is false: a router without TLS (development,
// loopback) still takes keys; use --tls for anything remote.
func (apiKeyCreds) RequireTransportSecurity() bool { return false }

// call returns a context bounded by --timeout for one unary call.
func (c *cli) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// report prints err as one line and returns the exit status.
func (c *cli) report(err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "amctl: %s\nRun 'amctl help' for usage.\n", ue.msg)
		return exitUsage
	}
	fmt.Fprintf(c.stderr, "amctl: %s\n", c.describe(err))
	return exitError
}

// describe words an error for a person, on one line.
func (c *cli) describe(err error) string {
	var te *taskEndedError
	if errors.As(err, &te) {
		return te.msg
	}
	st, ok := status.FromError(err)
	if !ok {
		return oneLine(err.Error())
	}
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		if isConnError(msg) {
			return fmt.Sprintf("cannot reach agentmesh at %s: %s", c.server, connDetail(msg))
		}
		return "agentmesh is unavailable: " + oneLine(msg)
	case codes.DeadlineExceeded:
		return fmt.Sprintf("no answer from agentmesh at %s within %s", c.server, c.timeout)
	case codes.Canceled:
		return "interrupted"
	case codes.Unauthenticated:
		return fmt.Sprintf("not authenticated: %s (set --api-key or %s)", oneLine(msg), envAPIKey)
	case codes.PermissionDenied:
		return "permission denied: " + oneLine(msg)
	case codes.ResourceExhausted:
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
				return fmt.Sprintf("%s (retry after %s)", oneLine(msg), ri.GetRetryDelay().AsDuration().Round(time.Millisecond))
			}
		}
	case codes.Unimplemented:
		return fmt.Sprintf("the server at %s does not serve this agentmesh API: %s", c.server, oneLine(msg))
	}
	return oneLine(msg)
}

func isConnError(msg string) bool {
	for _, s := range []string{"connection error", "transport: ", "name resolver error", "produced zero addresses", "dial "} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// connDetail trims gRPC's wrapping of a dial error.
func connDetail(msg string) string {
	if _, after, ok := strings.Cut(msg, `desc = "`); ok {
		msg = strings.TrimSuffix(after, `"`)
	}
	msg = strings.TrimPrefix(msg, "transport: ")
	msg = strings.TrimPrefix(msg, "Error while dialing: ")
	msg = strings.TrimPrefix(msg, "error while dialing: ")
	return oneLine(msg)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// printJSON writes m as protojson, one object (indented, or on one line).
// protojson's own spacing is deliberately unstable, so it is normalised.
func (c *cli) printJSON(m proto.Message, multiline bool) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if multiline {
		err = json.Indent(&buf, b, "", "  ")
	} else {
		err = json.Compact(&buf, b)
	}
	if err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = c.stdout.Write(buf.Bytes())
	return err
}

func (c *cli) json() bool { return c.output == "json" }

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
