package natstest

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/embednats"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
)

// Node is one JetStream server that a test stops and starts again on the
// same port and data — a NATS restart as an operator or a crash makes it.
// Clients connect over TCP and reconnect without end, as services do, so
// they find the server again when it is back.
type Node struct {
	t    testing.TB
	auth *busauth.Bundle
	dir  string
	port int
	srv  *embednats.Server
}

// StartNode starts a Node (stopped at cleanup).
func StartNode(t testing.TB) *Node {
	t.Helper()
	auth, err := busauth.New(subjects.Must(""))
	if err != nil {
		t.Fatalf("bus identities: %v", err)
	}
	n := &Node{t: t, auth: auth, dir: t.TempDir(), port: freePort(t)}
	t.Cleanup(func() {
		if n.srv != nil {
			n.srv.Stop()
		}
	})
	n.Start()
	return n
}

// Start starts the stopped server again, on the same port and data.
func (n *Node) Start() {
	n.t.Helper()
	srv, err := embednats.Start(embednats.Config{ReadyTimeout: readyTimeout,
		StoreDir: filepath.Join(n.dir, "js"), Port: n.port, ServerName: "natstest-node",
		Auth: n.auth, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		n.t.Fatalf("start nats: %v", err)
	}
	n.srv = srv
}

// Stop shuts the server down; its clients start reconnecting.
func (n *Node) Stop() {
	n.srv.Stop()
	n.srv = nil
}

// Server is the running server (nil while stopped).
func (n *Node) Server() *embednats.Server { return n.srv }

// URL is the server's client URL, the same across restarts.
func (n *Node) URL() string { return "nats://" + addr(n.port) }

// ConnectAs connects over TCP as a service identity ("" = a test driver
// allowed everything), reconnecting without end; closed at cleanup.
func (n *Node) ConnectAs(t testing.TB, service string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return dial(t, n.URL(), creds(t, n.auth, service), service, opts...)
}

// Auth returns the server's identities (the same across restarts).
func (n *Node) Auth() *busauth.Bundle { return n.auth }
