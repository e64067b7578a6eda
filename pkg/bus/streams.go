package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamOptions tune the streams of the bus.
type StreamOptions struct {
	// Replicas of each stream and KV bucket; 0 = Replicas(nc, 0): 3 when
	// the connection knows more than one NATS server, else 1.
	Replicas int
	// MaxAge of events and audit records; 0 means 7 days.
	MaxAge time.Duration
	// Memory keeps streams in memory (tests that do not restart).
	Memory bool
}

// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id.
const DuplicateWindow = 2 * time.Minute

// WebhookJobMaxAge bounds how long a webhook delivery stays on its stream.
const WebhookJobMaxAge = 48 * time.Hour

// EnsureStreams creates or updates the bus streams: events, work, webhook
// deliveries and audit
// (see package subjects). It is idempotent. Only the state service, the
// streams' owner, calls it (only its identity may); the others bind with
// WaitStream. Existing streams keep their replicas; it returns those with
// fewer than wanted, for the caller to report (LogReplication).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, n subjects.Names, o StreamOptions) ([]Replication, error) {
	o.Replicas = Replicas(js.Conn(), o.Replicas)
	if o.MaxAge <= 0 {
		o.MaxAge = 7 * 24 * time.Hour
	}
	storage := jetstream.FileStorage
	if o.Memory {
		storage = jetstream.MemoryStorage
	}
	cfgs := []jetstream.StreamConfig{
		{
			Name:        n.EventsStream(),
			Description: "agentmesh task and agent events",
			Subjects:    []string{n.Events()},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      o.MaxAge,
			Storage:     storage,
			Replicas:    o.Replicas,
			Duplicates:  DuplicateWindow,
		},
		{
			Name:        n.WorkStream(),
			Description: "agentmesh dispatched work, pulled by executors",
			Subjects:    []string{n.WorkAll()},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     storage,
			Replicas:    o.Replicas,
			Duplicates:  DuplicateWindow,
		},
		{
			// Webhook deliveries to make: each stays until delivered or
			// given up (a day of tries); two days bound what a stuck
			// consumer could leave behind.
			Name:        n.WebhooksStream(),
			Description: "agentmesh webhook deliveries to make, pulled by the schedulers",
			Subjects:    []string{n.WebhookJobsAll()},
			Retention:   jetstream.WorkQueuePolicy,
			MaxAge:      WebhookJobMaxAge,
			Storage:     storage,
			Replicas:    o.Replicas,
			Duplicates:  DuplicateWindow,
		},
		{
			Name:        n.AuditStream(),
			Description: "agentmesh requests and heartbeats (audit trail)",
			Subjects:    n.AuditSubjects(),
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      o.MaxAge,
			Storage:     storage,
			Replicas:    o.Replicas,
			NoAck:       true,
		},
	}
	var reps []Replication
	for _, cfg := range cfgs {
		_, r, err := EnsureStream(ctx, js, cfg)
		reps = append(reps, r...)
		if err != nil {
			return reps, err
		}
	}
	return reps, nil
}

// WaitStream waits, bounded by ctx, until the named stream exists. A
// service that binds to a stream another one owns (the state service
// creates the bus streams) calls it in New, so services still start in any
// order.
func WaitStream(ctx context.Context, js jetstream.JetStream, name string) error {
	wait := backoff.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}
	for n := 1; ; n++ {
		_, err := js.Stream(ctx, name)
		if err == nil {
			return nil
		}
		// Not created yet, or JetStream of the account not answering yet
		// (a server still starting): wait; anything else is an error.
		if !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		if !backoff.Sleep(ctx, wait.Delay(n)) {
			return fmt.Errorf("stream %s does not exist (is the state service running?): %w", name, ctx.Err())
		}
	}
}
