package scheduler

import (
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
)

// dispatchBackoff retries a dispatch that failed with unavailable (state
// restarting, its database down) or conflict a few times, quickly, before
// the event is nak'ed for redelivery a second later. A retried dispatch is
// safe: queued → assigned is compare-and-set, and a task found already
// assigned gets its work republished under the same Msg-Id.
var dispatchBackoff = bus.Backoff{Initial: 20 * time.Millisecond, Max: 400 * time.Millisecond, Tries: 6}
