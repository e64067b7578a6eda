// Package webhook holds what the router, the state service and the
// scheduler share about webhooks: the event types an endpoint may ask for
// and which bus event each one is, the message body, signing secrets and
// the Standard Webhooks signature (https://www.standardwebhooks.com:
// headers webhook-id, webhook-timestamp and webhook-signature, "v1,"
// and the base64 HMAC-SHA256 of "<id>.<timestamp>.<body>" under the
// secret's bytes, one signature per live secret, space-separated), and
// the retry plan of a delivery.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/oklog/ulid/v2"
)

// The event types.
const (
	TaskCompleted        = "task.completed"
	TaskFailed           = "task.failed"
	TaskCancelled        = "task.cancelled"
	TaskApprovalRequired = "task.approval_required"
	ProposalCreated      = "proposal.created"
	ScheduleRunFailed    = "schedule.run_failed"
)

// EventTypes lists every event type, in the order the docs give them.
var EventTypes = []string{TaskCompleted, TaskFailed, TaskCancelled, TaskApprovalRequired, ProposalCreated, ScheduleRunFailed}

// ValidEventType reports whether t is an event type.
func ValidEventType(t string) bool { return slices.Contains(EventTypes, t) }

// Wants reports whether an endpoint asking for types (none: all) gets an
// event of type t.
func Wants(types []string, t string) bool { return len(types) == 0 || slices.Contains(types, t) }

// TaskEventType is the event type of a task event, "" when no endpoint
// may ask for it: the three ends, a block on a tool call's approval, and a
// proposal's creation.
func TaskEventType(ev *agentmeshv1.TaskEvent) string {
	switch ev.GetType() {
	case agentmeshv1.EventType_EVENT_TYPE_STATUS:
		switch ev.GetStatus() {
		case agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED:
			return TaskCompleted
		case agentmeshv1.TaskStatus_TASK_STATUS_FAILED:
			return TaskFailed
		case agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED:
			return TaskCancelled
		case agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED:
			if ev.GetApproval().GetStatus() == agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING {
				return TaskApprovalRequired
			}
		}
	case agentmeshv1.EventType_EVENT_TYPE_PROPOSAL:
		if ev.GetProposal().GetStatus() == agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING {
			return ProposalCreated
		}
	}
	return ""
}

// Body is a message's JSON body: the event type, when it happened, and the
// event as the bus carries it (protojson).
func Body(eventType string, at time.Time, data json.RawMessage) ([]byte, error) {
	return json.Marshal(struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{eventType, at.UTC().Format(time.RFC3339Nano), data})
}

// DeliveryID is the id of the delivery of the event msgID (its
// Nats-Msg-Id, unique per event) to endpoint: "msg_" and a ULID whose time
// is the event's and whose randomness is a hash of both, so the same
// event fans out to the same delivery however often it is read, and ids
// sort by time.
func DeliveryID(endpoint, msgID string, at time.Time) string {
	h := sha256.Sum256([]byte(endpoint + "\x00" + msgID))
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(at))
	_ = id.SetEntropy(h[:10])
	return "msg_" + id.String()
}

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// NewSecret returns a fresh signing secret: whsec_ and the base64 of 32
// random bytes.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// Hint is the first characters of a secret, to recognise it.
func Hint(secret string) string {
	if len(secret) <= len(SecretPrefix)+4 {
		return secret
	}
	return secret[:len(SecretPrefix)+4]
}

// ErrSecret refuses a secret that is not whsec_ and base64.
var ErrSecret = errors.New("a signing secret is whsec_ and base64")

func secretKey(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, ErrSecret
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(key) == 0 {
		return nil, ErrSecret
	}
	return key, nil
}

// Signature is the webhook-signature header of a message signed with each
// of secrets: "v1,<base64>" per secret, space-separated.
func Signature(id string, ts time.Time, body []byte, secrets []string) (string, error) {
	parts := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, err := secretKey(s)
		if err != nil {
			return "", err
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(strconv.FormatInt(ts.Unix(), 10)))
		mac.Write([]byte{'.'})
		mac.Write(body)
		parts = append(parts, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(parts, " "), nil
}

// The headers of a message.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Sign sets the three headers of a message on h.
func Sign(h http.Header, id string, ts time.Time, body []byte, secrets []string) error {
	sig, err := Signature(id, ts, body, secrets)
	if err != nil {
		return err
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return nil
}

// The retry plan: a failed try is tried again after FirstRetry, doubling
// to MaxRetry (pkg/backoff, jittered), until GiveUpAfter has passed since
// the delivery was made.
const (
	FirstRetry  = 5 * time.Second
	MaxRetry    = time.Hour
	GiveUpAfter = 24 * time.Hour
)
