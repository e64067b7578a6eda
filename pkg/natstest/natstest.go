// Package natstest starts a real nats-server with JetStream per test. The
// server authenticates like every agentmesh bus (package busauth): tests
// connect as a service identity (ConnectAs), as a test driver allowed
// everything (Connect), or with creds of their own (ConnectCreds).
package natstest

import (
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/embednats"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
)

// readyTimeout is how long a test server may take to open its listeners:
// a clustered one, started while a whole suite runs on two cores, has
// taken over the production default of 10 s (CI, 2026-11-27).
const readyTimeout = 60 * time.Second

// Start runs a JetStream server on a random loopback port with its store in
// dir (t.TempDir() when empty), stopped at cleanup. Its identities (for
// the default prefix) are kept in dir, so a server started again on the
// same dir has the same accounts and the same data.
func Start(t testing.TB, dir ...string) *embednats.Server {
	t.Helper()
	return StartPrefix(t, "", dir...)
}

// StartPrefix is Start with the service permissions derived for a subject
// prefix other than the default.
func StartPrefix(t testing.TB, prefix string, dir ...string) *embednats.Server {
	t.Helper()
	d := ""
	if len(dir) > 0 {
		d = dir[0]
	} else {
		d = t.TempDir()
	}
	srv, err := embednats.Start(embednats.Config{ReadyTimeout: readyTimeout, StoreDir: d, Port: -1, ServerName: "natstest", Prefix: prefix})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// Connect opens a connection to srv as a test driver that may publish and
// subscribe to anything in the agentmesh account (it plays clients and
// services the test does not run), closed at cleanup. Services under test
// connect with ConnectAs.
func Connect(t testing.TB, srv *embednats.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	creds, err := srv.Auth().UserCreds("natstest-driver", subjects.Permission{Pub: []string{">"}, Sub: []string{">"}}, 0)
	if err != nil {
		t.Fatalf("driver creds: %v", err)
	}
	return ConnectCreds(t, srv, creds, "", opts...)
}

// ConnectAs opens a connection as a service identity (subjects.ServiceState,
// ...), closed at cleanup.
func ConnectAs(t testing.TB, srv *embednats.Server, service string) *nats.Conn {
	t.Helper()
	nc, err := srv.ConnectAs(service, nats.Name(t.Name()+"/"+service))
	if err != nil {
		t.Fatalf("connect nats as %s: %v", service, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ConnectCreds opens an in-process connection with creds,
// closed at cleanup; service, when set, picks that identity's inbox prefix.
func ConnectCreds(t testing.TB, srv *embednats.Server, creds []byte, service string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := srv.ConnectCreds(t.Name(), creds, service, opts...)
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}
