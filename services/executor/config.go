package executor

// The executor's configuration in one place: the Config struct, its
// defaults (withDefaults, applied by New), its validation, and
// ConfigFromEnv, which reads every AGENTMESH_* variable the executor reads
// (their declarations and docs are services/app.EnvVars). A bad value
// refuses the start with an error that names the variable.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/modeltable"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/executor/spawner"
	"github.com/agentmesh/agentmesh/services/executor/sqltool"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures an executor. Zero values take the defaults named.
type Config struct {
	// Prefix of every subject ("am").
	Prefix string
	// Node names this executor in heartbeats and task records; the host
	// name by default (dots become dashes: it is a subject token).
	Node string
	// Capacity is how many tasks run at once (32).
	Capacity int
	// ChildCommand runs an agent child. Default: the agentmesh-agent binary
	// next to this executable when there is one (it starts about twice as
	// fast: it links only the agent loop), else [this executable, "child"].
	ChildCommand []string
	// Model is the default model, the operator's model table and the
	// bounds of every model call; an agent's own settings override the
	// default model. Model.Limiter, when nil, is the cluster's: the rate
	// limits in a KV bucket every executor shares (package ratelimit).
	Model llm.Config
	// LimitWindow is the model rate limits' minute (time.Minute; tests
	// shorten it).
	LimitWindow time.Duration
	// Embedding is the embedding model of the memory tools remember and
	// recall (AGENTMESH_EMBEDDING_*; memory.go).
	Embedding llm.EmbedConfig
	// WallTime bounds one attempt of a task (10m).
	WallTime time.Duration
	// MaxSteps bounds the model turns of a task whose agent sets none (16).
	MaxSteps int
	// AckWait is how long work stays ours without a sign of life (30s);
	// running tasks send in-progress every AckWait/3.
	AckWait time.Duration
	// HeartbeatInterval between executor heartbeats (5s). The scheduler
	// counts the node lost after 3 intervals without one.
	HeartbeatInterval time.Duration
	// SweepInterval is how often the executor removes the task cgroups
	// and staging directories of executor instances of its node that no
	// longer exist (1m; sandbox.Sweep). It sweeps at start too.
	SweepInterval time.Duration
	// Labels describe the node in its heartbeats (AGENTMESH_NODE_LABELS).
	Labels map[string]string
	// DrainGrace is how long a stopping executor (SIGTERM) lets its running
	// tasks finish before it hands the rest back to the queue (10s). It
	// takes no new work meanwhile and says so in its heartbeats.
	DrainGrace time.Duration
	// Streams tunes the bus streams this service ensures.
	Streams bus.StreamOptions
	// Sandbox isolates the agent children (the strict level by default; see
	// package sandbox). New probes the host and fails, naming what is
	// missing, when the level cannot be had.
	Sandbox sandbox.Config
	// Spawner says who starts the agent children: SpawnerForkServer (the
	// default: a small long-lived spawner process, see package spawner)
	// or SpawnerDirect (the executor forks them itself).
	Spawner string
	// AgentNice lowers the CPU priority of the spawner and so of every
	// agent child by this many nice steps below the executor's (0 to 19;
	// 0 = the executor's priority): when the CPU is short the agents
	// yield it to the executor and the services beside it. It applies to
	// SpawnerForkServer; with SpawnerDirect only the agents' cgroup
	// weight (Sandbox.CPUShares) applies.
	AgentNice int
	// WarmPool is how many idle warm agent children (started and
	// sandboxed ahead of time, each to serve exactly one task; see
	// warm.go) the executor keeps (AGENTMESH_WARM_POOL): 0 takes the
	// default, Capacity but at most DefaultWarmPoolMax; negative turns the
	// pool off. Idle warm children and running tasks together never
	// exceed Capacity.
	WarmPool int
	// ReleaseAfter is how long a model call runs before the child waiting
	// for it is ended, to be replaced by a fresh one when the answer comes
	// (release.go; AGENTMESH_RELEASE_AFTER): 0 takes DefaultReleaseAfter,
	// negative never releases.
	ReleaseAfter time.Duration
	// ReleaseAbove is how many children may wait for a model answer
	// before any is released (release.go; AGENTMESH_RELEASE_ABOVE): a
	// child whose call outlives ReleaseAfter is released only while more
	// than this many wait. 0 takes DefaultReleaseAbove, negative releases
	// every one.
	ReleaseAbove int
	// KeepAnswersAfter is how long a model call must have taken for the
	// executor to checkpoint its answer itself as soon as it has it —
	// handed to the child waiting for it, or while a child starts for it
	// (answer.go, first.go; AGENTMESH_KEEP_ANSWERS_AFTER) — rather than with the step
	// that follows it: 0 takes DefaultKeepAnswersAfter, KeepEveryAnswer
	// keeps every answer, negative none.
	KeepAnswersAfter time.Duration
	// ChildReuse lets a child serve the next task of the same org and
	// agent (reuse.go; AGENTMESH_CHILD_REUSE=agent). Off: one child per
	// task.
	ChildReuse bool
	// ToolSettings configure the tools this executor runs on the
	// children's behalf (web_fetch, sql_query); PrivilegedTools builds
	// Tools from them.
	ToolSettings ToolsConfig
	// Tools are the implementations of the tools this executor runs on the
	// children's behalf (tools.InExecutor), by name; a tool without one is
	// refused at the gate as not configured here.
	Tools map[string]ExecFunc
	// MCPClient connects to agents' HTTP MCP servers. Their URLs come from
	// agent definitions (API callers), so the default applies web_fetch's
	// address policy: private, loopback and link-local addresses refused
	// (webfetch.Fetcher.ServiceClient; allowlist with its Allow).
	MCPClient *http.Client
}

