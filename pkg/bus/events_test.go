package bus

import (
	"context"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func sampleEvent() *agentmeshv1.TaskEvent {
	return &agentmeshv1.TaskEvent{
		TaskId: "01JD3X4Y5Z6A7B8C9D0E1F2G3H", Seq: 5, Type: agentmeshv1.EventType_EVENT_TYPE_STEP,
		Time: timestamppb.New(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)), Status: agentmeshv1.TaskStatus_TASK_STATUS_RUNNING,
		Attempt: 1, Org: "acme", Node: "node-1",
		Step: &agentmeshv1.Step{Index: 2, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: strings.Repeat("word ", 100),
			Usage: &agentmeshv1.Usage{PromptTokens: 400, CompletionTokens: 100, TotalTokens: 500}},
	}
}

// Public events are JSON with the proto field names and their type and
// content type in headers; they decode back to the same message.
func TestEventMsgRoundTrip(t *testing.T) {
	ev := sampleEvent()
	msg, err := NewEventMsg(context.Background(), "am.evt.acme.task.x.step", ev)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(HeaderType) != "agentmesh.v1.TaskEvent" || msg.Header.Get(HeaderContentType) != ContentTypeJSON {
		t.Errorf("headers: %v", msg.Header)
	}
	if !strings.Contains(string(msg.Data), `"task_id":"01JD3X4Y5Z6A7B8C9D0E1F2G3H"`) || !strings.Contains(string(msg.Data), `"kind":"STEP_KIND_MODEL_TURN"`) {
		t.Errorf("payload is not snake_case protojson: %s", msg.Data)
	}
	var got agentmeshv1.TaskEvent
	if err := DecodeEvent(msg.Data, &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, ev) {
		t.Errorf("round trip: got %v, want %v", &got, ev)
	}
	// Unknown fields from a newer producer are ignored; garbage is an error.
	if err := DecodeEvent([]byte(`{"task_id":"a","from_the_future":1}`), &got); err != nil || got.TaskId != "a" {
		t.Errorf("unknown field: %v %v", err, &got)
	}
	if err := DecodeEvent([]byte{0x0a, 0x01, 'a'}, &got); err == nil {
		t.Error("a protobuf payload decoded as JSON")
	}
}

func FuzzDecodeEvent(f *testing.F) {
	msg, _ := NewEventMsg(context.Background(), "s", sampleEvent())
	f.Add(msg.Data)
	f.Add([]byte(`{"seq":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev agentmeshv1.TaskEvent
		_ = DecodeEvent(data, &ev)
	})
}

// The cost of JSON on the public subjects against protobuf (what they
// carried before), per event.
func BenchmarkEventEncoding(b *testing.B) {
	ev := sampleEvent()
	ctx := context.Background()
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := NewEventMsg(ctx, "am.evt.acme.task.x.step", ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := NewMsg(ctx, "am.evt.acme.task.x.step", ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	msg, _ := NewEventMsg(ctx, "s", ev)
	pmsg, _ := NewMsg(ctx, "s", ev)
	b.Run("json-decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got agentmeshv1.TaskEvent
			if err := DecodeEvent(msg.Data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf-decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got agentmeshv1.TaskEvent
			if err := proto.Unmarshal(pmsg.Data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
