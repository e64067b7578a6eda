package bus

import (
	"context"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

// Request sends req to subject and decodes the reply into resp. An error
// reply comes back as *Error with its code; no responder is ErrUnavailable.
// It waits at most DefaultTimeout (or ctx's deadline if sooner): a request
// lost on the way, e.g. by a service that was stopping, surfaces as
// unavailable instead of holding the caller for its whole deadline. Its
// latency is observed as agentmesh_bus_request_seconds{op,code}, and it
// is a client span of the sender's service (trace.go).
func Request(ctx context.Context, nc *nats.Conn, subject string, req, resp proto.Message) error {
	start := time.Now()
	ctx, span := startRequest(ctx, nc, subject)
	err := request(ctx, nc, subject, req, resp)
	endSpan(span, err)
	metrics.Since(metrics.BusRequest, start, opOf(subject), codeLabel(err))
	return err
}

// opOf is a request subject without its prefix ("state.task.get").
func opOf(subject string) string {
	for _, svc := range []string{".state.", ".registry."} {
		if i := strings.Index(subject, svc); i >= 0 {
			return subject[i+1:]
		}
	}
	return subject
}

// codeLabel is "ok" or the error's bus code.
func codeLabel(err error) string {
	if err == nil {
		return "ok"
	}
	return CodeOf(err)
}
