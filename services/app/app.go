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
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/executor/spawner"
	"github.com/agentmesh/agentmesh/services/registry"
	"github.com/agentmesh/agentmesh/services/router"
	"github.com/agentmesh/agentmesh/services/router/rest"
	"github.com/agentmesh/agentmesh/services/scheduler"
	"github.com/agentmesh/agentmesh/services/stack"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/agentmesh/agentmesh/services/state/pgstore"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
}

func newSettings(cmd string) *settings {
	s := &settings{cmd: cmd, fs: flag.NewFlagSet("agentmesh "+cmd, flag.ContinueOnError), vals: map[string]*string{}}
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

func (s *settings) str(name string) string {
	if p := s.vals[name]; p != nil {
		return strings.TrimSpace(*p)
	}
	return ""
}

func (s *settings) int(name string) (int, error) {
	v := s.str(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, usageError{fmt.Errorf("%s: not a number: %q", name, v)}
	}
	return n, nil
}

func (s *settings) duration(name string) (time.Duration, error) {
	v := s.str(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, usageError{fmt.Errorf("%s: not a duration: %q", name, v)}
	}
	return d, nil
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
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	default:
		return nil, usageError{fmt.Errorf("AGENTMESH_LOG_FORMAT: want text or json, got %q", s.str("AGENTMESH_LOG_FORMAT"))}
	}
}

func (s *settings) streams() (bus.StreamOptions, error) {
	n, err := s.int("AGENTMESH_STREAM_REPLICAS")
	if err != nil {
		return bus.StreamOptions{}, err
	}
	if n < 0 || n > 5 {
		return bus.StreamOptions{}, usageError{fmt.Errorf("AGENTMESH_STREAM_REPLICAS: want 1 to 5, got %d", n)}
	}
	return bus.StreamOptions{Replicas: n}, nil
}

// ParseAPIKeys parses "key=org,key2=org2:role" (the router checks orgs
// and roles).
func ParseAPIKeys(v string) (map[string]string, error) {
	keys := map[string]string{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, org, ok := strings.Cut(part, "=")
		k, org = strings.TrimSpace(k), strings.TrimSpace(org)
		if !ok || k == "" || org == "" {
			return nil, fmt.Errorf("AGENTMESH_API_KEYS: want key=org pairs separated by commas, got %q", part)
		}
		if o, role, _ := strings.Cut(org, ":"); (o != "*" || role != string(router.RolePlatform)) && !router.ValidOrg(o) {
			return nil, fmt.Errorf("AGENTMESH_API_KEYS: org %q must match %s", o, router.OrgPattern)
		}
		keys[k] = org
	}
	return keys, nil
}

