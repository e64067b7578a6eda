// Package envconftest checks a service's ConfigFromEnv in its tests: each
// bad value refuses the configuration with an error naming its variable.
package envconftest

import (
	"errors"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/envconf"
)

// Bad is one bad value of one variable: {name, value}.
type Bad [2]string

// Refused runs fromEnv with each bad value alone (every other variable
// unset) as a subtest and fails it unless the error is an *envconf.Error
// naming the variable.
func Refused[C any](t *testing.T, fromEnv func(envconf.Getter) (C, error), bad []Bad) {
	t.Helper()
	for _, b := range bad {
		name, value := b[0], b[1]
		t.Run(name+"="+value, func(t *testing.T) {
			_, err := fromEnv(envconf.Map(map[string]string{name: value}))
			var e *envconf.Error
			if !errors.As(err, &e) || e.Name != name {
				t.Fatalf("got %v, want an error naming %s", err, name)
			}
		})
	}
}
