// Package app is the agentmesh binary: one subcommand per service
// (state, registry, scheduler, executor, router), `dev` that runs all of
// them over an embedded NATS server, the scripted model server, and the
// hidden `child` the executor re-executes itself as. The main in
// services/cmd/agentmesh only calls Main.
//
// Every flag has an environment variable (EnvVars); flags win.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/router"
	"github.com/agentmesh/agentmesh/services/router/ui"
	"github.com/agentmesh/agentmesh/services/stack"
	"github.com/nats-io/nats.go"
)

// Version is set at build time (-ldflags -X).
var Version = "dev"

const usage = `agentmesh — a distributed runtime for LLM agents

Usage:
  agentmesh dev               run everything in one process: embedded NATS, the
                              embedded store (or Postgres), the scripted model
                              unless a real one is configured, and all services
  agentmesh state             the system of record (Postgres or embedded store)
  agentmesh registry          the skill registry
  agentmesh scheduler         the scheduler
  agentmesh executor          an executor node
  agentmesh router            the gRPC API
  agentmesh scripted-model    the scripted OpenAI-compatible model server
                              (a testing and demo aid, not a language model)
  agentmesh bus init          write the bus identities (operator, accounts,
                              one creds file per service, the tap signer),
                              the NATS server's auth.conf and TLS files
  agentmesh audit             print the audit stream's records (every request
                              state and the registry handled), a JSON line each
  agentmesh version

Run 'agentmesh <command> -h' for the flags of a command. Every flag has an
environment variable (AGENTMESH_...); see the README's configuration table.
`

// Main runs the binary and returns its exit code.
func Main(args []string) int {
	child.RunIfChild()
	if len(args) < 1 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "child":
		return child.Main(os.Stdin, os.Stdout)
	case "version", "--version":
		fmt.Println("agentmesh", Version)
		return 0
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	case "dev":
		err = runDev(ctx, rest)
	case "state", "registry", "scheduler", "executor", "router":
		err = runService(ctx, cmd, rest)
	case "scripted-model":
		err = runScripted(ctx, rest)
	case "bus":
		err = runBus(rest)
	case "audit":
		err = runAudit(ctx, rest, os.Stdout)
	default:
		fmt.Fprintf(os.Stderr, "agentmesh: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(os.Stderr, "agentmesh %s: %v\n", cmd, err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentmesh %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

type usageError struct{ error }

// settings are the values of flags and environment variables.
type settings struct {
	cmd  string
	fs   *flag.FlagSet
	vals map[string]*string
	// read holds the variables this command read (TestEnvVarsAreRead
	// checks them against EnvVars).
	read map[string]bool
}

func newSettings(cmd string) *settings {
	s := &settings{cmd: cmd, fs: flag.NewFlagSet("agentmesh "+cmd, flag.ContinueOnError), vals: map[string]*string{}, read: map[string]bool{}}
	for _, e := range EnvVars() {
		if !e.readBy(cmd) {
			continue
		}
		def := e.Default
		if v, ok := os.LookupEnv(e.Name); ok {
			def = v
		}
		name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(e.Name, "AGENTMESH_"), "_", "-"))
		if strings.HasPrefix(e.Name, "OTEL_") {
			continue
		}
		s.vals[e.Name] = s.fs.String(name, def, e.Help+" ($"+e.Name+")")
	}
	return s
}

func (e Env) readBy(cmd string) bool {
	for _, c := range e.Commands {
		if c == "*" || c == cmd {
			return true
		}
	}
	return false
}

func (s *settings) parse(args []string) error {
	if err := s.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if s.fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", s.fs.Arg(0))}
	}
	return nil
}

// get is the settings as an envconf.Getter, the services' ConfigFromEnv
// read them through. AGENTMESH_MODEL_API_KEY falls back to OPENAI_API_KEY.
func (s *settings) get(name string) string {
	v := s.str(name)
	switch {
	case v == "" && name == "AGENTMESH_MODEL_API_KEY":
		v = os.Getenv("OPENAI_API_KEY")
	case v == "" && name == router.EnvHTTPListen && s.cmd == "dev":
		v = DefaultDevHTTPListen // dev serves REST unless told "off"
	case v == "" && name == executor.EnvIsolation && s.cmd == "dev":
		// dev runs as an ordinary user too: every wall the host allows.
		v = string(sandbox.BestEffort)
	}
	return v
}

