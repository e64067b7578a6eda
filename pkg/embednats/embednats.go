// Package embednats runs a nats-server with JetStream inside the process:
// the bus of `agentmesh dev` and of the tests.
package embednats

import (
	"fmt"
	"time"

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
	// Logs turns on the server's own log.
	Logs bool
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
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
	opts := &server.Options{
		ServerName:         cfg.ServerName,
		Host:               cfg.Host,
		Port:               cfg.Port,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		NoSigs:             true,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 1 << 30,
		JetStreamMaxStore:  64 << 30,
	}
	if cfg.SyncAlways {
		opts.SyncAlways = true
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embednats: %w", err)
	}
	if cfg.Logs {
		srv.ConfigureLogger()
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embednats: server not ready after 10s")
	}
	return &Server{Server: srv}, nil
}

// Connect opens a client connection that does not go through the TCP
// listener (nats.InProcessServer).
func (s *Server) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.Name(name), nats.InProcessServer(s.Server), nats.MaxReconnects(-1)}, opts...)
	return nats.Connect("", opts...)
}

// URL is the client URL of the loopback listener.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
