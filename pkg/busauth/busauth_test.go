package busauth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/jwt/v2"
)

var names = subjects.Must("")

func TestEnsureCreatesOnceAndReuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bus")
	if _, err := busauth.Load(dir, names); !errors.Is(err, busauth.ErrNoBundle) {
		t.Fatalf("Load of an empty dir: %v, want ErrNoBundle", err)
	}
	b1, created, err := busauth.Ensure(dir, names)
	if err != nil || !created {
		t.Fatalf("first Ensure: created=%v err=%v", created, err)
	}
	b2, created, err := busauth.Ensure(dir, names)
	if err != nil || created {
		t.Fatalf("second Ensure: created=%v err=%v, want the existing bundle", created, err)
	}
	if b1.AccountPublicKey() != b2.AccountPublicKey() {
		t.Error("the account changed between two Ensure calls")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fi, _ := e.Info()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	for _, svc := range subjects.Services {
		creds, err := os.ReadFile(filepath.Join(dir, busauth.CredsFile(svc)))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.ParseDecoratedJWT(creds)
		if err != nil {
			t.Fatal(err)
		}
		uc, err := jwt.DecodeUserClaims(tok)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := names.Permissions(svc)
		if strings.Join(uc.Pub.Allow, " ") != strings.Join(want.Pub, " ") || strings.Join(uc.Sub.Allow, " ") != strings.Join(want.Sub, " ") {
			t.Errorf("%s: JWT permissions differ from subjects.Permissions", svc)
		}
		if acct, _ := busauth.AccountFromCreds(creds); acct != b1.AccountPublicKey() {
			t.Errorf("%s: signed by %s, want the account %s", svc, acct, b1.AccountPublicKey())
		}
	}
	if !strings.Contains(b1.ServerConfig(), "resolver: MEMORY") || !strings.Contains(b1.ServerConfig(), b1.AccountPublicKey()) {
		t.Errorf("server config: %s", b1.ServerConfig())
	}
	// A corrupt seed is an error, not a new bundle.
	if err := os.WriteFile(filepath.Join(dir, busauth.TapSignerFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := busauth.Ensure(dir, names); err == nil {
		t.Error("Ensure over a corrupt seed: nil error")
	}
}

func TestMintTap(t *testing.T) {
	b, err := busauth.New(names)
	if err != nil {
		t.Fatal(err)
	}
	signer := b.TapSigner()
	tap, err := signer.Mint("acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := jwt.ParseDecoratedJWT(tap.Creds)
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Name != "acme" || uc.IssuerAccount != b.AccountPublicKey() || !uc.HasEmptyPermissions() || uc.Expires > time.Now().Add(time.Hour+time.Minute).Unix() {
		t.Errorf("tap claims: name %q issuer account %q scoped %v expires %d", uc.Name, uc.IssuerAccount, uc.HasEmptyPermissions(), uc.Expires)
	}
	for _, tc := range []struct {
		org string
		ttl time.Duration
	}{{"", time.Hour}, {"a.b", time.Hour}, {"*", time.Hour}, {">", time.Hour}, {"acme", -time.Second}, {"acme", busauth.MaxTapTTL + time.Hour}} {
		if _, err := signer.Mint(tc.org, tc.ttl); err == nil {
			t.Errorf("Mint(%q, %s): nil error", tc.org, tc.ttl)
		}
	}
	if _, err := busauth.NewTapSigner([]byte("SUxxx"), b.AccountPublicKey()); err == nil {
		t.Error("NewTapSigner with a bad seed: nil error")
	}
}

// Creds come from files an operator hands around: anything malformed is
// an error, never a panic.
func FuzzClientCreds(f *testing.F) {
	b, _ := busauth.New(names)
	good, _ := b.Creds(subjects.ServiceRouter)
	f.Add(good)
	f.Add([]byte("-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, creds []byte) {
		_, _ = busauth.ClientOptions(creds, "router", nil)
		_, _ = busauth.AccountFromCreds(creds)
	})
}
