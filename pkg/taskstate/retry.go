package taskstate

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/buserr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Retries ride the one transition table: a failure that the task's retry
// policy retries does not go to failed (terminal statuses never change);
// the request to fail an assigned or running task becomes running →
// queued (or assigned → queued), the event carrying the failure's kind and
// reason, the retry count and a not-before time. The scheduler does not
// dispatch the task before that time; the next attempt resumes from the
// checkpoints. Once the policy's attempts are spent, the failure is
// recorded as failed.

type failureKind = agentmeshv1.FailureKind

// Failure kinds that a retry policy may retry. Everything else (budget,
// resource, approval, agent/policy, cancellation) never retries.
var retryableKinds = []failureKind{
	agentmeshv1.FailureKind_FAILURE_KIND_MODEL,
	agentmeshv1.FailureKind_FAILURE_KIND_INTERNAL,
	agentmeshv1.FailureKind_FAILURE_KIND_EXECUTOR_LOST,
	agentmeshv1.FailureKind_FAILURE_KIND_TIMEOUT,
}

// Bounds of a retry policy and a queue timeout.
const (
	MaxRetryAttempts  = 100
	MinBackoff        = 10 * time.Millisecond
	MaxBackoffLimit   = 24 * time.Hour
	MaxMultiplier     = 10.0
	MinQueueTimeout   = time.Second
	MaxQueueTimeout   = 30 * 24 * time.Hour
	defaultRetryDelay = 2 * time.Second
)

// DefaultRetryPolicy is the policy of a task whose agent and request set
// none: transient kinds retry 3 times (4 attempts) with exponential
// backoff from 2s, doubling, capped at 2m, ±20% jitter.
func DefaultRetryPolicy() *agentmeshv1.RetryPolicy {
	return &agentmeshv1.RetryPolicy{
		MaxAttempts:    4,
		InitialBackoff: durationpb.New(defaultRetryDelay),
		Multiplier:     2,
		MaxBackoff:     durationpb.New(2 * time.Minute),
		Jitter:         0.2,
		RetryOn:        append([]failureKind(nil), retryableKinds...),
	}
}

// Retryable reports whether a policy may retry failures of kind k at all.
func Retryable(k failureKind) bool {
	for _, r := range retryableKinds {
		if r == k {
			return true
		}
	}
	return false
}

// MergeRetryPolicy returns base with every field over sets replacing it.
// Neither argument is modified; nil arguments are empty policies.
func MergeRetryPolicy(base, over *agentmeshv1.RetryPolicy) *agentmeshv1.RetryPolicy {
	out := &agentmeshv1.RetryPolicy{}
	if base != nil {
		out = proto.Clone(base).(*agentmeshv1.RetryPolicy)
	}
	if over == nil {
		return out
	}
	if over.MaxAttempts != 0 {
		out.MaxAttempts = over.MaxAttempts
	}
	if over.InitialBackoff != nil {
		out.InitialBackoff = over.InitialBackoff
	}
	if over.Multiplier != 0 {
		out.Multiplier = over.Multiplier
	}
	if over.MaxBackoff != nil {
		out.MaxBackoff = over.MaxBackoff
	}
	if over.Jitter != 0 {
		out.Jitter = over.Jitter
	}
	if len(over.RetryOn) > 0 {
		out.RetryOn = append([]failureKind(nil), over.RetryOn...)
	}
	return out
}

// EffectiveRetryPolicy is the policy a task runs under: the defaults,
// overridden by its agent's policy (as accepted with the task), overridden
// by the task's own.
func EffectiveRetryPolicy(t *agentmeshv1.Task) *agentmeshv1.RetryPolicy {
	return MergeRetryPolicy(MergeRetryPolicy(DefaultRetryPolicy(), t.GetAgentSpec().GetRetryPolicy()), t.GetRetryPolicy())
}

// EffectiveQueueTimeout is the task's queue timeout, else its agent's; 0
// means none.
func EffectiveQueueTimeout(t *agentmeshv1.Task) time.Duration {
	if d := t.GetQueueTimeout(); d != nil {
		return d.AsDuration()
	}
	return t.GetAgentSpec().GetQueueTimeout().AsDuration()
}

// ValidateRetryPolicy checks a policy given by a client. field prefixes
// the field names in the error ("retry_policy").
func ValidateRetryPolicy(field string, p *agentmeshv1.RetryPolicy) error {
	if p == nil {
		return nil
	}
	if p.MaxAttempts < 0 || p.MaxAttempts > MaxRetryAttempts {
		return buserr.FieldError(field+".max_attempts", "%d is out of range (1 to %d; 0 inherits)", p.MaxAttempts, MaxRetryAttempts)
	}
	checkDur := func(name string, d *durationpb.Duration) error {
		if d == nil {
			return nil
		}
		if err := d.CheckValid(); err != nil {
			return buserr.FieldError(field+"."+name, "%v", err)
		}
		v := d.AsDuration()
		if v != 0 && (v < MinBackoff || v > MaxBackoffLimit) {
			return buserr.FieldError(field+"."+name, "%s is out of range (%s to %s; 0 inherits)", v, MinBackoff, MaxBackoffLimit)
		}
		return nil
	}
	if err := checkDur("initial_backoff", p.InitialBackoff); err != nil {
		return err
	}
	if err := checkDur("max_backoff", p.MaxBackoff); err != nil {
		return err
	}
	if ib, mb := p.InitialBackoff.AsDuration(), p.MaxBackoff.AsDuration(); p.InitialBackoff != nil && p.MaxBackoff != nil && ib != 0 && mb != 0 && mb < ib {
		return buserr.FieldError(field+".max_backoff", "%s is below initial_backoff %s", mb, ib)
	}
	if m := p.Multiplier; math.IsNaN(m) || (m != 0 && (m < 1 || m > MaxMultiplier)) {
		return buserr.FieldError(field+".multiplier", "%v is out of range (1 to %v; 0 inherits)", m, MaxMultiplier)
	}
	if j := p.Jitter; math.IsNaN(j) || j > 1 {
		return buserr.FieldError(field+".jitter", "%v is out of range (0 to 1; negative = none, 0 inherits)", j)
	}
	for i, k := range p.RetryOn {
		if _, ok := agentmeshv1.FailureKind_name[int32(k)]; !ok || k == agentmeshv1.FailureKind_FAILURE_KIND_UNSPECIFIED {
			return buserr.FieldError(fmt.Sprintf("%s.retry_on[%d]", field, i), "unknown failure kind %d", int32(k))
		}
		if !Retryable(k) {
			return buserr.FieldError(fmt.Sprintf("%s.retry_on[%d]", field, i), "%s never retries (only MODEL, INTERNAL, EXECUTOR_LOST and TIMEOUT may)", KindName(k))
		}
	}
	return nil
}

