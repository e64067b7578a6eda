package door

import (
	"fmt"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// PriorityNames are the priorities as the doors spell them, lowest first.
var PriorityNames = []string{"backlog", "low", "normal", "high", "critical"}

var priorities = map[string]agentmeshv1.Priority{
	"backlog":  agentmeshv1.Priority_PRIORITY_BACKLOG,
	"low":      agentmeshv1.Priority_PRIORITY_LOW,
	"normal":   agentmeshv1.Priority_PRIORITY_NORMAL,
	"high":     agentmeshv1.Priority_PRIORITY_HIGH,
	"critical": agentmeshv1.Priority_PRIORITY_CRITICAL,
}

// ParsePriority reads one of PriorityNames (any case, or the enum name);
// "" is unspecified (the API's default, normal).
func ParsePriority(s string) (agentmeshv1.Priority, error) {
	if s == "" {
		return agentmeshv1.Priority_PRIORITY_UNSPECIFIED, nil
	}
	if p, ok := priorities[strings.ToLower(strings.TrimPrefix(strings.ToUpper(s), "PRIORITY_"))]; ok {
		return p, nil
	}
	return 0, fmt.Errorf("unknown priority %q (want backlog, low, normal, high or critical)", s)
}

// PriorityName spells p as ParsePriority reads it (unspecified: "normal").
func PriorityName(p agentmeshv1.Priority) string {
	for name, v := range priorities {
		if v == p {
			return name
		}
	}
	return "normal"
}

// BlockedOnName is what a blocked task waits for, in one word
// ("approval", "dependencies", "subtasks", "proposal"), or "".
func BlockedOnName(b agentmeshv1.BlockedOn) string {
	if b == agentmeshv1.BlockedOn_BLOCKED_ON_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(b.String(), "BLOCKED_ON_"))
}

// Cut returns s cut to at most n bytes on a rune boundary, so a cut of
// valid UTF-8 stays valid (the API refuses invalid UTF-8 in strings).
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
