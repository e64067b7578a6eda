package router

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// A delivery id is one key of the state's store (msg_<ULID>): a NATS
// wildcard there matched some other delivery of the org (and redelivered
// it), and a space or a dot failed as Internal. Each is refused by name
// before the bus.
func TestRedeliverWebhookMalformedID(t *testing.T) {
	e := start(t, Config{})
	w := agentmeshv1.NewWebhookServiceClient(e.conn)
	for _, id := range []string{"*", ">", "a b", "a.b", "..", "\t", strings.Repeat("x", 200)} {
		_, err := w.RedeliverWebhook(testCtx(t), &agentmeshv1.RedeliverWebhookRequest{DeliveryId: id})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "delivery_id") {
			t.Errorf("RedeliverWebhook(%q): got %v, want InvalidArgument on delivery_id", id, err)
		}
	}
}