// observe starts what every server command has besides its services: the
// logger, pprof (AGENTMESH_DEBUG_LISTEN), metrics (AGENTMESH_METRICS_LISTEN)
// and tracing (the OTEL_* variables: telemetry.Setup); stop ends them.
func (s *settings) observe(ctx context.Context, name string) (log *slog.Logger, stop func(), err error) {
	if log, err = s.logger(os.Stderr); err != nil {
		return nil, nil, err
	}
	s.debugServer(log)
	closeMetrics, err := s.metricsServer(ctx, log)
	if err != nil {
		return nil, nil, err
	}
	shutdown, err := telemetry.Setup(ctx, name)
	if err != nil {
		closeMetrics()
		return nil, nil, err
	}
	return log, func() { shutdown(); closeMetrics() }, nil
}

func (s *settings) str(name string) string {
	s.read[name] = true
	if p := s.vals[name]; p != nil {
		return strings.TrimSpace(*p)
	}
	return ""
}

// debugServer serves net/http/pprof on AGENTMESH_DEBUG_LISTEN, if set.
func (s *settings) debugServer(log *slog.Logger) {
	addr := s.str("AGENTMESH_DEBUG_LISTEN")
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		log.Info("debug server (pprof) listening", "addr", addr)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug server", "err", err)
		}
	}()
}

// metricsServer serves Prometheus metrics on AGENTMESH_METRICS_LISTEN, if
// set; the returned func stops it.
func (s *settings) metricsServer(ctx context.Context, log *slog.Logger) (func(), error) {
	addr := s.str("AGENTMESH_METRICS_LISTEN")
	if addr == "" {
		return func() {}, nil
	}
	srv, err := metrics.Listen(ctx, addr, log)
	if err != nil {
		return nil, usageError{fmt.Errorf("AGENTMESH_METRICS_LISTEN: %w", err)}
	}
	return func() { _ = srv.Close() }, nil
}

func (s *settings) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(s.str("AGENTMESH_LOG_LEVEL"))); err != nil {
		return nil, usageError{fmt.Errorf("AGENTMESH_LOG_LEVEL: %w", err)}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch s.str("AGENTMESH_LOG_FORMAT") {
	// A line logged with a context in a trace carries trace_id and span_id
	// (telemetry.LogHandler).
	case "json":
		return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, opts))), nil
	case "text", "":
		return slog.New(telemetry.LogHandler(slog.NewTextHandler(w, opts))), nil
	default:
		return nil, usageError{fmt.Errorf("AGENTMESH_LOG_FORMAT: want text or json, got %q", s.str("AGENTMESH_LOG_FORMAT"))}
	}
}

// DefaultDevHTTPListen is where dev serves the HTTP API unless told.
const DefaultDevHTTPListen = "127.0.0.1:7480"

func loadScript(path string) (*scriptedmodel.Script, error) {
	if path == "" {
		return scriptedmodel.DefaultScript(), nil
	}
	return scriptedmodel.LoadScript(path)
}

func runDev(ctx context.Context, args []string) error { return runDevTo(ctx, args, os.Stderr) }

// runDevTo is runDev writing its start-up banner to w: every service of the
// table over an embedded NATS server (stack.New).
func runDevTo(ctx context.Context, args []string, w io.Writer) error {
	s := newSettings("dev")
	if err := s.parse(args); err != nil {
		return err
	}
	return s.runDev(ctx, w)
}

