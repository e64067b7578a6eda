package app

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/scheduler"
)

// schedulerConfig reads the scheduler's settings.
func (s *settings) schedulerConfig() (scheduler.Config, error) {
	var cfg scheduler.Config
	var err error
	if cfg.OrgLimit, err = s.int("AGENTMESH_ORG_MAX_CONCURRENCY"); err != nil {
		return cfg, err
	}
	if cfg.OrgLimit < 0 {
		return cfg, usageError{fmt.Errorf("AGENTMESH_ORG_MAX_CONCURRENCY: must not be negative")}
	}
	if cfg.OrgLimits, err = parseOrgLimits(s.str("AGENTMESH_ORG_LIMITS")); err != nil {
		return cfg, usageError{fmt.Errorf("AGENTMESH_ORG_LIMITS: %w", err)}
	}
	if cfg.Aging, err = s.duration("AGENTMESH_PRIORITY_AGING"); err != nil {
		return cfg, err
	}
	if cfg.LeaseTTL, err = s.duration("AGENTMESH_SCHEDULER_LEASE"); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// parseOrgLimits reads "org=N,org2=M".
func parseOrgLimits(v string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		org, n, ok := strings.Cut(part, "=")
		org = strings.TrimSpace(org)
		if !ok || !subjects.ValidToken(org) {
			return nil, fmt.Errorf("%q is not org=N", part)
		}
		limit, err := strconv.Atoi(strings.TrimSpace(n))
		if err != nil || limit < 0 {
			return nil, fmt.Errorf("%q: the limit must be a number ≥ 0", part)
		}
		out[org] = limit
	}
	return out, nil
}

// parseLabels reads "k=v,k2=v2".
func parseLabels(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return out, nil
}
