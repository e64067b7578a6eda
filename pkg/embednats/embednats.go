// Package embednats runs a nats-server with JetStream inside the process:
// the bus of `agentmesh dev` and of the tests. It always authenticates:
// operator mode with the identities of a busauth.Bundle (a fresh one when
// none is given), so no connection — in-process or on the loopback
// listener — is anonymous.
package embednats

import (
	"cmp"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config of an embedded server.
type Config struct {
	// StoreDir holds JetStream data; required.
	StoreDir string
	// Host and Port of the client listener; Port 0 picks 4222, -1 a random
	// free port. Host defaults to 127.0.0.1 (loopback only).
	Host string
	Port int
	// SyncAlways makes JetStream fsync every write (slower, survives power loss).
	SyncAlways bool
	// ServerName; defaults to "agentmesh-dev".
	ServerName string
	// Logs turns on the server's own log (notices and debug lines).
	Logs bool
	// Auth holds the bus identities; nil loads (or first creates) the
	// bundle in StoreDir/bus for Prefix. JetStream keeps an account's data
	// under the account's key, so a restart must bring the same bundle.
	Auth   *busauth.Bundle
	Prefix string
	// Log receives the server's warnings and errors — refused
	// authentications and permission violations, once per client and
	// reason; nil uses slog.Default().
	Log *slog.Logger
	// Cluster, when its Name is set, makes the server a member of a
	// JetStream cluster (tests of node loss: pkg/natstest.StartCluster).
	Cluster Cluster
	// ReadyTimeout bounds the wait for the server's listeners; 0 = 10 s.
	// (A clustered server on a machine running a whole test suite has
	// been seen to need more: pkg/natstest gives 60 s.)
	ReadyTimeout time.Duration
}

// Cluster is the route configuration of a clustered server.
type Cluster struct {
	// Name of the cluster, the same on every member.
	Name string
	// Port of the route listener on Host.
	Port int
	// Routes to the other members (nats-route://host:port).
	Routes []string
	// Advertise is the route address the server gossips to the others;
	// empty = its listener. (A test cluster whose routes go through
	// proxies gossips an address nobody dials, so all routes stay on the
	// proxies.)
	Advertise string
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
	auth *busauth.Bundle
	log  *slog.Logger
}

// Start runs a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("embednats: StoreDir is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "agentmesh-dev"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Auth == nil {
		names, err := subjects.New(cfg.Prefix)
		if err != nil {
			return nil, fmt.Errorf("embednats: %w", err)
		}
		if cfg.Auth, _, err = busauth.Ensure(filepath.Join(cfg.StoreDir, "bus"), names); err != nil {
			return nil, fmt.Errorf("embednats: %w", err)
		}
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       cfg.Host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		MaxPayload: 8 << 20,
		// A service's CONNECT carries its user JWT with its permissions.
		MaxControlLine:     busauth.MaxControlLine,
		JetStreamMaxMemory: 1 << 30,
		JetStreamMaxStore:  64 << 30,
	}
	if cfg.SyncAlways {
		opts.SyncAlways = true
	}
	if cfg.Cluster.Name != "" {
		opts.Cluster.Name = cfg.Cluster.Name
		opts.Cluster.Host = cfg.Host
		opts.Cluster.Port = cfg.Cluster.Port
		opts.Cluster.Advertise = cfg.Cluster.Advertise
		opts.Routes = server.RoutesFromStr(strings.Join(cfg.Cluster.Routes, ","))
	}
	if err := cfg.Auth.ServerOptions(opts); err != nil {
		return nil, fmt.Errorf("embednats: %w", err)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embednats: %w", err)
	}
	srv.SetLoggerV2(newLogger(cfg.Log, cfg.Logs), cfg.Logs, false, false)
	go srv.Start()
	ready := cmp.Or(cfg.ReadyTimeout, 10*time.Second)
	if !srv.ReadyForConnections(ready) {
		srv.Shutdown()
		return nil, fmt.Errorf("embednats: server not ready after %s", ready)
	}
	return &Server{Server: srv, auth: cfg.Auth, log: cfg.Log}, nil
}

// Auth returns the server's identities.
func (s *Server) Auth() *busauth.Bundle { return s.auth }

// ConnectAs opens an in-process connection (nats.InProcessServer, no TCP)
// as a service identity (subjects.ServiceState, ...).
func (s *Server) ConnectAs(service string, opts ...nats.Option) (*nats.Conn, error) {
	creds, err := s.auth.Creds(service)
	if err != nil {
		return nil, err
	}
	return s.ConnectCreds("agentmesh-"+service, creds, service, opts...)
}

// inProcessConnectTimeout bounds an in-process connection's handshake.
const inProcessConnectTimeout = 15 * time.Second

// ConnectCreds opens an in-process connection with creds; service, when
// set, picks the identity's inbox prefix.
func (s *Server) ConnectCreds(name string, creds []byte, service string, opts ...nats.Option) (*nats.Conn, error) {
	auth, err := busauth.ClientOptions(creds, service, s.log)
	if err != nil {
		return nil, err
	}
	// In process there is no network to wait for: the connect timeout
	// (nats.go's default is 2 s) only ever fires when the machine is
	// overloaded, e.g. a whole test suite on two cores, and then a
	// longer wait is right.
	all := append([]nats.Option{nats.Name(name), nats.InProcessServer(s.Server), nats.MaxReconnects(-1), nats.Timeout(inProcessConnectTimeout)}, auth...)
	return nats.Connect("", append(all, opts...)...)
}

// URL is the client URL of the loopback listener.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
