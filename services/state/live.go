package state

import (
	"context"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
)

// The live relay. Executors publish a task's streamed model output on
// <p>.token.<org>.task.<id> (subjects.Names.TaskTokens), which only state
// hears (queue group "state": one replica relays each message). State
// republishes a message on the public <p>.live.<org>.task.<id>.token
// (LiveTokens) only when the record shows the task running, in that org,
// under the message's attempt, and the message names that task and org;
// anything else is dropped. No identity but state may publish on
// <p>.live.>, so a stolen executor credential cannot write into an org's
// live subjects directly, nor for a task that does not run there now. What
// the record says of a task is cached for liveRecheck.

// liveRecheck is how long the relay trusts what it read of a task.
const liveRecheck = 2 * time.Second

// liveCacheMax bounds the relay's cache (it is cleared when full).
const liveCacheMax = 1 << 16

type liveRelay struct {
	s     *Service
	mu    sync.Mutex
	tasks map[string]liveTask
}

// liveTask is what the record said of a task when last read.
type liveTask struct {
	org     string
	attempt int32
	running bool
	read    time.Time
}

// startLiveRelay subscribes the relay.
func (s *Service) startLiveRelay() (*nats.Subscription, error) {
	r := &liveRelay{s: s, tasks: map[string]liveTask{}}
	return s.nc.QueueSubscribe(s.names.TokenRelayAll(), subjects.QueueState, r.relay)
}

// relay republishes one executor message on its task's live subject when
// the record allows it.
func (r *liveRelay) relay(m *nats.Msg) {
	org, id, ok := r.s.names.ParseTaskTokens(m.Subject)
	if !ok {
		return
	}
	var ev agentmeshv1.TaskEvent
	if err := bus.DecodeEvent(m.Data, &ev); err != nil || ev.Type != agentmeshv1.EventType_EVENT_TYPE_TOKEN ||
		ev.TaskId != id || subjects.OrgToken(ev.Org) != org {
		r.s.log.Debug("live token dropped: malformed", "subject", m.Subject)
		return
	}
	t, ok := r.lookup(id)
	if !ok || !t.running || subjects.OrgToken(t.org) != org || t.attempt != ev.Attempt {
		r.s.log.Debug("live token dropped: the task does not run there under that attempt", "task_id", id, "subject", m.Subject)
		return
	}
	out := &nats.Msg{Subject: r.s.names.LiveTokens(t.org, id), Data: m.Data, Header: m.Header}
	if err := r.s.nc.PublishMsg(out); err != nil {
		r.s.log.Debug("live token not relayed", "task_id", id, "err", err)
	}
}

// lookup returns what the record says of task id, read again when older
// than liveRecheck.
func (r *liveRelay) lookup(id string) (liveTask, bool) {
	now := time.Now()
	r.mu.Lock()
	t, ok := r.tasks[id]
	r.mu.Unlock()
	if ok && now.Sub(t.read) < liveRecheck {
		return t, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	task, err := r.s.store.GetTask(ctx, id)
	if err != nil {
		return liveTask{}, false
	}
	t = liveTask{org: task.Org, attempt: task.Attempt, running: task.Status == taskstate.Running, read: now}
	r.mu.Lock()
	if len(r.tasks) >= liveCacheMax {
		clear(r.tasks)
	}
	r.tasks[id] = t
	r.mu.Unlock()
	return t, true
}
