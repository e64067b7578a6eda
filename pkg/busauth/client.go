package busauth

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ClientOptions are the nats.go options of a connection as the identity
// whose creds are given: its user JWT and seed, and, for a service, its own
// inbox prefix (the only inbox its permissions let it subscribe to).
// Permission errors the server sends are logged, once per subject.
func ClientOptions(creds []byte, service string, log *slog.Logger) ([]nats.Option, error) {
	tok, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		return nil, fmt.Errorf("busauth: creds: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(creds)
	if err != nil {
		return nil, fmt.Errorf("busauth: creds: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("busauth: creds: %w", err)
	}
	opts := []nats.Option{nats.UserJWTAndSeed(tok, string(seed))}
	if service != "" {
		opts = append(opts, nats.CustomInboxPrefix(subjects.InboxPrefix(service)))
	}
	if log != nil {
		opts = append(opts, nats.ErrorHandler(PermissionLogger(log)))
	}
	return opts, nil
}

// PermissionLogger returns a nats.go error handler that logs each distinct
// asynchronous error (a permissions violation, typically) once.
func PermissionLogger(log *slog.Logger) nats.ErrHandler {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if err == nil {
			return
		}
		mu.Lock()
		first := !seen[err.Error()]
		if first && len(seen) < 1024 {
			seen[err.Error()] = true
		}
		mu.Unlock()
		if first {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("bus error on this connection (logged once per kind)", "conn", nc.Opts.Name, "subscription", subj, "err", err)
		}
	}
}
