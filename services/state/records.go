package state

import (
	"context"
	"errors"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"
)

// Keys, schedules and webhook endpoints (issue 31) are versioned records
// of the store (store.Ops), each changed by reading it, planning the change
// and putting it with compare-and-set (update), and each change announced
// by an event on the events stream (publishRecord).

// errNoOps answers when the store keeps no keys, schedules or webhooks
// (both real stores do; a test's wrapper may not).
var errNoOps = bus.Errorf(bus.CodeFailedPrecondition, "this state service's store keeps no keys, schedules or webhooks")

// opsStore returns the store's records, or errNoOps.
func (s *Service) opsStore() (store.Ops, error) {
	if s.ops == nil {
		return nil, errNoOps
	}
	return s.ops, nil
}

// maxUpdateTries bounds the re-reads of an update that lost a race.
const maxUpdateTries = 16

// update reads a record, lets change make the next one — or say there is
// nothing to change (false), or refuse (an error) — and puts it at the
// version read; when another write came in between (failed_precondition)
// it reads and changes again. With pinned set the version read must be the
// caller's: it is not tried again. It reports whether it wrote.
func update[T any](ctx context.Context, pinned bool, get func(context.Context) (T, error), change func(T) (T, bool, error), put func(context.Context, T) (T, error)) (T, bool, error) {
	var zero T
	for range maxUpdateTries {
		cur, err := get(ctx)
		if err != nil {
			return zero, false, err
		}
		next, changed, err := change(cur)
		if err != nil || !changed {
			return cur, false, err
		}
		out, err := put(ctx, next)
		if errors.Is(err, bus.ErrFailedPrecondition) && !pinned {
			continue
		}
		return out, err == nil, err
	}
	return zero, false, bus.Errorf(bus.CodeConflict, "changed by others %d times while this change was made; retry", maxUpdateTries)
}

// publishRecord publishes a record's change event (JSON) on subject with
// Nats-Msg-Id msgID and waits for its acknowledgement; a publish that
// fails for a passing reason goes to the outbox.
func (s *Service) publishRecord(ctx context.Context, subject, msgID string, ev proto.Message) {
	msg, err := bus.NewEventMsg(ctx, subject, ev)
	if err != nil {
		s.log.Error("record event not published", "subject", subject, "err", err)
		return
	}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	if f := s.publishAsync(msg); f != nil {
		s.await(ctx, []jetstream.PubAckFuture{f})
	}
}

// opsEndpoints are the operations on keys, schedules and webhooks.
func (s *Service) opsEndpoints() []struct {
	op string
	h  micro.Handler
} {
	return []struct {
		op string
		h  micro.Handler
	}{
		{subjects.StateCreateKey, bus.Handler(s.log, func() *busv1.CreateKeyRequest { return &busv1.CreateKeyRequest{} }, s.createKey)},
		{subjects.StateGetKey, bus.Handler(s.log, func() *busv1.GetKeyRequest { return &busv1.GetKeyRequest{} }, s.getKey)},
		{subjects.StateListKeys, bus.Handler(s.log, func() *busv1.ListKeysRequest { return &busv1.ListKeysRequest{} }, s.listKeys)},
		{subjects.StateRevokeKey, bus.Handler(s.log, func() *busv1.RevokeKeyRequest { return &busv1.RevokeKeyRequest{} }, s.revokeKey)},
		{subjects.StateRotateKey, bus.Handler(s.log, func() *busv1.RotateKeyRequest { return &busv1.RotateKeyRequest{} }, s.rotateKey)},

		{subjects.StateCreateSchedule, bus.Handler(s.log, func() *busv1.PutScheduleRequest { return &busv1.PutScheduleRequest{} }, s.createSchedule)},
		{subjects.StateUpdateSchedule, bus.Handler(s.log, func() *busv1.PutScheduleRequest { return &busv1.PutScheduleRequest{} }, s.updateSchedule)},
		{subjects.StateGetSchedule, bus.Handler(s.log, func() *busv1.GetScheduleRequest { return &busv1.GetScheduleRequest{} }, s.getSchedule)},
		{subjects.StateListSchedules, bus.Handler(s.log, func() *busv1.ListSchedulesRequest { return &busv1.ListSchedulesRequest{} }, s.listSchedules)},
		{subjects.StateDeleteSchedule, bus.Handler(s.log, func() *busv1.GetScheduleRequest { return &busv1.GetScheduleRequest{} }, s.deleteSchedule)},
		{subjects.StatePauseSchedule, bus.Handler(s.log, func() *busv1.PauseScheduleRequest { return &busv1.PauseScheduleRequest{} }, s.pauseSchedule)},
		{subjects.StateTriggerSchedule, bus.Handler(s.log, func() *busv1.FireScheduleRequest { return &busv1.FireScheduleRequest{} }, s.triggerSchedule)},
		{subjects.StateFireSchedules, bus.Handler(s.log, func() *busv1.FireSchedulesRequest { return &busv1.FireSchedulesRequest{} }, s.fireSchedules)},

		{subjects.StateCreateWebhook, bus.Handler(s.log, func() *busv1.PutWebhookEndpointRequest { return &busv1.PutWebhookEndpointRequest{} }, s.createWebhook)},
		{subjects.StateUpdateWebhook, bus.Handler(s.log, func() *busv1.PutWebhookEndpointRequest { return &busv1.PutWebhookEndpointRequest{} }, s.updateWebhook)},
		{subjects.StateRotateWebhook, bus.Handler(s.log, func() *busv1.PutWebhookEndpointRequest { return &busv1.PutWebhookEndpointRequest{} }, s.rotateWebhook)},
		{subjects.StateGetWebhook, bus.Handler(s.log, func() *busv1.GetWebhookEndpointRequest { return &busv1.GetWebhookEndpointRequest{} }, s.getWebhook)},
		{subjects.StateListWebhooks, bus.Handler(s.log, func() *busv1.ListWebhookEndpointsRequest { return &busv1.ListWebhookEndpointsRequest{} }, s.listWebhooks)},
		{subjects.StateDeleteWebhook, bus.Handler(s.log, func() *busv1.GetWebhookEndpointRequest { return &busv1.GetWebhookEndpointRequest{} }, s.deleteWebhook)},
		{subjects.StateSigningWebhook, bus.Handler(s.log, func() *busv1.GetWebhookEndpointRequest { return &busv1.GetWebhookEndpointRequest{} }, s.signingWebhook)},
		{subjects.StateSigningWebhooks, bus.Handler(s.log, func() *busv1.ListWebhookEndpointsRequest { return &busv1.ListWebhookEndpointsRequest{} }, s.signingWebhooks)},
		{subjects.StateRecordDeliveries, bus.Handler(s.log, func() *busv1.RecordDeliveriesRequest { return &busv1.RecordDeliveriesRequest{} }, s.recordDeliveries)},
		{subjects.StateListDeliveries, bus.Handler(s.log, func() *busv1.ListDeliveriesRequest { return &busv1.ListDeliveriesRequest{} }, s.listDeliveries)},
		{subjects.StateRedeliver, bus.Handler(s.log, func() *busv1.RedeliverRequest { return &busv1.RedeliverRequest{} }, s.redeliver)},
	}
}