// runDev runs dev with the parsed settings.
func (s *settings) runDev(ctx context.Context, w io.Writer) error {
	log, stop, err := s.observe(ctx, "dev")
	if err != nil {
		return err
	}
	defer stop()
	cfg, closeTools, err := s.stackConfig(ctx)
	if err != nil {
		return err
	}
	defer closeTools()
	cfg.Log = log
	taps, err := s.devConfig(&cfg, log)
	if err != nil {
		return err
	}
	uiCfg, err := s.dashboardConfig()
	if err != nil {
		return err
	}
	st, err := stack.New(ctx, cfg)
	if err != nil {
		return err
	}
	closeDoors, err := mountDoors(st, log)
	if err != nil {
		st.Close()
		return err
	}
	defer closeDoors()
	dash, err := mountDashboard(st.Router(), uiCfg, cfg.Router.TLSCert != "", true, log)
	if err != nil {
		st.Close()
		return err
	}
	storeKind := "embedded JetStream store in " + filepath.Dir(cfg.DataDir)
	if cfg.PostgresURL != "" {
		storeKind = "Postgres"
	}
	model := cfg.Executor.Model.BaseURL
	if model == "" {
		model = "SCRIPTED model at " + st.ModelURL() + " (a demo aid, not a language model; set AGENTMESH_MODEL_BASE_URL for a real one)"
	}
	log.Info("agentmesh dev is up",
		"grpc", st.Addr(), "http", st.HTTPAddr(), "nats", st.NATSURL(), "store", storeKind, "model", model, "version", Version)
	fmt.Fprintf(w, "\nagentmesh dev: gRPC API on %s, NATS on %s\n  try: amctl submit --wait \"hello\"\n", st.Addr(), st.NATSURL())
	if h := st.HTTPAddr(); h != "" {
		fmt.Fprintf(w, "agentmesh dev: REST API and SSE on http://%s/v1/ (OpenAPI: /v1/openapi.json)\n  try: curl -s -X POST http://%s/v1/tasks -d '{\"input\": \"hello\"}'\n", h, h)
		fmt.Fprintf(w, "agentmesh dev: MCP server on http://%s/mcp, A2A on http://%s/a2a (agent card: /.well-known/agent-card.json)\n", h, h)
	}
	if dash != "" {
		fmt.Fprintf(w, "agentmesh dev: dashboard on %s\n  sign in with %s\n", dash, devSignIn(cfg.Router))
	}
	printTaps(w, st.NATSURL(), cfg.Auth, taps)
	return st.Run(ctx)
}

// devConfig adds dev's own settings to cfg: the data directory and the bus
// identities in it (with a tap credential per org), the embedded server's
// loopback listener, the scripted model's script and the seeds. It returns
// the taps' paths by org.
func (s *settings) devConfig(cfg *stack.Config, log *slog.Logger) (map[string]string, error) {
	script, err := loadScript(s.str("AGENTMESH_SCRIPT"))
	if err != nil {
		return nil, err
	}
	dataDir, err := filepath.Abs(s.str("AGENTMESH_DATA_DIR"))
	if err != nil {
		return nil, err
	}
	auth, taps, err := devAuth(dataDir, cfg.Prefix, cfg.Router, log)
	if err != nil {
		return nil, err
	}
	cfg.Auth, cfg.DataDir, cfg.Script = auth, filepath.Join(dataDir, "nats"), script
	cfg.SeedSkills, cfg.SeedAgents = stack.DefaultSkills(), []*agentmeshv1.Agent{stack.DefaultAgent()}
	cfg.NATSHost, cfg.NATSPort = "127.0.0.1", -1
	if l := s.str("AGENTMESH_NATS_LISTEN"); l != "off" {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			return nil, usageError{fmt.Errorf("AGENTMESH_NATS_LISTEN: %w", err)}
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, usageError{fmt.Errorf("AGENTMESH_NATS_LISTEN: bad port %q", port)}
		}
		cfg.NATSHost, cfg.NATSPort = host, p
	}
	return taps, nil
}

func runScripted(ctx context.Context, args []string) error {
	s := newSettings("scripted-model")
	if err := s.parse(args); err != nil {
		return err
	}
	log, err := s.logger(os.Stderr)
	if err != nil {
		return err
	}
	script, err := loadScript(s.str("AGENTMESH_SCRIPT"))
	if err != nil {
		return err
	}
	srv := scriptedmodel.New(script)
	url, err := srv.Start(s.str("AGENTMESH_SCRIPTED_LISTEN"))
	if err != nil {
		return err
	}
	log.Warn("SCRIPTED model server: a testing and demo aid that replays a script, not a language model", "url", url)
	<-ctx.Done()
	srv.Close()
	return nil
}

