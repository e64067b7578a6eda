package stack

import (
	"context"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/registry"
	"github.com/agentmesh/agentmesh/services/router"
	"github.com/agentmesh/agentmesh/services/scheduler"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/agentmesh/agentmesh/services/state/pgstore"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// How each row of the table is built on its connection, with the stack's
// prefix, streams, store and model.

func (s *Stack) buildState(ctx context.Context, nc *nats.Conn) (func(context.Context) error, error) {
	st, err := s.openStore(ctx, nc)
	if err != nil {
		return nil, fmt.Errorf("stack: open store: %w", err)
	}
	s.store = st
	cfg := s.cfg.State
	cfg.Prefix, cfg.Streams = s.cfg.Prefix, s.cfg.Streams
	if cfg.Taps == nil && s.cfg.Auth != nil {
		cfg.Taps = s.cfg.Auth.TapSigner()
	}
	svc, err := state.New(ctx, cfg, state.Deps{NC: nc, Store: st, Log: s.log})
	if err != nil {
		return nil, err
	}
	return svc.Run, nil
}

// storeRetry paces the tries of an embedded store whose JetStream is not
// ready yet (a server starting, an account being enabled).
var storeRetry = backoff.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}

// openStore opens the system of record: Postgres at PostgresURL, else the
// embedded store on the state service's own connection, trying again
// while JetStream is not ready rather than giving up. With its own NATS
// server the stack's state service is the store's only writer.
func (s *Stack) openStore(ctx context.Context, nc *nats.Conn) (store.Store, error) {
	if s.cfg.PostgresURL != "" {
		return pgstore.Open(ctx, s.cfg.PostgresURL)
	}
	if s.nats == nil {
		s.log.Warn("no Postgres URL: using the embedded JetStream store")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	opts := kvstore.Options{Replicas: s.cfg.Streams.Replicas, Memory: s.cfg.Streams.Memory, SoleWriter: s.nats != nil, Log: s.cfg.Log}
	for try := 1; ; try++ {
		kv, err := kvstore.Open(ctx, js, s.names, opts)
		if err == nil {
			return kv, nil
		}
		if !kvstore.Unreachable(err) || ctx.Err() != nil {
			return nil, err
		}
		if try == 1 || try%10 == 0 {
			s.log.Warn("embedded store not ready; trying again", "err", err, "try", try)
		}
		backoff.Sleep(ctx, storeRetry.Delay(try))
	}
}

func (s *Stack) buildRegistry(ctx context.Context, nc *nats.Conn) (func(context.Context) error, error) {
	cfg := s.cfg.Registry
	cfg.Prefix, cfg.Streams = s.cfg.Prefix, s.cfg.Streams
	if a := cfg.Analysis; a.BaseURL == "" && !a.Off && !a.FallbackOnly && s.model != nil && scriptAnalyses(s.cfg.Script) {
		// The scripted model answers task analysis only when its script
		// says how (a "task_analysis" scenario); else the fallback.
		cfg.Analysis.BaseURL, cfg.Analysis.Model = s.modelURL, "scripted"
	}
	svc, err := registry.New(ctx, cfg, registry.Deps{NC: nc, Log: s.log})
	if err != nil {
		return nil, err
	}
	return svc.Run, nil
}

// scriptAnalyses says whether script answers the registry's task analysis.
func scriptAnalyses(script *scriptedmodel.Script) bool {
	if script == nil {
		return false
	}
	for _, sc := range script.Scenarios {
		if sc.Format == "task_analysis" {
			return true
		}
	}
	return false
}

func (s *Stack) buildScheduler(ctx context.Context, nc *nats.Conn) (func(context.Context) error, error) {
	cfg := s.cfg.Scheduler
	cfg.Prefix, cfg.Streams = s.cfg.Prefix, s.cfg.Streams
	svc, err := scheduler.New(ctx, cfg, scheduler.Deps{NC: nc, Log: s.log})
	if err != nil {
		return nil, err
	}
	return svc.Run, nil
}

func (s *Stack) buildExecutor(ctx context.Context, nc *nats.Conn) (func(context.Context) error, error) {
	cfg := s.cfg.Executor
	cfg.Prefix, cfg.Streams = s.cfg.Prefix, s.cfg.Streams
	cfg.Model.BaseURL = s.modelURL
	if s.model != nil && cfg.Model.Model == "" {
		cfg.Model.Model = "scripted"
	}
	if s.model != nil && cfg.Embedding.Model == "" && cfg.Embedding.BaseURL == "" {
		cfg.Embedding.Model = "scripted-embedding" // the scripted model's hashed bag of words
	}
	svc, err := executor.New(ctx, cfg, executor.Deps{NC: nc, Log: s.log})
	if err != nil {
		return nil, err
	}
	s.executor = svc
	return svc.Run, nil
}

func (s *Stack) buildRouter(ctx context.Context, nc *nats.Conn) (func(context.Context) error, error) {
	cfg := s.cfg.Router
	cfg.Prefix = s.cfg.Prefix
	svc, err := router.New(ctx, cfg, router.Deps{NC: nc, Log: s.log})
	if err != nil {
		return nil, err
	}
	s.router, s.routerNC = svc, nc
	return svc.Run, nil
}
