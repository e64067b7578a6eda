package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// HeaderContentType says how a payload is encoded. Public events carry
// ContentTypeJSON; requests and replies between services are protobuf.
const HeaderContentType = "Content-Type"

// HeaderFollowers, on a task's terminal event, is FollowersNone when state
// knew, right after the end was committed, that nothing follows it: no
// parent to record the end in, no unfinished sub-task, no task waiting on
// it. The scheduler then neither settles the task nor looks for its
// dependents (two requests fewer per task). Without the header an end is
// settled and resolved as always; a wrong "none" could only delay a
// follower until the scheduler's sweep.
const HeaderFollowers = "Am-Followers"

// FollowersNone is HeaderFollowers' one value.
const FollowersNone = "none"

// ContentTypeJSON is the content type of public event payloads.
const ContentTypeJSON = "application/json"

// eventJSON is how public events are written: protojson with the proto
// field names (snake_case, as docs/events.md documents them).
var eventJSON = protojson.MarshalOptions{UseProtoNames: true}

var eventJSONIn = protojson.UnmarshalOptions{DiscardUnknown: true}

// NewEventMsg builds a public event message for subject: m as JSON
// (protojson), its type in HeaderType, ctx's trace context.
func NewEventMsg(ctx context.Context, subject string, m proto.Message) (*nats.Msg, error) {
	data, err := eventJSON.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", m, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(HeaderType, string(m.ProtoReflect().Descriptor().FullName()))
	msg.Header.Set(HeaderContentType, ContentTypeJSON)
	Inject(ctx, msg.Header)
	return msg, nil
}

// DecodeEvent decodes a public event payload (JSON) into m. Unknown
// fields are ignored, so a newer producer does not break an older reader.
func DecodeEvent(data []byte, m proto.Message) error {
	if err := eventJSONIn.Unmarshal(data, m); err != nil {
		return fmt.Errorf("decode %T: %w", m, err)
	}
	return nil
}