// Defaults.
const (
	DefaultCapacity          = 32
	DefaultWallTime          = 10 * time.Minute
	DefaultMaxSteps          = 16
	DefaultAckWait           = 30 * time.Second
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultDrainGrace        = 10 * time.Second
	DefaultSweepInterval     = time.Minute
	// MaxWaitInPlace bounds AGENTMESH_MODEL_WAIT_IN_PLACE: a longer wait
	// holds a slot a task waiting in the queue would not.
	MaxWaitInPlace = 10 * time.Minute
	// DefaultWarmPoolMax caps the default warm pool (Capacity, at most
	// this): an idle executor holds that many idle children (warm.go).
	DefaultWarmPoolMax = 64
	// DefaultReleaseAfter is how long a model call runs before its waiting
	// child is released, by default: longer than most tool-free turns of a
	// fast model, shorter than a slow model's turn (release.go).
	DefaultReleaseAfter = 2 * time.Second
	// DefaultReleaseAbove is how many children may wait for a model answer
	// before any is released, by default: ~160 MiB of waiting children.
	DefaultReleaseAbove = 64
	// DefaultKeepAnswersAfter is how long a model call must have taken for
	// its answer to be checkpointed as soon as the executor has it, by
	// default (answer.go, step 4: kept).
	DefaultKeepAnswersAfter = 100 * time.Millisecond
	// KeepEveryAnswer is Config.KeepAnswersAfter's value that keeps every
	// answer, however quick (AGENTMESH_KEEP_ANSWERS_AFTER=0).
	KeepEveryAnswer = time.Nanosecond
	// MaxAckPending of the shared executors consumer: work handed out and
	// not yet acked, across all executors.
	MaxAckPending = 1 << 16
)

// AgentBinary is the name of the dedicated child binary.
const AgentBinary = "agentmesh-agent"