func (s *settings) executorConfig() (executor.Config, error) {
	capacity, err := s.int("AGENTMESH_CAPACITY")
	if err != nil {
		return executor.Config{}, err
	}
	wall, err := s.duration("AGENTMESH_WALL_TIME")
	if err != nil {
		return executor.Config{}, err
	}
	ackWait, err := s.duration("AGENTMESH_ACK_WAIT")
	if err != nil {
		return executor.Config{}, err
	}
	steps, err := s.int("AGENTMESH_MAX_STEPS")
	if err != nil {
		return executor.Config{}, err
	}
	prices, err := executor.ParsePrices(s.str("AGENTMESH_PRICES"))
	if err != nil {
		return executor.Config{}, usageError{fmt.Errorf("AGENTMESH_PRICES: %w", err)}
	}
	key := s.str("AGENTMESH_MODEL_API_KEY")
	if key == "" {
		key = os.Getenv("OPENAI_API_KEY")
	}
	sb, err := s.sandboxConfig()
	if err != nil {
		return executor.Config{}, err
	}
	outbound, err := s.modelOutbound()
	if err != nil {
		return executor.Config{}, err
	}
	labels, err := parseLabels(s.str("AGENTMESH_NODE_LABELS"))
	if err != nil {
		return executor.Config{}, usageError{fmt.Errorf("AGENTMESH_NODE_LABELS: %w", err)}
	}
	drain, err := s.duration("AGENTMESH_DRAIN_GRACE")
	if err != nil {
		return executor.Config{}, err
	}
	spawnMode, err := executor.ParseSpawner(s.str("AGENTMESH_SPAWNER"))
	if err != nil {
		return executor.Config{}, usageError{fmt.Errorf("AGENTMESH_SPAWNER: %w", err)}
	}
	warm, err := executor.ParseWarmPool(s.str("AGENTMESH_WARM_POOL"))
	if err != nil {
		return executor.Config{}, usageError{fmt.Errorf("AGENTMESH_WARM_POOL: %w", err)}
	}
	nice, err := s.int("AGENTMESH_AGENT_NICE")
	if err != nil {
		return executor.Config{}, err
	}
	if nice < 0 || nice > spawner.MaxNice {
		return executor.Config{}, usageError{fmt.Errorf("AGENTMESH_AGENT_NICE: want 0 to %d, got %d", spawner.MaxNice, nice)}
	}
	release, err := executor.ParseReleaseAfter(s.str("AGENTMESH_RELEASE_AFTER"))
	if err != nil {
		return executor.Config{}, usageError{fmt.Errorf("AGENTMESH_RELEASE_AFTER: %w", err)}
	}
	above, err := executor.ParseReleaseAbove(s.str("AGENTMESH_RELEASE_ABOVE"))
	if err != nil {
		return executor.Config{}, usageError{fmt.Errorf("AGENTMESH_RELEASE_ABOVE: %w", err)}
	}
	keep, err := executor.ParseKeepAnswersAfter(s.str("AGENTMESH_KEEP_ANSWERS_AFTER"))
	if err != nil {
		return executor.Config{}, usageError{fmt.Errorf("AGENTMESH_KEEP_ANSWERS_AFTER: %w", err)}
	}
	reuse, err := executor.ParseChildReuse(s.str("AGENTMESH_CHILD_REUSE"))
	if err != nil {
		return executor.Config{}, usageError{fmt.Errorf("AGENTMESH_CHILD_REUSE: %w", err)}
	}
	return executor.Config{
		WarmPool:         warm,
		ReleaseAfter:     release,
		ReleaseAbove:     above,
		KeepAnswersAfter: keep,
		ChildReuse:       reuse,
		Prefix:           s.str("AGENTMESH_PREFIX"),
		Node:             s.str("AGENTMESH_NODE"),
		Capacity:         capacity,
		Labels:           labels, DrainGrace: drain,
		WallTime:  wall,
		AckWait:   ackWait,
		MaxSteps:  steps,
		Sandbox:   sb,
		Spawner:   spawnMode,
		AgentNice: nice,
		Model: executor.ModelConfig{
			BaseURL: s.str("AGENTMESH_MODEL_BASE_URL"),
			APIKey:  key,
			Model:   s.str("AGENTMESH_MODEL"),
			Prices:  prices,

			Allow:            outbound.Allow,
			MaxResponseBytes: outbound.MaxResponseBytes,
		},
	}, nil
}

