package app

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/stack"
)

// Each service refuses to start on a bad value of one of its variables,
// as a usage error (exit 2) naming the variable, before it connects.
func TestServicesRefuseABadValueNamingIt(t *testing.T) {
	for _, tt := range []struct {
		cmd, flag, value, variable string
	}{
		{"state", "--retention", "a month", "AGENTMESH_RETENTION"},
		{"state", "--stream-replicas", "7", "AGENTMESH_STREAM_REPLICAS"},
		{"registry", "--match-weights", "capability=-1", "AGENTMESH_MATCH_WEIGHTS"},
		{"registry", "--analysis", "sometimes", "AGENTMESH_ANALYSIS"},
		{"registry", "--proposal-threshold", "2", "AGENTMESH_PROPOSAL_THRESHOLD"},
		{"scheduler", "--scheduler-lease", "10ms", "AGENTMESH_SCHEDULER_LEASE"},
		{"scheduler", "--org-limits", "acme", "AGENTMESH_ORG_LIMITS"},
		{"scheduler", "--priority-aging", "soon", "AGENTMESH_PRIORITY_AGING"},
		{"router", "--org-rate", "0", "AGENTMESH_ORG_RATE"},
		{"router", "--api-keys", "k=Not An Org", "AGENTMESH_API_KEYS"},
		{"router", "--max-connections", "many", "AGENTMESH_MAX_CONNECTIONS"},
		{"router", "--prefix", "a b", "AGENTMESH_PREFIX"},
		{"executor", "--capacity", "many", "AGENTMESH_CAPACITY"},
		{"dev", "--scheduler-lease", "10ms", "AGENTMESH_SCHEDULER_LEASE"},
		{"dev", "--retention", "-1h", "AGENTMESH_RETENTION"},
	} {
		t.Run(tt.cmd+" "+tt.variable, func(t *testing.T) {
			args := []string{tt.flag, tt.value, "--nats-url", "nats://127.0.0.1:1"}
			var err error
			if tt.cmd == "dev" {
				err = runDevTo(context.Background(), []string{tt.flag, tt.value, "--data-dir", t.TempDir()}, nil)
			} else {
				err = runService(context.Background(), tt.cmd, args)
			}
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.variable) {
				t.Fatalf("got %v, want a usage error naming %s", err, tt.variable)
			}
		})
	}
}

// Every variable a server command reads is declared in EnvVars for that
// command, and every variable EnvVars declares for it is read (OTEL_*
// variables are the OpenTelemetry SDK's own). A command's run reads its
// whole configuration before it connects; this one stops there (its
// context has ended and the bus is not there).
func TestEnvVarsAreRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bus")
	if _, _, err := busauth.Ensure(dir, subjects.Must("am")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, cmd := range append([]string{"dev"}, subjects.Services...) {
		t.Run(cmd, func(t *testing.T) {
			s := newSettings(cmd)
			args := []string{"--nats-url", "nats://127.0.0.1:1", "--nats-creds", filepath.Join(dir, busauth.CredsFile(cmd)),
				"--nats-tap-signer", filepath.Join(dir, busauth.TapSignerFile), "--model-base-url", "http://127.0.0.1:1/v1", "--log-level", "error"}
			if cmd == "dev" {
				args = []string{"--data-dir", t.TempDir(), "--nats-listen", "off", "--listen", "127.0.0.1:0", "--isolation", "none", "--log-level", "error"}
			}
			if err := s.parse(filterFlags(s, args)); err != nil {
				t.Fatal(err)
			}
			runWith(ctx, s)
			for name := range s.read {
				if e, ok := declared(name); !ok || !e.readBy(cmd) {
					t.Errorf("%s reads %s, which EnvVars does not declare for it", cmd, name)
				}
			}
			for _, e := range EnvVars() {
				if e.readBy(cmd) && !strings.HasPrefix(e.Name, "OTEL_") && !s.read[e.Name] {
					t.Errorf("EnvVars declares %s for %s, which does not read it", e.Name, cmd)
				}
			}
		})
	}
}

// runWith runs s's command (dev or a service) with ctx.
func runWith(ctx context.Context, s *settings) {
	if s.cmd == "dev" {
		_ = s.runDev(ctx, nil)
		return
	}
	_ = s.runService(ctx)
}

// filterFlags keeps the flags s's command has.
func filterFlags(s *settings, args []string) []string {
	var out []string
	for i := 0; i+1 < len(args); i += 2 {
		if s.fs.Lookup(strings.TrimPrefix(args[i], "--")) != nil {
			out = append(out, args[i], args[i+1])
		}
	}
	return out
}

func declared(name string) (Env, bool) {
	i := slices.IndexFunc(EnvVars(), func(e Env) bool { return e.Name == name })
	if i < 0 {
		return Env{}, false
	}
	return EnvVars()[i], true
}

// The dev command and the service commands build the same services: the
// table's, in its order.
func TestCommandsAreTheTable(t *testing.T) {
	var names []string
	for _, svc := range stack.Services() {
		names = append(names, svc.Name)
	}
	if !slices.Equal(names, subjects.Services) {
		t.Errorf("table %v, want the bus identities in start order %v", names, subjects.Services)
	}
	for _, name := range names {
		if !slices.Contains(Commands(), name) {
			t.Errorf("service %s has no command", name)
		}
	}
}
