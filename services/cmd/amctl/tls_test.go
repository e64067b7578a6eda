package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/tlstest"
	"github.com/agentmesh/agentmesh/services/router"
)

// realRouter runs the real router (TLS as cfg says) over a real NATS
// server; `amctl tools` needs nothing behind it on the bus.
func realRouter(t *testing.T, cfg router.Config) string {
	t.Helper()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	cfg.Listen = "127.0.0.1:0"
	r, err := router.New(context.Background(), cfg, router.Deps{NC: nc, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r.Addr()
}

func TestTLSRoundTrip(t *testing.T) {
	pki := tlstest.New(t)
	addr := realRouter(t, router.Config{TLSCert: pki.ServerCert, TLSKey: pki.ServerKey})
	tests := []struct {
		name string
		args []string
		ok   bool
	}{
		{"with the CA", []string{"--ca", pki.CA}, true},
		{"with --tls and the CA", []string{"--tls", "--ca", pki.CA}, true},
		{"plaintext to a TLS server", nil, false},
		{"an unrelated CA", []string{"--ca", pki.OtherCA}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := amctl(t, addr, append(tc.args, "tools")...)
			if tc.ok && (code != 0 || !strings.Contains(out, "web_fetch")) {
				t.Fatalf("exit %d stdout %q stderr %q, want the tool list", code, out, errOut)
			}
			if !tc.ok && (code != 1 || !strings.HasPrefix(errOut, "amctl: ")) {
				t.Fatalf("exit %d stderr %q, want a failure", code, errOut)
			}
		})
	}
}

func TestMutualTLSRoundTrip(t *testing.T) {
	pki := tlstest.New(t)
	addr := realRouter(t, router.Config{TLSCert: pki.ServerCert, TLSKey: pki.ServerKey, TLSClientCA: pki.CA})
	tests := []struct {
		name string
		args []string
		ok   bool
	}{
		{"client certificate of the CA", []string{"--ca", pki.CA, "--cert", pki.ClientCert, "--key", pki.ClientKey}, true},
		{"no client certificate", []string{"--ca", pki.CA}, false},
		{"client certificate of another CA", []string{"--ca", pki.CA, "--cert", pki.OtherClientCert, "--key", pki.OtherClientKey}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := amctl(t, addr, append(tc.args, "tools")...)
			if tc.ok && (code != 0 || !strings.Contains(out, "web_fetch")) {
				t.Fatalf("exit %d stdout %q stderr %q, want the tool list", code, out, errOut)
			}
			if !tc.ok && code != 1 {
				t.Fatalf("exit %d stderr %q, want a failure", code, errOut)
			}
		})
	}
	if code, _, errOut := amctl(t, addr, "--cert", pki.ClientCert, "tools"); code != 2 || !strings.Contains(errOut, "--cert and --key go together") {
		t.Errorf("--cert without --key: exit %d stderr %q, want a usage error", code, errOut)
	}
}

// PermissionDenied is shown on one line naming the role needed.
func TestPermissionDeniedShown(t *testing.T) {
	addr := realRouter(t, router.Config{APIKeys: map[string]string{"reader-key": "acme:reader"}})
	code, _, errOut := amctl(t, addr, "--api-key", "reader-key", "agents", "create", "x", "--tool", "echo")
	want := "amctl: permission denied: CreateAgent needs role admin; key "
	if code != 1 || !strings.HasPrefix(errOut, want) || !strings.Contains(errOut, "has role reader") {
		t.Fatalf("exit %d stderr %q, want 1 and %q... has role reader", code, errOut, want)
	}
	if code, out, errOut := amctl(t, addr, "--api-key", "reader-key", "tools"); code != 0 || !strings.Contains(out, "echo") {
		t.Fatalf("a reader lists tools: exit %d stderr %q", code, errOut)
	}
}
