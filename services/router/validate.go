package router

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/budget"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Limits of fields that have no configurable limit.
const (
	maxTitleBytes          = 1024
	maxIdempotencyKeyBytes = 256
	maxMetadataKeyBytes    = 128
	maxReasonBytes         = 4096
	maxIDBytes             = 128
	maxPageTokenBytes      = 1024
	maxPageSize            = 1000
)

// NamePattern is the form of an agent name.
const NamePattern = agentspec.NamePattern

var (
	nameRe = regexp.MustCompile(`^` + NamePattern + `$`)
	// Task ids are ULIDs today; accept any id that is one safe subject
	// token, since WatchTask subscribes to a subject built from it.
	idRe = regexp.MustCompile(`^[0-9A-Za-z_-]+$`)
)

// limits are the configurable bounds validation checks.
type limits struct {
	maxInputBytes      int
	maxMetadataEntries int
	maxMetadataBytes   int
}

func (s *Service) limits() limits {
	return limits{
		maxInputBytes:      s.cfg.MaxInputBytes,
		maxMetadataEntries: s.cfg.MaxMetadataEntries,
		maxMetadataBytes:   s.cfg.MaxMetadataBytes,
	}
}

func tooLarge(field string, format string, args ...any) *bus.Error {
	return &bus.Error{Code: bus.CodeResourceExhausted, Field: field, Message: fmt.Sprintf(format, args...)}
}

// validateSubmit checks a SubmitTaskRequest; it returns the priority to
// record (unspecified becomes normal).
func validateSubmit(req *agentmeshv1.SubmitTaskRequest, l limits) (agentmeshv1.Priority, error) {
	if strings.TrimSpace(req.GetInput()) == "" {
		return 0, bus.FieldError("input", "required")
	}
	if n := len(req.GetInput()); n > l.maxInputBytes {
		return 0, tooLarge("input", "%d bytes is over the limit of %d bytes", n, l.maxInputBytes)
	}
	if n := len(req.GetTitle()); n > maxTitleBytes {
		return 0, tooLarge("title", "%d bytes is over the limit of %d bytes", n, maxTitleBytes)
	}
	if err := printable("title", req.GetTitle()); err != nil {
		return 0, err
	}
	// Neither agent nor skills is allowed: the registry then picks its
	// default agent (or answers FailedPrecondition if there is none).
	switch {
	case req.GetAgent() != "" && len(req.GetRequiredSkills()) > 0:
		return 0, bus.FieldError("agent", "give an agent or required_skills, not both")
	case req.GetAgent() != "":
		if err := checkName("agent", req.GetAgent()); err != nil {
			return 0, err
		}
	case len(req.GetRequiredSkills()) > 0:
		req.RequiredSkills = agentspec.NormalizeSkills(req.RequiredSkills)
		if err := agentspec.Skills("required_skills", req.GetRequiredSkills()); err != nil {
			return 0, err
		}
	}
	prio := req.GetPriority()
	if _, ok := agentmeshv1.Priority_name[int32(prio)]; !ok {
		return 0, bus.FieldError("priority", "unknown value %d", int32(prio))
	}
	if prio == agentmeshv1.Priority_PRIORITY_UNSPECIFIED {
		prio = agentmeshv1.Priority_PRIORITY_NORMAL
	}
	if err := checkMetadata(req.GetMetadata(), l); err != nil {
		return 0, err
	}
	if n := len(req.GetIdempotencyKey()); n > maxIdempotencyKeyBytes {
		return 0, tooLarge("idempotency_key", "%d bytes is over the limit of %d bytes", n, maxIdempotencyKeyBytes)
	}
	if err := printable("idempotency_key", req.GetIdempotencyKey()); err != nil {
		return 0, err
	}
	if err := budget.Validate("budget", req.GetBudget()); err != nil {
		return 0, err
	}
	if err := taskstate.ValidateRetryPolicy("retry_policy", req.GetRetryPolicy()); err != nil {
		return 0, err
	}
	if err := taskstate.ValidateQueueTimeout("queue_timeout", req.GetQueueTimeout()); err != nil {
		return 0, err
	}
	return prio, nil
}

func checkName(field, name string) error { return agentspec.Name(field, name) }

