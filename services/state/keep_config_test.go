package state

import (
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/envconf/envconftest"
)

// The memory limits: read, defaulted, a bad value refused naming it.
func TestMemoryConfigFromEnv(t *testing.T) {
	cfg, err := ConfigFromEnv(envconf.Map(map[string]string{EnvMemoryMaxAge: "2160h", EnvMemoryMaxPerScope: "-1"}))
	if err != nil || cfg.Memory.MaxAge != 2160*time.Hour || cfg.Memory.MaxPerScope != -1 {
		t.Errorf("got %+v, %v", cfg.Memory, err)
	}
	def, err := ConfigFromEnv(envconf.Map(nil))
	if err != nil || def.Memory.withDefaults().MaxPerScope != DefaultMaxPerScope || def.Memory.MaxAge != 0 {
		t.Errorf("defaults: got %+v, %v", def.Memory, err)
	}
	envconftest.Refused(t, ConfigFromEnv, []envconftest.Bad{
		{EnvMemoryMaxAge, "a year"},
		{EnvMemoryMaxAge, "-1h"},
		{EnvMemoryMaxPerScope, "many"},
		{EnvMemoryMaxPerScope, "-2"},
	})
}
