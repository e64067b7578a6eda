package state

import (
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/envconf/envconftest"
)

// A bad value refuses the start naming its variable; unset values take the
// defaults (AGENTMESH_RETENTION's is 30 days; 0 keeps for ever).
func TestConfigFromEnv(t *testing.T) {
	cfg, err := ConfigFromEnv(envconf.Map(map[string]string{EnvRetention: "48h", "AGENTMESH_PREFIX": "x.y", "AGENTMESH_STREAM_REPLICAS": "3"}))
	if err != nil || cfg.Retention != 48*time.Hour || cfg.Prefix != "x.y" || cfg.Streams.Replicas != 3 {
		t.Errorf("got %+v, %v", cfg, err)
	}
	def, err := ConfigFromEnv(envconf.Map(nil))
	if err != nil || def.Retention != DefaultRetention || def.Concurrency != DefaultConcurrency || def.RetentionInterval != DefaultRetentionInterval {
		t.Errorf("defaults: got %+v, %v", def, err)
	}
	if forever, err := ConfigFromEnv(envconf.Map(map[string]string{EnvRetention: "0"})); err != nil || forever.Retention != 0 {
		t.Errorf("retention 0: got %v, %v; want 0 (for ever)", forever.Retention, err)
	}
	envconftest.Refused(t, ConfigFromEnv, []envconftest.Bad{
		{EnvRetention, "a month"},
		{EnvRetention, "-1h"},
		{"AGENTMESH_PREFIX", "a..b"},
		{"AGENTMESH_STREAM_REPLICAS", "x"},
	})
}
