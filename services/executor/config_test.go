package executor

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/envconf/envconftest"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/executor/sqltool"
)

// fromEnv reads the executor's configuration from vars alone.
func fromEnv(vars map[string]string) (Config, error) { return ConfigFromEnv(envconf.Map(vars)) }

// Every variable the executor reads refuses a bad value at start with an
// error that names it.
func TestConfigFromEnvRefusesBadValues(t *testing.T) {
	envconftest.Refused(t, ConfigFromEnv, []envconftest.Bad{
		{"AGENTMESH_PREFIX", "am.*"},
		{"AGENTMESH_NODE", "node.one"},
		{"AGENTMESH_CAPACITY", "lots"},
		{"AGENTMESH_CAPACITY", "-1"},
		{"AGENTMESH_MAX_STEPS", "many"},
		{"AGENTMESH_WALL_TIME", "10"},
		{"AGENTMESH_WALL_TIME", "-1m"},
		{"AGENTMESH_ACK_WAIT", "soon"},
		{"AGENTMESH_DRAIN_GRACE", "a while"},
		{"AGENTMESH_NODE_LABELS", "zone"},
		{"AGENTMESH_STREAM_REPLICAS", "7"},
		{"AGENTMESH_AGENT_NICE", "20"},
		{"AGENTMESH_AGENT_NICE", "-1"},
		{"AGENTMESH_AGENT_NICE", "low"},
		{"AGENTMESH_CHILD_REUSE", "org"},
		{"AGENTMESH_SPAWNER", "fork"},
		{"AGENTMESH_WARM_POOL", "-1"},
		{"AGENTMESH_RELEASE_ABOVE", "1.5"},
		{"AGENTMESH_RELEASE_AFTER", "5ms"},
		{"AGENTMESH_KEEP_ANSWERS_AFTER", "OFF"},
		{"AGENTMESH_MODEL_BASE_URL", "api.openai.com/v1"},
		{"AGENTMESH_MODEL_BASE_URL", "ftp://models/v1"},
		{"AGENTMESH_MODEL_ALLOW", "10.0.0.0/99"},
		{"AGENTMESH_MODEL_MAX_BYTES", "lots"},
		{"AGENTMESH_MODEL_MAX_BYTES", "0"},
		{"AGENTMESH_PRICES", "gpt-4o=cheap"},
		{"AGENTMESH_MODEL_PROVIDER", "cohere"},
		{"AGENTMESH_MODELS", `{"models": {"m": {"provider": "cohere", "base_url": "http://h/v1", "no_key": true}}}`},
		{"AGENTMESH_MODELS", `{"models": {"m": {"base_url": "http://h/v1"}}}`},
		{"AGENTMESH_MODELS", `{"models": {"m": {"api_key_env": "K"}}}`},
		{"AGENTMESH_MODELS", `{"models": {"m": {"base_url": "http://h/v1", "no_key": true, "limits": {"requests_per_minute": -5}}}}`},
		{"AGENTMESH_MODELS", "/no/such/models.yaml"},
		{"AGENTMESH_MODEL_WAIT_IN_PLACE", "-1s"},
		{"AGENTMESH_MODEL_WAIT_IN_PLACE", "1h"},
		{"AGENTMESH_ISOLATION", "loose"},
		{"AGENTMESH_TASK_MEMORY", "12X"},
		{"AGENTMESH_TOOL_MEMORY", "1.5G"},
		{"AGENTMESH_TASK_DISK", "MiB"},
		{"AGENTMESH_TASK_PIDS", "-1"},
		{"AGENTMESH_TASK_CPU", "0"},
		{"AGENTMESH_TASK_CPU", "2000"},
		{"AGENTMESH_AGENT_CPU_SHARES", "1"},
		{"AGENTMESH_AGENT_CPU_SHARES", "262145"},
		{"AGENTMESH_SANDBOX_UIDS", "100-50"},
		{"AGENTMESH_SANDBOX_READ_PATHS", "/opt/ok,opt/relative"},
		{"AGENTMESH_SANDBOX_CGROUP_POOL", "-1"},
		{"AGENTMESH_SANDBOX_CGROUP_POOL", "1025"},
		{"AGENTMESH_SANDBOX_CGROUP_POOL", "some"},
		{"AGENTMESH_WEB_FETCH_ALLOW", "999.1.1.1/8"},
		{"AGENTMESH_WEB_FETCH_MAX_BYTES", "50k"},
		{"AGENTMESH_SQL_URL", "postgres://[::1"},
		{"AGENTMESH_SQL_POLICY", "ask"},
		{"AGENTMESH_SQL_READ_WRITE", "perhaps"},
		{"AGENTMESH_SQL_ALLOW_PRIVILEGED_ROLE", "perhaps"},
		{"AGENTMESH_SQL_MAX_ROW_BYTES", "2G"},
	})
}