// DefaultChildCommand returns the child command for an executor running
// as exe: AgentBinary beside it if present, else exe re-executed as
// "child".
func DefaultChildCommand(exe string) []string {
	if exe, err := filepath.EvalSymlinks(exe); err == nil {
		agent := filepath.Join(filepath.Dir(exe), AgentBinary)
		if fi, err := os.Stat(agent); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return []string{agent}
		}
	}
	return []string{exe, "child"}
}

// Who starts the agent children (Config.Spawner, AGENTMESH_SPAWNER).
const (
	// SpawnerForkServer: a small long-lived spawner process (package
	// spawner) forks them, so a spawn does not copy the executor's page
	// tables. The default.
	SpawnerForkServer = "fork-server"
	// SpawnerDirect: the executor forks them itself (every spawn copies
	// the whole executor's page tables). For comparison and as a fallback.
	SpawnerDirect = "direct"
)

// withDefaults returns cfg with its zero values defaulted, or why it is
// not valid.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return cfg, fmt.Errorf("node name: %w", err)
		}
		cfg.Node = strings.NewReplacer(".", "-", "*", "-", ">", "-", " ", "-").Replace(h)
	}
	if !subjects.ValidToken(cfg.Node) {
		return cfg, fmt.Errorf("node %q is not a valid subject token", cfg.Node)
	}
	mode, err := parseSpawner(cfg.Spawner)
	if err != nil {
		return cfg, err
	}
	cfg.Spawner = mode
	if cfg.AgentNice < 0 || cfg.AgentNice > spawner.MaxNice {
		return cfg, fmt.Errorf("agent nice %d: want 0 to %d", cfg.AgentNice, spawner.MaxNice)
	}
	if len(cfg.ChildCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("child command: %w", err)
		}
		cfg.ChildCommand = DefaultChildCommand(exe)
	}
	if cfg.MCPClient == nil {
		f, err := webfetch.New(webfetch.Config{})
		if err != nil {
			return cfg, err
		}
		cfg.MCPClient = f.ServiceClient()
	}
	cfg.MCPClient = limitMCPClient(cfg.MCPClient)
	positive(&cfg.Capacity, DefaultCapacity)
	positive(&cfg.MaxSteps, DefaultMaxSteps)
	positive(&cfg.WallTime, DefaultWallTime)
	positive(&cfg.AckWait, DefaultAckWait)
	positive(&cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	positive(&cfg.DrainGrace, DefaultDrainGrace)
	positive(&cfg.SweepInterval, DefaultSweepInterval)
	return cfg, nil
}

