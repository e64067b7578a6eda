package memory

import (
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// threadPolicies spells the thread policies as people write them.
var threadPolicies = map[string]agentmeshv1.ThreadPolicy{
	"reject":    agentmeshv1.ThreadPolicy_THREAD_POLICY_REJECT,
	"enqueue":   agentmeshv1.ThreadPolicy_THREAD_POLICY_ENQUEUE,
	"interrupt": agentmeshv1.ThreadPolicy_THREAD_POLICY_INTERRUPT,
	"rollback":  agentmeshv1.ThreadPolicy_THREAD_POLICY_ROLLBACK,
}

// ParseThreadPolicy reads "reject", "enqueue", "interrupt" or "rollback"
// (or the enum's name); "" is unspecified (reject).
func ParseThreadPolicy(s string) (agentmeshv1.ThreadPolicy, error) {
	if s == "" {
		return agentmeshv1.ThreadPolicy_THREAD_POLICY_UNSPECIFIED, nil
	}
	if p, ok := threadPolicies[strings.ToLower(strings.TrimPrefix(strings.ToUpper(s), "THREAD_POLICY_"))]; ok {
		return p, nil
	}
	return 0, invalid("unknown thread policy %q (want reject, enqueue, interrupt or rollback)", s)
}

// ThreadPolicyName spells p as ParseThreadPolicy reads it (unspecified:
// "reject").
func ThreadPolicyName(p agentmeshv1.ThreadPolicy) string {
	for name, v := range threadPolicies {
		if v == p {
			return name
		}
	}
	return "reject"
}