// Unset, every variable reads as its zero value (New applies the
// defaults); set, each reaches its field.
func TestConfigFromEnv(t *testing.T) {
	cfg, err := fromEnv(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Capacity != 0 || cfg.Spawner != "" || cfg.WarmPool != 0 || cfg.ChildReuse || cfg.Sandbox.Level != sandbox.Strict ||
		cfg.ToolSettings.SQL.Policy != sqltool.PolicyApprove || len(cfg.Labels) != 0 || len(cfg.Model.Prices) != 0 {
		t.Errorf("unset: %+v", cfg)
	}
	if cfg.Sandbox.CgroupPool != sandbox.DefaultCgroupPool {
		t.Errorf("unset: cgroup pool %d, want the default %d", cfg.Sandbox.CgroupPool, sandbox.DefaultCgroupPool)
	}
	if off, err := fromEnv(map[string]string{"AGENTMESH_SANDBOX_CGROUP_POOL": "0"}); err != nil || off.Sandbox.CgroupPool != 0 {
		t.Errorf("AGENTMESH_SANDBOX_CGROUP_POOL=0: cgroup pool %d (%v), want 0 (off)", off.Sandbox.CgroupPool, err)
	}
	cfg, err = fromEnv(map[string]string{
		"AGENTMESH_PREFIX": "xy", "AGENTMESH_NODE": "n1", "AGENTMESH_CAPACITY": "8", "AGENTMESH_MAX_STEPS": "4",
		"AGENTMESH_WALL_TIME": "1m", "AGENTMESH_ACK_WAIT": "9s", "AGENTMESH_DRAIN_GRACE": "3s",
		"AGENTMESH_NODE_LABELS": " zone=a , gpu=none,", "AGENTMESH_STREAM_REPLICAS": "3", "AGENTMESH_AGENT_NICE": "3",
		"AGENTMESH_SPAWNER": "direct", "AGENTMESH_MODEL_BASE_URL": "http://m/v1", "AGENTMESH_MODEL_API_KEY": "sk",
		"AGENTMESH_MODEL": "mini", "AGENTMESH_MODEL_ALLOW": " 127.0.0.1:11434 , ollama.lan ,", "AGENTMESH_MODEL_MAX_BYTES": "8MiB",
		"AGENTMESH_PRICES": "gpt-4o-mini=0.15/0.60,llama3.1=0/0", "AGENTMESH_ISOLATION": "best-effort",
		"AGENTMESH_TASK_CPU": "0.25", "AGENTMESH_AGENT_CPU_SHARES": "256", "AGENTMESH_SANDBOX_UIDS": "100000-165535",
		"AGENTMESH_TASK_PIDS": "64", "AGENTMESH_SANDBOX_READ_PATHS": "/opt/a, /opt/b", "AGENTMESH_SANDBOX_CGROUP_POOL": "3",
		"AGENTMESH_WEB_FETCH_ALLOW": "10.0.0.0/8", "AGENTMESH_WEB_FETCH_MAX_BYTES": "1000", "AGENTMESH_SQL_URL": "postgres://x",
		"AGENTMESH_SQL_POLICY": "refuse", "AGENTMESH_SQL_READ_WRITE": "true", "AGENTMESH_SQL_ALLOW_PRIVILEGED_ROLE": "true",
		"AGENTMESH_SQL_MAX_ROW_BYTES": "64k", "AGENTMESH_MODEL_PROVIDER": "anthropic", "AGENTMESH_MODEL_WAIT_IN_PLACE": "2s",
		"AGENTMESH_MODELS": `{"models": {"claude": {"provider": "anthropic", "base_url": "https://api.anthropic.com", "api_key_env": "K"}}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{"prefix, node", cfg.Prefix == "xy" && cfg.Node == "n1" && cfg.Sandbox.Node == "n1"},
		{"counts", cfg.Capacity == 8 && cfg.MaxSteps == 4 && cfg.Sandbox.Pids == 64},
		{"durations", cfg.WallTime == time.Minute && cfg.AckWait == 9*time.Second && cfg.DrainGrace == 3*time.Second},
		{"labels", len(cfg.Labels) == 2 && cfg.Labels["zone"] == "a" && cfg.Labels["gpu"] == "none"},
		{"streams", cfg.Streams.Replicas == 3},
		{"spawner", cfg.Spawner == SpawnerDirect && cfg.AgentNice == 3},
		{"model", cfg.Model.BaseURL == "http://m/v1" && cfg.Model.APIKey == "sk" && cfg.Model.Model == "mini" && cfg.Model.MaxResponseBytes == 8<<20},
		{"model allow", strings.Join(cfg.Model.Allow, "|") == "127.0.0.1:11434|ollama.lan"},
		{"prices", len(cfg.Model.Prices) == 2 && cfg.Model.Prices["gpt-4o-mini"].PromptPerM == 0.15},
		{"model provider, table, wait", cfg.Model.Provider == "anthropic" && cfg.Model.WaitInPlace == 2*time.Second && len(cfg.Model.Table.Models) == 1},
		{"sandbox", cfg.Sandbox.Level == sandbox.BestEffort && cfg.Sandbox.CPU == 0.25 && cfg.Sandbox.CPUShares == 256 && cfg.Sandbox.UIDs.First == 100000},
		{"read paths", strings.Join(cfg.Sandbox.ReadOnlyPaths, "|") == "/opt/a|/opt/b"},
		{"cgroup pool", cfg.Sandbox.CgroupPool == 3},
		{"web_fetch", strings.Join(cfg.ToolSettings.WebFetch.Allow, "|") == "10.0.0.0/8" && cfg.ToolSettings.WebFetch.MaxBytes == 1000},
		{"sql", cfg.ToolSettings.SQL.URL == "postgres://x" && cfg.ToolSettings.SQL.Policy == sqltool.PolicyRefuse &&
			cfg.ToolSettings.SQL.ReadWrite && cfg.ToolSettings.SQL.AllowPrivilegedRole && cfg.ToolSettings.SQL.MaxRowBytes == 64<<10},
	} {
		if !c.ok {
			t.Errorf("%s: got %+v", c.what, cfg)
		}
	}
}

// The counts and durations whose zero means the default, and child reuse.
func TestConfigFromEnvChildSettings(t *testing.T) {
	for _, c := range []struct {
		name, in string
		got      func(Config) any
		want     any
	}{
		{"AGENTMESH_WARM_POOL", "", func(c Config) any { return c.WarmPool }, 0},
		{"AGENTMESH_WARM_POOL", "0", func(c Config) any { return c.WarmPool }, -1},
		{"AGENTMESH_WARM_POOL", " 3 ", func(c Config) any { return c.WarmPool }, 3},
		{"AGENTMESH_WARM_POOL", "64", func(c Config) any { return c.WarmPool }, 64},
		{"AGENTMESH_RELEASE_ABOVE", "", func(c Config) any { return c.ReleaseAbove }, 0},
		{"AGENTMESH_RELEASE_ABOVE", "0", func(c Config) any { return c.ReleaseAbove }, -1},
		{"AGENTMESH_RELEASE_ABOVE", "64", func(c Config) any { return c.ReleaseAbove }, 64},
		{"AGENTMESH_RELEASE_ABOVE", " 1 ", func(c Config) any { return c.ReleaseAbove }, 1},
		{"AGENTMESH_RELEASE_AFTER", "", func(c Config) any { return c.ReleaseAfter }, time.Duration(0)},
		{"AGENTMESH_RELEASE_AFTER", "0", func(c Config) any { return c.ReleaseAfter }, time.Duration(-1)},
		{"AGENTMESH_RELEASE_AFTER", "500ms", func(c Config) any { return c.ReleaseAfter }, 500 * time.Millisecond},
		{"AGENTMESH_RELEASE_AFTER", " 3s ", func(c Config) any { return c.ReleaseAfter }, 3 * time.Second},
		{"AGENTMESH_KEEP_ANSWERS_AFTER", "", func(c Config) any { return c.KeepAnswersAfter }, time.Duration(0)},
		{"AGENTMESH_KEEP_ANSWERS_AFTER", "0", func(c Config) any { return c.KeepAnswersAfter }, KeepEveryAnswer},
		{"AGENTMESH_KEEP_ANSWERS_AFTER", "off", func(c Config) any { return c.KeepAnswersAfter }, time.Duration(-1)},
		{"AGENTMESH_KEEP_ANSWERS_AFTER", " 250ms ", func(c Config) any { return c.KeepAnswersAfter }, 250 * time.Millisecond},
		{"AGENTMESH_KEEP_ANSWERS_AFTER", "1ms", func(c Config) any { return c.KeepAnswersAfter }, time.Millisecond},
		{"AGENTMESH_CHILD_REUSE", "", func(c Config) any { return c.ChildReuse }, false},
		{"AGENTMESH_CHILD_REUSE", "off", func(c Config) any { return c.ChildReuse }, false},
		{"AGENTMESH_CHILD_REUSE", "agent", func(c Config) any { return c.ChildReuse }, true},
		{"AGENTMESH_CHILD_REUSE", " agent ", func(c Config) any { return c.ChildReuse }, true},
		{"AGENTMESH_SPAWNER", "", func(c Config) any { return c.Spawner }, ""},
		{"AGENTMESH_SPAWNER", "forkserver", func(c Config) any { return c.Spawner }, SpawnerForkServer},
		{"AGENTMESH_SPAWNER", "direct", func(c Config) any { return c.Spawner }, SpawnerDirect},
	} {
		cfg, err := fromEnv(map[string]string{c.name: c.in})
		if err != nil || c.got(cfg) != c.want {
			t.Errorf("%s=%q: got %v, %v; want %v", c.name, c.in, c.got(cfg), err, c.want)
		}
	}
	for _, c := range []struct{ name, in string }{
		{"AGENTMESH_WARM_POOL", "-1"}, {"AGENTMESH_WARM_POOL", "x"}, {"AGENTMESH_WARM_POOL", "1.5"},
		{"AGENTMESH_RELEASE_ABOVE", "-1"}, {"AGENTMESH_RELEASE_ABOVE", "many"}, {"AGENTMESH_RELEASE_ABOVE", "1.5"},
		{"AGENTMESH_RELEASE_AFTER", "5ms"}, {"AGENTMESH_RELEASE_AFTER", "-1s"}, {"AGENTMESH_RELEASE_AFTER", "soon"}, {"AGENTMESH_RELEASE_AFTER", "10"},
		{"AGENTMESH_KEEP_ANSWERS_AFTER", "500us"}, {"AGENTMESH_KEEP_ANSWERS_AFTER", "-1s"}, {"AGENTMESH_KEEP_ANSWERS_AFTER", "soon"},
		{"AGENTMESH_KEEP_ANSWERS_AFTER", "100"}, {"AGENTMESH_KEEP_ANSWERS_AFTER", "OFF"},
		{"AGENTMESH_CHILD_REUSE", "org"},
	} {
		if cfg, err := fromEnv(map[string]string{c.name: c.in}); err == nil {
			t.Errorf("%s=%q accepted: %+v", c.name, c.in, cfg)
		}
	}
}

// Sizes: a number of bytes with an optional K, M or G (binary multiples).
func TestConfigFromEnvSizes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1": 1, "4096": 4096, "512MiB": 512 << 20, "1G": 1 << 30, "64k": 64 << 10, "2 GB": 2 << 30, "1k": 1 << 10, "2KiB": 2 << 10, "16MiB": 16 << 20, "1 G": 1 << 30, "3mb": 3 << 20, "5B": 5} {
		if cfg, err := fromEnv(map[string]string{"AGENTMESH_TASK_MEMORY": in}); err != nil || cfg.Sandbox.Memory != want {
			t.Errorf("AGENTMESH_TASK_MEMORY=%q: %d, %v; want %d", in, cfg.Sandbox.Memory, err, want)
		}
	}
	for _, in := range []string{"MiB", "12X", "-1", "1.5G", "x", "1T", "99999999999G"} {
		if _, err := fromEnv(map[string]string{"AGENTMESH_TASK_DISK": in}); err == nil {
			t.Errorf("AGENTMESH_TASK_DISK=%q accepted", in)
		}
	}
	if cfg, err := fromEnv(map[string]string{"AGENTMESH_TASK_DISK": ""}); err != nil || cfg.Sandbox.Disk != 0 {
		t.Errorf("unset AGENTMESH_TASK_DISK: %d, %v; want 0 (the default)", cfg.Sandbox.Disk, err)
	}
}

// The default model's key falls back to OPENAI_API_KEY.
func TestConfigFromEnvOpenAIKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-openai")
	if cfg, err := fromEnv(nil); err != nil || cfg.Model.APIKey != "sk-openai" {
		t.Errorf("key %q, %v; want OPENAI_API_KEY's", cfg.Model.APIKey, err)
	}
	if cfg, err := fromEnv(map[string]string{"AGENTMESH_MODEL_API_KEY": "sk-own"}); err != nil || cfg.Model.APIKey != "sk-own" {
		t.Errorf("key %q, %v; want AGENTMESH_MODEL_API_KEY's", cfg.Model.APIKey, err)
	}
}

// New's defaults, and what it refuses.
func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{Node: "n1", ChildCommand: []string{os.Args[0]}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Capacity != DefaultCapacity || cfg.MaxSteps != DefaultMaxSteps || cfg.WallTime != DefaultWallTime || cfg.AckWait != DefaultAckWait ||
		cfg.HeartbeatInterval != DefaultHeartbeatInterval || cfg.DrainGrace != DefaultDrainGrace || cfg.Spawner != SpawnerForkServer || cfg.MCPClient == nil {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, bad := range []Config{{Node: "a.b"}, {Node: "n", Spawner: "fork"}, {Node: "n", AgentNice: 20}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	for _, c := range []struct{ capacity, pool, want int }{{32, 0, 32}, {1000, 0, DefaultWarmPoolMax}, {8, 20, 8}, {8, 3, 3}, {8, -1, 0}} {
		if got := warmSize(Config{Capacity: c.capacity, WarmPool: c.pool}); got != c.want {
			t.Errorf("warmSize(capacity %d, pool %d) = %d, want %d", c.capacity, c.pool, got, c.want)
		}
	}
}