func (s *settings) routerConfig() (router.Config, error) {
	keys, err := ParseAPIKeys(s.str("AGENTMESH_API_KEYS"))
	if err != nil {
		return router.Config{}, usageError{err}
	}
	cfg := router.Config{
		Prefix: s.str("AGENTMESH_PREFIX"), Listen: s.str("AGENTMESH_LISTEN"), APIKeys: keys,
		KeysFile: s.str("AGENTMESH_API_KEYS_FILE"),
		TLSCert:  s.str("AGENTMESH_TLS_CERT"), TLSKey: s.str("AGENTMESH_TLS_KEY"), TLSClientCA: s.str("AGENTMESH_TLS_CLIENT_CA"),
	}
	if cfg.MaxConnections, err = s.int("AGENTMESH_MAX_CONNECTIONS"); err != nil {
		return router.Config{}, err
	}
	if cfg.MaxWatchesPerOrg, err = s.int("AGENTMESH_MAX_WATCHES_PER_ORG"); err != nil {
		return router.Config{}, err
	}
	if cfg.AuthTimeout, err = s.duration("AGENTMESH_AUTH_TIMEOUT"); err != nil {
		return router.Config{}, err
	}
	rate, err := strconv.ParseFloat(s.str("AGENTMESH_ORG_RATE"), 64)
	if err != nil || math.IsNaN(rate) || math.IsInf(rate, 0) || rate == 0 || rate > 1e6 {
		return router.Config{}, usageError{fmt.Errorf("AGENTMESH_ORG_RATE: want requests per second (a positive number up to 1000000, or -1 for unlimited), got %q", s.str("AGENTMESH_ORG_RATE"))}
	}
	cfg.OrgRate = rate
	if cfg.HTTPListen, err = s.httpListen(); err != nil {
		return router.Config{}, err
	}
	if cfg.HTTPCORSOrigins, err = rest.ParseCORSOrigins(s.str("AGENTMESH_HTTP_CORS_ORIGINS")); err != nil {
		return router.Config{}, usageError{fmt.Errorf("AGENTMESH_HTTP_CORS_ORIGINS: %w", err)}
	}
	cfg.Version = Version
	return cfg, nil
}

// DefaultDevHTTPListen is where dev serves the HTTP API unless told.
const DefaultDevHTTPListen = "127.0.0.1:7480"

// httpListen reads AGENTMESH_HTTP_LISTEN: a host:port; empty is dev's
// default and no listener for router; "off" is none.
func (s *settings) httpListen() (string, error) {
	v := s.str("AGENTMESH_HTTP_LISTEN")
	switch {
	case v == "off":
		return "", nil
	case v == "" && s.cmd == "dev":
		return DefaultDevHTTPListen, nil
	case v == "":
		return "", nil
	}
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		return "", usageError{fmt.Errorf("AGENTMESH_HTTP_LISTEN: want host:port (e.g. 127.0.0.1:7480) or off, got %q", v)}
	}
	return v, nil
}

func loadScript(path string) (*scriptedmodel.Script, error) {
	if path == "" {
		return scriptedmodel.DefaultScript(), nil
	}
	return scriptedmodel.LoadScript(path)
}

func runDev(ctx context.Context, args []string) error { return runDevTo(ctx, args, os.Stderr) }