func checkMetadata(md map[string]string, l limits) error {
	if len(md) > l.maxMetadataEntries {
		return tooLarge("metadata", "%d entries is over the limit of %d", len(md), l.maxMetadataEntries)
	}
	total := 0
	for k, v := range md {
		if k == "" {
			return bus.FieldError("metadata", "keys must not be empty")
		}
		if len(k) > maxMetadataKeyBytes {
			return bus.FieldError("metadata", "key %.32q... is longer than %d bytes", k, maxMetadataKeyBytes)
		}
		if err := printable("metadata", k); err != nil {
			return err
		}
		if !utf8.ValidString(v) {
			return bus.FieldError("metadata", "the value of %q must be valid UTF-8", k)
		}
		total += len(k) + len(v)
	}
	if total > l.maxMetadataBytes {
		return tooLarge("metadata", "%d bytes is over the limit of %d bytes", total, l.maxMetadataBytes)
	}
	return nil
}

// printable rejects control characters (and invalid UTF-8) in one-line fields.
func printable(field, s string) error {
	if !utf8.ValidString(s) {
		return bus.FieldError(field, "must be valid UTF-8")
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return bus.FieldError(field, "must not contain control characters")
	}
	return nil
}

func checkID(field, id string) error {
	switch {
	case id == "":
		return bus.FieldError(field, "required")
	case len(id) > maxIDBytes || !idRe.MatchString(id):
		return bus.FieldError(field, "malformed task id %.40q", id)
	}
	return nil
}

func checkPageSize(field string, n int32) error {
	if n < 0 || n > maxPageSize {
		return bus.FieldError(field, "must be between 0 and %d", maxPageSize)
	}
	return nil
}

func checkPageToken(tok string) error {
	if len(tok) > maxPageTokenBytes {
		return bus.FieldError("page_token", "malformed page token")
	}
	return nil
}

func checkReason(reason string) error {
	if n := len(reason); n > maxReasonBytes {
		return tooLarge("reason", "%d bytes is over the limit of %d bytes", n, maxReasonBytes)
	}
	return nil
}

func checkAfterSeq(seq int64) error {
	if seq < 0 {
		return bus.FieldError("after_seq", "must not be negative")
	}
	return nil
}

func validateList(req *agentmeshv1.ListTasksRequest) error {
	for i, st := range req.GetStatuses() {
		if _, ok := agentmeshv1.TaskStatus_name[int32(st)]; !ok || st == agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
			return bus.FieldError(fmt.Sprintf("statuses[%d]", i), "unknown value %d", int32(st))
		}
	}
	if a := req.GetAgent(); a != "" {
		if err := checkName("agent", a); err != nil {
			return err
		}
	}
	if err := checkTime("created_after", req.GetCreatedAfter()); err != nil {
		return err
	}
	if err := checkTime("created_before", req.GetCreatedBefore()); err != nil {
		return err
	}
	if a, b := req.GetCreatedAfter(), req.GetCreatedBefore(); a != nil && b != nil && !a.AsTime().Before(b.AsTime()) {
		return bus.FieldError("created_before", "must be after created_after")
	}
	if err := checkPageSize("page_size", req.GetPageSize()); err != nil {
		return err
	}
	if err := validateListGraph(req); err != nil {
		return err
	}
	return checkPageToken(req.GetPageToken())
}

func checkTime(field string, ts *timestamppb.Timestamp) error {
	if ts == nil {
		return nil
	}
	if err := ts.CheckValid(); err != nil {
		return bus.FieldError(field, "invalid timestamp")
	}
	return nil
}

// requestDigest is the SHA-256 (hex) of a submit as validated (skills and
// parent id normalised; deterministic protobuf encoding, so the same
// request hashes the same however it was written), recorded on a task
// created under an idempotency key: the key reused for another request is
// then refused (already_exists) instead of answered with the first task.
// A submit without a key gets no digest.
func requestDigest(req *agentmeshv1.SubmitTaskRequest) string {
	if req.GetIdempotencyKey() == "" {
		return ""
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return "" // cannot happen for a message that was just decoded; no digest means no check
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// validateAgent checks an agent with the same rules the registry and state
// apply (pkg/agentspec), before it goes on the bus.
func validateAgent(a *agentmeshv1.Agent) error { return agentspec.Agent(a) }

// statusName prints a status for messages ("completed").
func statusName(s agentmeshv1.TaskStatus) string { return taskstate.Name(s) }