// positive sets *v to def unless it is above zero.
func positive[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// warmSize is the pool size cfg asks for (0: off).
func warmSize(cfg Config) int {
	switch {
	case cfg.WarmPool < 0:
		return 0
	case cfg.WarmPool == 0:
		return min(cfg.Capacity, DefaultWarmPoolMax)
	}
	return min(cfg.WarmPool, cfg.Capacity)
}

// releaseAfter is the delay cfg asks for (0: never release).
func releaseAfter(cfg Config) time.Duration {
	switch {
	case cfg.ReleaseAfter < 0:
		return 0
	case cfg.ReleaseAfter == 0:
		return DefaultReleaseAfter
	}
	return cfg.ReleaseAfter
}

// releaseAbove is how many waiting children cfg keeps (0: none).
func releaseAbove(cfg Config) int64 {
	switch {
	case cfg.ReleaseAbove < 0:
		return 0
	case cfg.ReleaseAbove == 0:
		return DefaultReleaseAbove
	}
	return int64(cfg.ReleaseAbove)
}

// keepAnswersAfter is how long a call must have taken for its answer to
// be kept at once (answer.go), and whether any is.
func keepAnswersAfter(cfg Config) (time.Duration, bool) {
	switch after := cfg.KeepAnswersAfter; {
	case after < 0:
		return 0, false
	case after == 0:
		return DefaultKeepAnswersAfter, true
	case after == KeepEveryAnswer:
		return 0, true
	default:
		return after, true
	}
}

// ConfigFromEnv reads the executor's configuration from its AGENTMESH_*
// variables, as get answers them (an unset one reads "": the default
// applies). The first bad value is an error that names its variable
// (envconf.Error). The key of the default model falls back to
// OPENAI_API_KEY in the process's environment, as OpenAI's SDKs do.
func ConfigFromEnv(get envconf.Getter) (Config, error) {
	r := envconf.New(get)
	cfg := Config{
		Node:         r.String("AGENTMESH_NODE"),
		Capacity:     nonNegative(r, "AGENTMESH_CAPACITY"),
		MaxSteps:     nonNegative(r, "AGENTMESH_MAX_STEPS"),
		WallTime:     nonNegativeDuration(r, "AGENTMESH_WALL_TIME"),
		AckWait:      nonNegativeDuration(r, "AGENTMESH_ACK_WAIT"),
		DrainGrace:   nonNegativeDuration(r, "AGENTMESH_DRAIN_GRACE"),
		Labels:       r.Pairs("AGENTMESH_NODE_LABELS"),
		AgentNice:    r.IntRange("AGENTMESH_AGENT_NICE", 0, spawner.MaxNice),
		ChildReuse:   r.Enum("AGENTMESH_CHILD_REUSE", "off", "agent") == "agent",
		Model:        modelFromEnv(r),
		Embedding:    embeddingFromEnv(r),
		Sandbox:      sandboxFromEnv(r),
		ToolSettings: toolsFromEnv(r),
	}
	cfg.Prefix, cfg.Streams = bus.ReadSettings(r)
	if cfg.Node != "" && !subjects.ValidToken(cfg.Node) {
		r.Fail("AGENTMESH_NODE", "want a subject token: no dots, spaces, '*' or '>'")
	}
	r.Parse("AGENTMESH_SPAWNER", func(v string) (err error) { cfg.Spawner, err = parseSpawner(v); return err })
	r.Parse("AGENTMESH_WARM_POOL", func(v string) (err error) { cfg.WarmPool, err = parseCount(v); return err })
	r.Parse("AGENTMESH_RELEASE_ABOVE", func(v string) (err error) { cfg.ReleaseAbove, err = parseCount(v); return err })
	r.Parse("AGENTMESH_RELEASE_AFTER", func(v string) (err error) { cfg.ReleaseAfter, err = parseReleaseAfter(v); return err })
	r.Parse("AGENTMESH_KEEP_ANSWERS_AFTER", func(v string) (err error) {
		cfg.KeepAnswersAfter, err = parseKeepAnswersAfter(v)
		return err
	})
	return cfg, r.Err()
}

// modelFromEnv reads the default model's settings, the operator's model
// table (its rate limits included) and the outbound policy of every model
// call.
func modelFromEnv(r *envconf.Reader) llm.Config {
	m := llm.Config{
		BaseURL:          r.String("AGENTMESH_MODEL_BASE_URL"),
		Provider:         r.Enum("AGENTMESH_MODEL_PROVIDER", modeltable.Providers...),
		APIKey:           r.String("AGENTMESH_MODEL_API_KEY"),
		Model:            r.String("AGENTMESH_MODEL"),
		Allow:            allowList(r, "AGENTMESH_MODEL_ALLOW"),
		MaxResponseBytes: r.Bytes("AGENTMESH_MODEL_MAX_BYTES"),
	}
	r.Parse("AGENTMESH_MODELS", func(v string) (err error) { m.Table, err = modeltable.Load(v); return err })
	if m.WaitInPlace = r.Duration("AGENTMESH_MODEL_WAIT_IN_PLACE"); m.WaitInPlace < 0 || m.WaitInPlace > MaxWaitInPlace {
		r.Failf("AGENTMESH_MODEL_WAIT_IN_PLACE", "want a duration from 0 (the default) to %s", MaxWaitInPlace)
	}
	if m.APIKey == "" {
		m.APIKey = os.Getenv("OPENAI_API_KEY")
	}
	r.Parse("AGENTMESH_MODEL_BASE_URL", checkHTTPURL)
	if r.String("AGENTMESH_MODEL_MAX_BYTES") != "" && m.MaxResponseBytes <= 0 {
		r.Fail("AGENTMESH_MODEL_MAX_BYTES", "want a positive size such as 16MiB")
	}
	r.Parse("AGENTMESH_PRICES", func(v string) (err error) { m.Prices, err = llm.ParsePrices(v); return err })
	return m
}

// EnvIsolation is the agent children's isolation level (sandbox.Level).
const EnvIsolation = "AGENTMESH_ISOLATION"

// sandboxFromEnv reads the agent children's sandbox. An unset
// AGENTMESH_ISOLATION is the strict level (agentmesh dev's getter answers
// best-effort for it).
func sandboxFromEnv(r *envconf.Reader) sandbox.Config {
	cfg := sandbox.Config{
		Node:          r.String("AGENTMESH_NODE"),
		Memory:        r.Bytes("AGENTMESH_TASK_MEMORY"),
		ToolMemory:    r.Bytes("AGENTMESH_TOOL_MEMORY"),
		Disk:          r.Bytes("AGENTMESH_TASK_DISK"),
		Pids:          nonNegative(r, "AGENTMESH_TASK_PIDS"),
		CPUShares:     int64(r.IntRange("AGENTMESH_AGENT_CPU_SHARES", sandbox.MinCPUShares, sandbox.MaxCPUShares)),
		ReadOnlyPaths: r.List("AGENTMESH_SANDBOX_READ_PATHS"),
	}
	r.Parse(EnvIsolation, func(v string) (err error) { cfg.Level, err = sandbox.ParseLevel(v); return err })
	for _, p := range cfg.ReadOnlyPaths {
		if !filepath.IsAbs(p) {
			r.Failf("AGENTMESH_SANDBOX_READ_PATHS", "%q is not an absolute path", p)
		}
	}
	if cfg.Level == "" {
		cfg.Level = sandbox.Strict
	}
	if cfg.CPU = r.Float("AGENTMESH_TASK_CPU"); r.String("AGENTMESH_TASK_CPU") != "" && (cfg.CPU < 0.01 || cfg.CPU > 1024) {
		r.Fail("AGENTMESH_TASK_CPU", "want a number of cores from 0.01 to 1024, e.g. 0.5")
	}
	r.Parse("AGENTMESH_SANDBOX_UIDS", func(v string) (err error) { cfg.UIDs, err = sandbox.ParseIDRange(v); return err })
	cfg.CgroupPool = sandbox.DefaultCgroupPool
	if r.String("AGENTMESH_SANDBOX_CGROUP_POOL") != "" {
		cfg.CgroupPool = r.IntRange("AGENTMESH_SANDBOX_CGROUP_POOL", 0, 1024)
	}
	return cfg
}

// toolsFromEnv reads web_fetch's and sql_query's settings.
func toolsFromEnv(r *envconf.Reader) ToolsConfig {
	var cfg ToolsConfig
	cfg.WebFetch.Allow = allowList(r, "AGENTMESH_WEB_FETCH_ALLOW")
	r.Parse("AGENTMESH_WEB_FETCH_MAX_BYTES", func(v string) (err error) {
		if cfg.WebFetch.MaxBytes, err = strconv.ParseInt(v, 10, 64); err != nil || cfg.WebFetch.MaxBytes <= 0 {
			return errors.New("want a positive number of bytes")
		}
		return nil
	})
	cfg.SQL.URL = r.String("AGENTMESH_SQL_URL")
	r.Parse("AGENTMESH_SQL_URL", func(v string) error {
		if _, err := pgxpool.ParseConfig(v); err != nil {
			return errors.New("want a Postgres URL (postgres://user@host/db) or key=value connection string")
		}
		return nil
	})
	cfg.SQL.Policy = sqltool.PolicyApprove
	if r.Enum("AGENTMESH_SQL_POLICY", "approve", "refuse") == "refuse" {
		cfg.SQL.Policy = sqltool.PolicyRefuse
	}
	cfg.SQL.ReadWrite = r.Bool("AGENTMESH_SQL_READ_WRITE")
	cfg.SQL.AllowPrivilegedRole = r.Bool("AGENTMESH_SQL_ALLOW_PRIVILEGED_ROLE")
	if n := r.Bytes("AGENTMESH_SQL_MAX_ROW_BYTES"); n > 0 && n <= 1<<30 {
		cfg.SQL.MaxRowBytes = int(n)
	} else if r.String("AGENTMESH_SQL_MAX_ROW_BYTES") != "" {
		r.Fail("AGENTMESH_SQL_MAX_ROW_BYTES", "want a size from 1 byte to 1GiB such as 1MiB")
	}
	return cfg
}

// checkHTTPURL refuses what is not an http(s) URL with a host.
func checkHTTPURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http(s) URL such as https://api.openai.com/v1")
	}
	return nil
}