// runDevTo is runDev writing its start-up banner to w.
func runDevTo(ctx context.Context, args []string, w io.Writer) error {
	s := newSettings("dev")
	if err := s.parse(args); err != nil {
		return err
	}
	log, err := s.logger(os.Stderr)
	if err != nil {
		return err
	}
	s.debugServer(log)
	closeMetrics, err := s.metricsServer(ctx, log)
	if err != nil {
		return err
	}
	defer closeMetrics()
	retention, err := s.duration("AGENTMESH_RETENTION")
	if err != nil {
		return err
	}
	shutdown, err := telemetry.Setup(ctx, "dev")
	if err != nil {
		return err
	}
	defer shutdown()
	streams, err := s.streams()
	if err != nil {
		return err
	}
	exCfg, err := s.executorConfig()
	if err != nil {
		return err
	}
	closeTools, err := s.privileged(ctx, &exCfg)
	if err != nil {
		return err
	}
	defer closeTools()
	rCfg, err := s.routerConfig()
	if err != nil {
		return err
	}
	uiCfg, err := s.dashboardConfig()
	if err != nil {
		return err
	}
	script, err := loadScript(s.str("AGENTMESH_SCRIPT"))
	if err != nil {
		return err
	}
	schedCfg, err := s.schedulerConfig()
	if err != nil {
		return err
	}
	regCfg, err := s.registryConfig()
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(s.str("AGENTMESH_DATA_DIR"))
	if err != nil {
		return err
	}
	auth, taps, err := devAuth(dataDir, s.str("AGENTMESH_PREFIX"), rCfg, log)
	if err != nil {
		return err
	}
	cfg := stack.Config{
		Auth:   auth,
		Prefix: s.str("AGENTMESH_PREFIX"), DataDir: filepath.Join(dataDir, "nats"),
		PostgresURL: s.str("AGENTMESH_POSTGRES_URL"),
		Router:      rCfg, Executor: exCfg, Script: script, Streams: streams, Log: log,
		Scheduler:  schedCfg,
		Registry:   regCfg,
		NATSPort:   -1,
		SeedSkills: stack.DefaultSkills(),
		SeedAgents: []*agentmeshv1.Agent{stack.DefaultAgent()},
		State:      state.Config{Retention: retention},
	}
	if l := s.str("AGENTMESH_NATS_LISTEN"); l != "off" {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			return usageError{fmt.Errorf("AGENTMESH_NATS_LISTEN: %w", err)}
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return usageError{fmt.Errorf("AGENTMESH_NATS_LISTEN: bad port %q", port)}
		}
		cfg.NATSHost, cfg.NATSPort = host, p
	} else {
		cfg.NATSHost, cfg.NATSPort = "127.0.0.1", -1
	}
	st, err := stack.New(ctx, cfg)
	if err != nil {
		return err
	}
	storeKind := "embedded JetStream store in " + dataDir
	if cfg.PostgresURL != "" {
		storeKind = "Postgres"
	}
	model := exCfg.Model.BaseURL
	if model == "" {
		model = "SCRIPTED model at " + st.ModelURL() + " (a demo aid, not a language model; set AGENTMESH_MODEL_BASE_URL for a real one)"
	}
	log.Info("agentmesh dev is up",
		"grpc", st.Addr(), "http", st.HTTPAddr(), "nats", st.NATSURL(), "store", storeKind, "model", model, "version", Version)
	fmt.Fprintf(w, "\nagentmesh dev: gRPC API on %s, NATS on %s\n  try: amctl submit --wait \"hello\"\n", st.Addr(), st.NATSURL())
	if h := st.HTTPAddr(); h != "" {
		fmt.Fprintf(w, "agentmesh dev: REST API and SSE on http://%s/v1/ (OpenAPI: /v1/openapi.json)\n  try: curl -s -X POST http://%s/v1/tasks -d '{\"input\": \"hello\"}'\n", h, h)
	}
	dash, err := mountDashboard(st.Router(), uiCfg, rCfg.TLSCert != "", true, log)
	if err != nil {
		st.Close()
		return err
	}
	if dash != "" {
		fmt.Fprintf(w, "agentmesh dev: dashboard on %s\n  sign in with %s\n", dash, devSignIn(rCfg))
	}
	printTaps(w, st.NATSURL(), auth, taps)
	return st.Run(ctx)
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

