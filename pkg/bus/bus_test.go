package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// serve registers fn as a micro endpoint on subject "t.get".
func serve(t *testing.T, nc *nats.Conn, fn bus.HandlerFunc[*busv1.GetTaskRequest, *busv1.GetTaskResponse]) {
	t.Helper()
	log := testlog.New(t)
	svc, err := micro.AddService(nc, micro.Config{Name: "test", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	h := bus.Handler(log, func() *busv1.GetTaskRequest { return &busv1.GetTaskRequest{} }, fn)
	if err := svc.AddEndpoint("get", bus.Async(nc, make(chan struct{}, 4), h), micro.WithEndpointSubject("t.get")); err != nil {
		t.Fatal(err)
	}
}

func TestRequestReplyAndErrors(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	serve(t, nc, func(ctx context.Context, req *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
		switch req.Id {
		case "missing":
			return nil, bus.Errorf(bus.CodeNotFound, "task %q not found", req.Id)
		case "field":
			return nil, bus.FieldError("id", "too long")
		case "bare":
			return nil, &bus.Error{Code: bus.CodeConflict}
		case "plain":
			return nil, errors.New("disk on fire")
		case "panic":
			panic("boom")
		}
		return &busv1.GetTaskResponse{}, nil
	})
	tests := []struct {
		id        string
		want      error
		wantField string
	}{
		{"ok", nil, ""},
		{"missing", bus.ErrNotFound, ""},
		{"field", bus.ErrInvalidArgument, "id"},
		{"bare", bus.ErrConflict, ""},
		{"plain", bus.ErrInternal, ""},
		{"panic", bus.ErrInternal, ""},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := bus.Request(ctx, nc, "t.get", &busv1.GetTaskRequest{Id: tt.id}, &busv1.GetTaskResponse{})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want code %s", err, bus.CodeOf(tt.want))
			}
			var be *bus.Error
			if errors.As(err, &be) && be.Field != tt.wantField {
				t.Errorf("field = %q, want %q", be.Field, tt.wantField)
			}
		})
	}
}

func TestMalformedRequestIsAnsweredAndServiceSurvives(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	serve(t, nc, func(ctx context.Context, req *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
		return &busv1.GetTaskResponse{}, nil
	})
	reply, err := nc.Request("t.get", []byte{0xff, 0xff, 0xff}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := reply.Header.Get(bus.HeaderErrorCode); got != bus.CodeInvalidArgument {
		t.Fatalf("error code = %q, want %q", got, bus.CodeInvalidArgument)
	}
	if err := bus.Request(context.Background(), nc, "t.get", &busv1.GetTaskRequest{Id: "x"}, &busv1.GetTaskResponse{}); err != nil {
		t.Fatalf("after a malformed request: %v", err)
	}
}

func TestNoResponderIsUnavailable(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	err := bus.Request(context.Background(), nc, "nobody.home", &busv1.GetTaskRequest{}, &busv1.GetTaskResponse{})
	if !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("got %v, want unavailable", err)
	}
}

func TestErrorIsMatchesByCode(t *testing.T) {
	err := errors.Join(errors.New("context"), bus.Errorf(bus.CodeNotFound, "task x"))
	if !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("errors.Is(%v, ErrNotFound) = false, want true", err)
	}
	if errors.Is(err, bus.ErrConflict) {
		t.Errorf("errors.Is(%v, ErrConflict) = true, want false", err)
	}
	round := bus.FromProto(bus.ToProto(bus.FieldError("input", "required")))
	if round.Code != bus.CodeInvalidArgument || round.Field != "input" || round.Message != "required" {
		t.Errorf("round trip = %+v", round)
	}
}
