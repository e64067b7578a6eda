package bus

import (
	"errors"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/envconf"
)

func TestReadSettings(t *testing.T) {
	r := envconf.New(envconf.Map(map[string]string{EnvPrefix: "acme.am", EnvStreamReplicas: "3"}))
	prefix, streams := ReadSettings(r)
	if r.Err() != nil || prefix != "acme.am" || streams.Replicas != 3 {
		t.Errorf("got %q %+v %v, want acme.am, 3 replicas, no error", prefix, streams, r.Err())
	}
	for _, tt := range []struct{ name, value string }{
		{EnvPrefix, "a b"}, {EnvPrefix, "am.*"}, {EnvStreamReplicas, "6"}, {EnvStreamReplicas, "-1"}, {EnvStreamReplicas, "three"},
	} {
		r := envconf.New(envconf.Map(map[string]string{tt.name: tt.value}))
		ReadSettings(r)
		var e *envconf.Error
		if !errors.As(r.Err(), &e) || e.Name != tt.name {
			t.Errorf("%s=%q: got %v, want an error naming %s", tt.name, tt.value, r.Err(), tt.name)
		}
	}
}