func runService(ctx context.Context, name string, args []string) error {
	s := newSettings(name)
	if err := s.parse(args); err != nil {
		return err
	}
	log, err := s.logger(os.Stderr)
	if err != nil {
		return err
	}
	s.debugServer(log)
	closeMetrics, err := s.metricsServer(ctx, log)
	if err != nil {
		return err
	}
	defer closeMetrics()
	shutdown, err := telemetry.Setup(ctx, name)
	if err != nil {
		return err
	}
	defer shutdown()
	streams, err := s.streams()
	if err != nil {
		return err
	}
	// Read the whole configuration before connecting, so a bad setting is
	// reported at once rather than after waiting for the bus.
	var exCfg executor.Config
	var rCfg router.Config
	switch name {
	case "executor":
		if exCfg, err = s.executorConfig(); err != nil {
			return err
		}
		closeTools, err := s.privileged(ctx, &exCfg)
		if err != nil {
			return err
		}
		defer closeTools()
		if exCfg.Model.BaseURL == "" {
			return usageError{errors.New("AGENTMESH_MODEL_BASE_URL is required (an OpenAI-compatible endpoint, or `agentmesh scripted-model` for a demo)")}
		}
		exCfg.Streams = streams
	case "router":
		if rCfg, err = s.routerConfig(); err != nil {
			return err
		}
	}
	prefix := s.str("AGENTMESH_PREFIX")
	names, err := subjects.New(prefix)
	if err != nil {
		return usageError{fmt.Errorf("AGENTMESH_PREFIX: %w", err)}
	}
	if name == "registry" {
		// Refuse bad match settings before anything connects.
		if _, err := s.registryConfig(); err != nil {
			return err
		}
	}
	opts := []nats.Option{nats.Name("agentmesh-" + name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(time.Second)}
	creds, err := s.busCreds(name, log)
	if err != nil {
		return err
	}
	opts = append(opts, creds.opts...)
	nc, err := nats.Connect(s.str("AGENTMESH_NATS_URL"), opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", s.str("AGENTMESH_NATS_URL"), err)
	}
	defer nc.Close()
	// Wait (bounded by ctx) for the first connection, so New can create streams.
	if !nc.IsConnected() {
		log.Warn("waiting for NATS", "url", s.str("AGENTMESH_NATS_URL"))
	}
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	var run func(context.Context) error
	switch name {
	case "state":
		var st store.Store
		if url := s.str("AGENTMESH_POSTGRES_URL"); url != "" {
			st, err = pgstore.Open(ctx, url)
		} else {
			log.Warn("no AGENTMESH_POSTGRES_URL: using the embedded JetStream store")
			var js jetstream.JetStream
			if js, err = jetstream.New(nc); err == nil {
				// JetStream may not be ready yet (a server starting, an
				// account being enabled): try again rather than exit.
				for try := 1; ; try++ {
					var kv *kvstore.Store
					kv, err = kvstore.Open(ctx, js, names, kvstore.Options{Replicas: streams.Replicas})
					if err == nil {
						st = kv
						break
					}
					if !kvstore.Unreachable(err) || ctx.Err() != nil {
						break
					}
					if try == 1 || try%10 == 0 {
						log.Warn("embedded store not ready; trying again", "err", err, "try", try)
					}
					select {
					case <-ctx.Done():
					case <-time.After(min(time.Duration(try)*100*time.Millisecond, 2*time.Second)):
					}
				}
			}
		}
		if err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		defer st.Close()
		taps, err := s.tapSigner(creds.raw)
		if err != nil {
			return err
		}
		retention, err := s.duration("AGENTMESH_RETENTION")
		if err != nil {
			return err
		}
		svc, err := state.New(ctx, state.Config{Prefix: prefix, Streams: streams, Taps: taps, Retention: retention}, state.Deps{NC: nc, Store: st, Log: log})
		if err != nil {
			return err
		}
		run = svc.Run
	case "registry":
		regCfg, err := s.registryConfig()
		if err != nil {
			return err
		}
		regCfg.Prefix, regCfg.Streams = prefix, streams
		svc, err := registry.New(ctx, regCfg, registry.Deps{NC: nc, Log: log})
		if err != nil {
			return err
		}
		run = svc.Run
	case "scheduler":
		schedCfg, err := s.schedulerConfig()
		if err != nil {
			return err
		}
		schedCfg.Prefix, schedCfg.Streams = prefix, streams
		svc, err := scheduler.New(ctx, schedCfg, scheduler.Deps{NC: nc, Log: log})
		if err != nil {
			return err
		}
		run = svc.Run
	case "executor":
		svc, err := executor.New(ctx, exCfg, executor.Deps{NC: nc, Log: log})
		if err != nil {
			return err
		}
		run = svc.Run
	case "router":
		uiCfg, err := s.dashboardConfig()
		if err != nil {
			return err
		}
		svc, err := router.New(ctx, rCfg, router.Deps{NC: nc, Log: log})
		if err != nil {
			return err
		}
		dash, err := mountDashboard(svc, uiCfg, rCfg.TLSCert != "", false, log)
		if err != nil {
			return err
		}
		if dash != "" {
			log.Info("router serving the dashboard", "url", dash)
		}
		log.Info("router serving gRPC", "addr", svc.Addr(), "http", svc.HTTPAddr())
		run = svc.Run
	}
	log.Info("agentmesh "+name+" started", "nats", nc.ConnectedUrlRedacted(), "version", Version)
	err = run(ctx)
	_ = nc.Drain()
	return err
}
