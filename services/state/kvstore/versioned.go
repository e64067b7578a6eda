package kvstore

import (
	"context"
	"errors"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// Agents and skills are versioned entries of a bucket keyed by (org, name)
// (agentKey), written by one loop: read the entry, let the plan
// (store.PlanAgent, store.PlanSkill) decide what to write, write it by
// revision — a create if absent, else an update of the revision read — and
// when another writer came in between, read and plan again, at most
// maxRetries times. A delete is compare-and-set on the revision read the
// same way.

// versioned is one bucket of versioned entries of type T.
type versioned[T proto.Message] struct {
	kv   jetstream.KeyValue
	kind string // "agent" or "skill", in errors
	// get reads an entry: (nil, 0, nil) when absent.
	get      func(ctx context.Context, org, name string) (T, uint64, error)
	notFound func(name string) error
}

func (s *Store) agentEntries() versioned[*agentmeshv1.Agent] {
	return versioned[*agentmeshv1.Agent]{kv: s.agents, kind: "agent", get: s.getAgent, notFound: store.AgentNotFound}
}

func (s *Store) skillEntries() versioned[*agentmeshv1.Skill] {
	return versioned[*agentmeshv1.Skill]{kv: s.skillsKV, kind: "skill", get: s.getSkill, notFound: store.SkillNotFound}
}

// put writes what plan makes of the entry (org, name) — plan gets the
// current one, nil when absent — and returns it with its revision.
func (v versioned[T]) put(ctx context.Context, org, name string, plan func(cur T) (T, error)) (T, uint64, error) {
	var zero T
	key := agentKey(org, name)
	for range maxRetries {
		cur, rev, err := v.get(ctx, org, name)
		if err != nil {
			return zero, 0, err
		}
		next, err := plan(cur)
		if err != nil {
			return zero, 0, err
		}
		data, err := marshal(next)
		if err != nil {
			return zero, 0, err
		}
		var nrev uint64
		if rev == 0 {
			nrev, err = v.kv.Create(ctx, key, data)
		} else {
			nrev, err = v.kv.Update(ctx, key, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // lost a race: re-read, let the plan decide again
		}
		if err != nil {
			return zero, 0, kvError("put "+v.kind, err)
		}
		return next, nrev, nil
	}
	return zero, 0, bus.Errorf(bus.CodeConflict, "%s %q: too much contention, retry", v.kind, name)
}

// delete removes the entry (org, name) or answers notFound. It returns the
// revision it deleted: the delete marker's own is not returned, and rev+1
// orders it after the put that was read (the watcher confirms it).
func (v versioned[T]) delete(ctx context.Context, org, name string) (uint64, error) {
	for range maxRetries {
		_, rev, err := v.get(ctx, org, name)
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			return 0, v.notFound(name)
		}
		err = v.kv.Delete(ctx, agentKey(org, name), jetstream.LastRevision(rev))
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return 0, kvError("delete "+v.kind, err)
		}
		return rev, nil
	}
	return 0, bus.Errorf(bus.CodeConflict, "%s %q: too much contention, retry", v.kind, name)
}