// allowList reads a comma-separated allowlist of hosts, host:ports,
// addresses or CIDRs (webfetch.Config.Allow), each entry checked.
func allowList(r *envconf.Reader, name string) []string {
	list := r.List(name)
	if len(list) > 0 {
		r.Parse(name, func(string) error { _, err := webfetch.New(webfetch.Config{Allow: list}); return err })
	}
	return list
}

// nonNegative reads a count; a negative one is refused.
func nonNegative(r *envconf.Reader, name string) int {
	n := r.Int(name)
	if n < 0 {
		r.Fail(name, "want a whole number, 0 or more (0: the default)")
	}
	return n
}

// nonNegativeDuration reads a duration; a negative one is refused.
func nonNegativeDuration(r *envconf.Reader, name string) time.Duration {
	d := r.Duration(name)
	if d < 0 {
		r.Fail(name, "want a duration, 0 or more (0: the default)")
	}
	return d
}

// parseSpawner parses AGENTMESH_SPAWNER: "fork-server" or "direct" (""
// is fork-server).
func parseSpawner(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", SpawnerForkServer, "forkserver", "fork_server":
		return SpawnerForkServer, nil
	case SpawnerDirect:
		return SpawnerDirect, nil
	}
	return "", fmt.Errorf("spawner %q: want fork-server or direct", s)
}