// ValidateQueueTimeout checks a queue timeout given by a client (nil or 0
// = none).
func ValidateQueueTimeout(field string, d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return buserr.FieldError(field, "%v", err)
	}
	if v := d.AsDuration(); v != 0 && (v < MinQueueTimeout || v > MaxQueueTimeout) {
		return buserr.FieldError(field, "%s is out of range (%s to %s; 0 = no limit)", v, MinQueueTimeout, MaxQueueTimeout)
	}
	return nil
}

// KindName is the short lower-case name of a failure kind ("model").
func KindName(k failureKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "FAILURE_KIND_"))
}

// RetryDelay is the wait before retry number n (0-based) of a task under
// p. The jitter is derived from the task id and n, so a replay plans the
// same wait.
func RetryDelay(p *agentmeshv1.RetryPolicy, taskID string, n int32) time.Duration {
	d := float64(p.GetInitialBackoff().AsDuration())
	if d <= 0 {
		d = float64(defaultRetryDelay)
	}
	m := p.GetMultiplier()
	if m < 1 {
		m = 1
	}
	d *= math.Pow(m, float64(n))
	if mb := float64(p.GetMaxBackoff().AsDuration()); mb > 0 && d > mb {
		d = mb
	}
	if j := p.GetJitter(); j > 0 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d", taskID, n)
		u := float64(h.Sum64()%1_000_000)/1_000_000*2 - 1 // [-1, 1)
		d *= 1 + j*u
	}
	return time.Duration(d)
}

// PlanRetry decides whether a failure of kind k of task t (assigned or
// running) is retried. It returns the wait before the next attempt.
func PlanRetry(t *agentmeshv1.Task, k failureKind) (retry bool, wait time.Duration) {
	if t.Status != Assigned && t.Status != Running {
		return false, 0
	}
	p := EffectiveRetryPolicy(t)
	ok := false
	for _, r := range p.RetryOn {
		if r == k && Retryable(k) {
			ok = true
			break
		}
	}
	if !ok || t.RetryCount+1 >= p.MaxAttempts {
		return false, 0
	}
	return true, RetryDelay(p, t.Id, t.RetryCount)
}

// applyRetry folds the retry fields of a status event into t: a move to
// queued that carries a failure kind is a retry.
func applyRetry(t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent) {
	if ev.Status == Queued && ev.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_UNSPECIFIED {
		t.RetryCount = ev.RetryCount
		t.NextRetryAt = ev.NotBefore
		t.LastError = ev.Reason
		t.LastFailureKind = ev.FailureKind
		return
	}
	switch {
	case ev.Status != Queued:
		t.NextRetryAt = nil
	case ev.NotBefore != nil:
		// A requeue that waits (a model's rate limit): no retry, but
		// not dispatched before it either.
		t.NextRetryAt = ev.NotBefore
	}
}

// StampStatusEvent sets what a status event tells the scheduler about its
// task (agent, priority; on a move to queued the effective queue
// timeout), so the scheduler queues it without reading the task.
func StampStatusEvent(ev *agentmeshv1.TaskEvent, t *agentmeshv1.Task) {
	ev.Agent = t.GetAgent()
	ev.AgentOrg = t.GetAgentSpec().GetOrg()
	ev.Priority = t.GetPriority()
	if ev.Status == Queued {
		if d := EffectiveQueueTimeout(t); d > 0 {
			ev.QueueTimeout = durationpb.New(d)
		}
	}
}

// RetryReason is the reason recorded on the event of a retried failure.
func RetryReason(t *agentmeshv1.Task, k failureKind, reason string, wait time.Duration) string {
	p := EffectiveRetryPolicy(t)
	return fmt.Sprintf("attempt %d failed (%s): %s; retry %d of %d in %s",
		t.Attempt, KindName(k), reason, t.RetryCount+1, p.MaxAttempts-1, wait.Round(time.Millisecond))
}

// AgentKey names an agent across orgs: its name, prefixed by the org that
// owns it ("org/name"; a shared agent is its bare name). Agent names are
// unique per org only, and neither names nor orgs contain '/'.
func AgentKey(org, name string) string {
	if org == "" {
		return name
	}
	return org + "/" + name
}

// SplitAgentKey is the inverse of AgentKey.
func SplitAgentKey(key string) (org, name string) {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i], key[i+1:]
	}
	return "", key
}
