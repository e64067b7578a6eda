package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/router/door"
)

// stringList is a repeatable flag; each use may also hold a
// comma-separated list.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// metaFlag is the repeatable --meta k=v flag.
type metaFlag map[string]string

func (m metaFlag) String() string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func (m metaFlag) Set(v string) error {
	k, val, err := parseMeta(v)
	if err != nil {
		return err
	}
	if _, dup := m[k]; dup {
		return fmt.Errorf("key %q given twice", k)
	}
	m[k] = val
	return nil
}

// parseMeta splits "key=value"; the value may hold '=' and be empty, the
// key may not.
func parseMeta(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("%q is not key=value", s)
	}
	k = strings.TrimSpace(k)
	if k == "" {
		return "", "", fmt.Errorf("%q has an empty key", s)
	}
	return k, v, nil
}

// parsePriority reads low|normal|high|critical|backlog (any case, or the
// enum name); "" is unspecified (the server's default, normal).
func parsePriority(s string) (agentmeshv1.Priority, error) { return door.ParsePriority(s) }

// priorityName prints a priority as parsePriority reads it.
func priorityName(p agentmeshv1.Priority) string { return door.PriorityName(p) }

// parseStatuses reads status names (queued, running, ...).
func parseStatuses(names []string) ([]agentmeshv1.TaskStatus, error) {
	var out []agentmeshv1.TaskStatus
	for _, n := range names {
		st, ok := taskstate.Parse(strings.ToLower(n))
		if !ok {
			st, ok = taskstate.Parse(strings.ToUpper(n))
		}
		if !ok {
			return nil, fmt.Errorf("unknown status %q (want created, queued, assigned, running, blocked, completed, failed or cancelled)", n)
		}
		out = append(out, st)
	}
	return out, nil
}

// parseSince reads a positive Go duration, or a whole number of days ("7d").
func parseSince(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 100000 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("invalid duration %q (e.g. 30m, 2h, 7d)", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q must be positive", s)
	}
	return d, nil
}
