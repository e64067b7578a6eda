package state

import (
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Only the executor's requeue may say when a task goes again (a model's
// rate-limit wait), at most an hour ahead.
func TestRequeueNotBefore(t *testing.T) {
	soon := timestamppb.New(time.Now().Add(time.Minute))
	for _, tt := range []struct {
		name  string
		op    string
		req   *busv1.TransitionRequest
		field string
	}{
		{"requeue waiting", subjects.StateRequeue, &busv1.TransitionRequest{TaskId: "t", From: taskstate.Running, Attempt: 1, NotBefore: soon}, ""},
		{"requeue too far", subjects.StateRequeue, &busv1.TransitionRequest{TaskId: "t", From: taskstate.Running, Attempt: 1,
			NotBefore: timestamppb.New(time.Now().Add(2 * time.Hour))}, "not_before"},
		{"requeue invalid time", subjects.StateRequeue, &busv1.TransitionRequest{TaskId: "t", From: taskstate.Running, Attempt: 1,
			NotBefore: &timestamppb.Timestamp{Nanos: -1}}, "not_before"},
		{"fail with a time", subjects.StateFail, &busv1.TransitionRequest{TaskId: "t", From: taskstate.Running, Attempt: 1, NotBefore: soon}, "not_before"},
		{"dispatch with a time", subjects.StateDispatch, &busv1.TransitionRequest{TaskId: "t", From: taskstate.Queued, NextAttempt: true, NotBefore: soon}, "not_before"},
	} {
		err := intentOf(t, tt.op).check(tt.req)
		var be *bus.Error
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%s: %v, want allowed", tt.name, err)
		case tt.field != "" && (!asBusError(err, &be) || be.Field != tt.field):
			t.Errorf("%s: %v, want invalid %s", tt.name, err, tt.field)
		}
	}
}
