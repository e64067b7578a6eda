// Package natstest starts a real nats-server with JetStream per test.
package natstest

import (
	"testing"

	"github.com/agentmesh/agentmesh/pkg/embednats"
	"github.com/nats-io/nats.go"
)

// Start runs a JetStream server on a random loopback port with its store in
// dir (t.TempDir() when empty), stopped at cleanup.
func Start(t testing.TB, dir ...string) *embednats.Server {
	t.Helper()
	d := ""
	if len(dir) > 0 {
		d = dir[0]
	} else {
		d = t.TempDir()
	}
	srv, err := embednats.Start(embednats.Config{StoreDir: d, Port: -1, ServerName: "natstest"})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// Connect opens a connection to srv, closed at cleanup.
func Connect(t testing.TB, srv *embednats.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(srv.URL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}
