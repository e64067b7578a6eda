package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClusterReplicas is how many replicas streams and KV buckets get by
// default on a NATS cluster: a majority of three survives the loss of any
// one server.
const ClusterReplicas = 3

// Replicas is the number of replicas the streams and KV buckets a service
// creates get: configured when it is above 0 (AGENTMESH_STREAM_REPLICAS);
// otherwise ClusterReplicas when the connection knows more than one NATS
// server — a URL list, or the servers of a cluster the server it reached
// told it of — and 1 for a lone server (agentmesh dev, the tests).
func Replicas(nc *nats.Conn, configured int) int {
	if configured > 0 {
		return configured
	}
	if nc != nil && len(nc.Servers()) > 1 {
		return ClusterReplicas
	}
	return 1
}

// Replication reports a stream (or a KV bucket's stream) that exists with
// fewer replicas than wanted. Existing streams keep their replicas:
// changing them is the operator's act, never a side effect of a service
// starting with another setting.
type Replication struct {
	Stream     string
	Have, Want int
}

func (r Replication) String() string {
	return fmt.Sprintf("stream %s has %d replica(s), %d wanted: it does not survive the loss of a NATS server as configured; scale it with `nats stream edit %s --replicas %d`",
		r.Stream, r.Have, r.Want, r.Stream, r.Want)
}

// LogReplication warns about each stream with fewer replicas than wanted.
func LogReplication(log *slog.Logger, reps []Replication) {
	for _, r := range reps {
		log.Warn("stream has fewer replicas than wanted", "stream", r.Stream, "replicas", r.Have, "wanted", r.Want, "fix", r.String())
	}
}

// existingReplicas returns the replicas of the named stream, or 0 when it
// does not exist.
func existingReplicas(ctx context.Context, js jetstream.JetStream, name string) (int, error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", name, err)
	}
	return s.CachedInfo().Config.Replicas, nil
}

// keep sets *want to the replicas of an existing stream (have > 0) and
// reports it when that is fewer than wanted.
func keep(name string, have int, want *int) []Replication {
	if have <= 0 {
		return nil
	}
	var out []Replication
	if have < *want {
		out = append(out, Replication{Stream: name, Have: have, Want: *want})
	}
	*want = have
	return out
}

// EnsureStream creates the stream of cfg, or updates an existing one to cfg
// keeping its replicas; it reports the stream when it has fewer replicas
// than cfg asks for.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, []Replication, error) {
	have, err := existingReplicas(ctx, js, cfg.Name)
	if err != nil {
		return nil, nil, err
	}
	reps := keep(cfg.Name, have, &cfg.Replicas)
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, reps, fmt.Errorf("ensure stream %s (%d replicas): %w", cfg.Name, cfg.Replicas, err)
	}
	return s, reps, nil
}

// EnsureKeyValue creates the KV bucket of cfg, or updates an existing one
// to cfg keeping its replicas, as EnsureStream does.
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, []Replication, error) {
	name := "KV_" + cfg.Bucket
	have, err := existingReplicas(ctx, js, name)
	if err != nil {
		return nil, nil, err
	}
	reps := keep(name, have, &cfg.Replicas)
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, reps, fmt.Errorf("ensure KV bucket %s (%d replicas): %w", cfg.Bucket, cfg.Replicas, err)
	}
	return kv, reps, nil
}
