package app

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentmesh/agentmesh/services/router"
	"github.com/nats-io/jwt/v2"
)

// agentmesh dev writes a tap credential for each org its API keys name,
// role-bearing keys ("org:role") and platform keys ("*:platform", no org)
// included: one tap per org, named by the org alone, scoped to it.
func TestDevTapsForRoleBearingKeys(t *testing.T) {
	dir := t.TempDir()
	keysFile := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(keysFile, []byte(`{"keys": [{"name": "ci", "org": "initech", "role": "operator", "sha256": "`+
		"0000000000000000000000000000000000000000000000000000000000000001"+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := router.Config{KeysFile: keysFile, APIKeys: map[string]string{
		"k1": "acme:reader", "k2": "*:platform", "k3": "globex", "k4": "acme:operator",
	}}
	_, taps, err := devAuth(dir, "", cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("devAuth: %v", err)
	}
	var orgs []string
	for org := range taps {
		orgs = append(orgs, org)
	}
	slices.Sort(orgs)
	if want := []string{"acme", "globex", "initech"}; !slices.Equal(orgs, want) {
		t.Fatalf("taps for %v, want %v", orgs, want)
	}
	for org, path := range taps {
		if filepath.Base(path) != "tap-"+org+".creds" {
			t.Errorf("tap of %s written to %s", org, path)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.ParseDecoratedJWT(raw)
		if err != nil {
			t.Fatal(err)
		}
		uc, err := jwt.DecodeUserClaims(tok)
		if err != nil {
			t.Fatal(err)
		}
		if uc.Name != org {
			t.Errorf("tap %s is scoped to %q, want %q", path, uc.Name, org)
		}
	}
	// Without keys: the default org.
	_, taps, err = devAuth(t.TempDir(), "", router.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || len(taps) != 1 || taps[router.DefaultOrg] == "" {
		t.Fatalf("taps without keys: %v, %v; want one of %q", taps, err, router.DefaultOrg)
	}
}
