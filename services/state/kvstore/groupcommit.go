package kvstore

import (
	"context"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Group commit of task writes (Transition, AppendStep). The writes that
// wait at the same moment go out as JetStream async publishes: first every
// event (each with Nats-Expected-Last-Subject-Sequence on its task's history
// subject, the serialization point), all in flight at once, then — for the
// events that were recorded — every KV entry update (by revision), again
// all at once. Two pipelined round trips for the whole group instead of two
// per write. Each write's expectation is its own, so one that lost its race
// (a conflict: another writer appended first) does not fail the others;
// its caller alone re-reads and re-plans. A caller is answered after its
// event's ack (the record is durable) and its entry's update.

// entryWrite is one planned task write.
type entryWrite struct {
	ev       *agentmeshv1.TaskEvent // the last of the write's events
	evData   []byte                 // the history record of all of them
	after    uint64                 // stream sequence of the task's last event
	next     *agentmeshv1.Task
	nextData []byte
	rev      uint64 // KV revision the write was planned against
}

func newEntryWrite(evs []*agentmeshv1.TaskEvent, after uint64, next *agentmeshv1.Task, rev uint64) (*entryWrite, error) {
	evData, err := EncodeRecord(evs)
	if err != nil {
		return nil, err
	}
	nextData, err := marshal(next)
	if err != nil {
		return nil, err
	}
	return &entryWrite{ev: evs[len(evs)-1], evData: evData, after: after, next: next, nextData: nextData, rev: rev}, nil
}

// flush commits a group of writes; one outcome per write: nil (recorded),
// bus conflict (lost the race), or the store's error.
func (s *Store) flush(ctx context.Context, ws []*entryWrite) []error {
	errs := make([]error, len(ws))
	acks := make([]*jetstream.PubAck, len(ws))
	futures := make([]jetstream.PubAckFuture, len(ws))
	for i, w := range ws {
		msg := nats.NewMsg(s.names.StoreHistory(w.ev.TaskId))
		msg.Data = w.evData
		f, err := s.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(w.after))
		if err != nil {
			errs[i] = kvError("append event", err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		acks[i], errs[i] = awaitAck(ctx, f)
		if isWrongLastSeq(errs[i]) {
			errs[i] = bus.Errorf(bus.CodeConflict, "task %s: event %d lost a race", ws[i].ev.TaskId, ws[i].ev.Seq)
		} else if errs[i] != nil {
			errs[i] = kvError("append event", errs[i])
		}
	}

	// The events are the record; now bring the entries up to them.
	updates := make([]jetstream.PubAckFuture, len(ws))
	for i, w := range ws {
		if errs[i] != nil {
			continue
		}
		id := w.next.Id
		s.setHead(id, head{seq: w.ev.Seq, streamSeq: acks[i].Sequence}, taskstate.Terminal(w.next.Status))
		msg := nats.NewMsg(s.kvPut + id)
		msg.Data = w.nextData
		f, err := s.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(w.rev))
		if err == nil {
			updates[i] = f
		}
	}
	for i, f := range updates {
		w := ws[i]
		if errs[i] != nil {
			continue
		}
		if f != nil {
			if ack, err := awaitAck(ctx, f); err == nil {
				s.taskIndex.put(w.next.Id, w.next, ack.Sequence)
				continue
			}
		}
		// Someone else moved the entry (rolled it forward, maybe past next).
		s.rollForward(ctx, w.next.Id, w.next)
	}
	return errs
}

// awaitAck waits for a publish's ack.
func awaitAck(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CommitStats counts the groups committed (store.GroupCommitter).
func (s *Store) CommitStats() store.CommitStats { return s.group.Stats() }

// PauseCommits holds the groups back until resume (store.GroupCommitter).
func (s *Store) PauseCommits() (resume func()) { return s.group.Pause() }

// WaitingCommits is the number of writes queued (store.GroupCommitter).
func (s *Store) WaitingCommits() int { return s.group.Waiting() }

var _ store.GroupCommitter = (*Store)(nil)