// runService runs one service of the table (stack.NewService) against the
// bus at AGENTMESH_NATS_URL, as its own identity.
func runService(ctx context.Context, name string, args []string) error {
	s := newSettings(name)
	if err := s.parse(args); err != nil {
		return err
	}
	return s.runService(ctx)
}

// runService runs the service s.cmd with the parsed settings.
func (s *settings) runService(ctx context.Context) error {
	name := s.cmd
	log, stop, err := s.observe(ctx, name)
	if err != nil {
		return err
	}
	defer stop()
	// Read the whole configuration before connecting, so a bad setting is
	// reported at once rather than after waiting for the bus.
	cfg, closeTools, err := s.stackConfig(ctx, name)
	if err != nil {
		return err
	}
	defer closeTools()
	var uiCfg ui.Config
	if name == subjects.ServiceRouter {
		if uiCfg, err = s.dashboardConfig(); err != nil {
			return err
		}
	}
	creds, err := s.busCreds(name, log)
	if err != nil {
		return err
	}
	if name == subjects.ServiceState {
		if cfg.State.Taps, err = s.tapSigner(creds.raw); err != nil {
			return err
		}
	}
	cfg.Log, cfg.Dial = log, s.dialer(creds, log)
	st, err := stack.NewService(ctx, name, cfg)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil // stopped while waiting for the bus
	case errors.Is(err, stack.ErrNoModel):
		return usageError{errors.New("AGENTMESH_MODEL_BASE_URL or AGENTMESH_MODELS is required (a model endpoint or the operator's model table, or `agentmesh scripted-model` for a demo)")}
	case err != nil:
		return err
	}
	closeDoors, err := mountDoors(st, log)
	if err != nil {
		st.Close()
		return err
	}
	defer closeDoors()
	if name == subjects.ServiceRouter {
		dash, err := mountDashboard(st.Router(), uiCfg, cfg.Router.TLSCert != "", false, log)
		if err != nil {
			st.Close()
			return err
		}
		if dash != "" {
			log.Info("router serving the dashboard", "url", dash)
		}
	}
	log.Info("agentmesh "+name+" started", "nats", st.NATSURL(), "http", st.HTTPAddr(), "version", Version)
	return st.Run(ctx)
}

// stackConfig reads the configuration of the named services of the table
// (none: all of them, as dev) and builds the executor's privileged tools;
// the returned func closes them.
func (s *settings) stackConfig(ctx context.Context, services ...string) (stack.Config, func(), error) {
	cfg, err := stack.ConfigFromEnv(s.get, services...)
	if err != nil {
		return stack.Config{}, nil, usageError{err}
	}
	cfg.Router.Version = Version
	closeTools := func() {}
	if len(services) == 0 || slices.Contains(services, subjects.ServiceExecutor) {
		if closeTools, err = s.privileged(ctx, &cfg.Executor); err != nil {
			return stack.Config{}, nil, err
		}
	}
	return cfg, closeTools, nil
}

// dialer connects a service to AGENTMESH_NATS_URL with creds and waits,
// bounded by ctx, for the first connection, so that its New can create
// streams.
func (s *settings) dialer(creds serviceCreds, log *slog.Logger) func(context.Context, string) (*nats.Conn, error) {
	url := s.str("AGENTMESH_NATS_URL")
	return func(ctx context.Context, service string) (*nats.Conn, error) {
		opts := append([]nats.Option{nats.Name("agentmesh-" + service), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
			nats.ReconnectWait(time.Second)}, creds.opts...)
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
		}
		if !nc.IsConnected() {
			log.Warn("waiting for NATS", "url", url)
		}
		for !nc.IsConnected() {
			if !backoff.Sleep(ctx, 200*time.Millisecond) {
				nc.Close()
				return nil, ctx.Err()
			}
		}
		return nc, nil
	}
}