// parseCount parses a count setting whose zero value means the default
// (AGENTMESH_WARM_POOL, AGENTMESH_RELEASE_ABOVE): "" is 0 (the default),
// "0" is -1 (off, or none), N ≥ 1 is N.
func parseCount(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, errors.New("want a whole number, 0 or more")
	}
	if n == 0 {
		return -1, nil
	}
	return n, nil
}

// parseReleaseAfter parses AGENTMESH_RELEASE_AFTER: "" is the default, "0"
// never releases, otherwise a duration of at least 10ms. It returns
// Config.ReleaseAfter's value (0 default, -1 off).
func parseReleaseAfter(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if s == "0" {
		return -1, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 10*time.Millisecond {
		return 0, errors.New("want a duration of at least 10ms (or 0 = never)")
	}
	return d, nil
}

// parseKeepAnswersAfter parses AGENTMESH_KEEP_ANSWERS_AFTER: "" is the
// default, "0" every answer, "off" none, otherwise a duration of at least
// 1ms. It returns Config.KeepAnswersAfter's value.
func parseKeepAnswersAfter(s string) (time.Duration, error) {
	switch s = strings.TrimSpace(s); s {
	case "":
		return 0, nil
	case "0":
		return KeepEveryAnswer, nil
	case "off":
		return -1, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Millisecond {
		return 0, errors.New("want a duration of at least 1ms, 0 (every answer) or off")
	}
	return d, nil
}
