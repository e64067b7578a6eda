package memory

import (
	"fmt"
	"slices"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// Policy is what an agent's memory tools may read and write.
type Policy struct {
	Write, Read []Scope
}

// The defaults of an agent without a memory policy: it writes only its
// own task tree's state and memories, and reads its tree's and its own
// agent's (what it or its earlier tasks were allowed to write there) —
// never the org's unless its policy names it.
var (
	DefaultWrite = []Scope{ScopeTaskTree}
	DefaultRead  = []Scope{ScopeTaskTree, ScopeAgent}
)

// PolicyOf is the agent's policy with the defaults for what it leaves
// unset. Scopes it names that do not parse are dropped (CheckPolicy
// refuses them when the agent is defined).
func PolicyOf(a *agentmeshv1.Agent) Policy {
	p := a.GetMemory()
	return Policy{Write: scopesOr(p.GetWriteScopes(), DefaultWrite), Read: scopesOr(p.GetReadScopes(), DefaultRead)}
}

func scopesOr(names []string, def []Scope) []Scope {
	if len(names) == 0 {
		return def
	}
	var out []Scope
	for _, n := range names {
		if s, err := ParseScope(n); err == nil && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// MayWrite reports whether the policy lets a tool write scope s.
func (p Policy) MayWrite(s Scope) bool { return slices.Contains(p.Write, s) }

// MayRead reports whether the policy lets a tool read scope s.
func (p Policy) MayRead(s Scope) bool { return slices.Contains(p.Read, s) }

// Narrow is the stricter of two policies: a scope stays only if both allow
// it (a sub-task never gains a scope its parent lacks).
func Narrow(a, b Policy) Policy {
	both := func(x, y []Scope) []Scope {
		out := []Scope{}
		for _, s := range x {
			if slices.Contains(y, s) {
				out = append(out, s)
			}
		}
		return out
	}
	return Policy{Write: both(a.Write, b.Write), Read: both(a.Read, b.Read)}
}

// Names renders scopes for messages.
func Names(ss []Scope) string {
	if len(ss) == 0 {
		return "none"
	}
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ", "
		}
		out += string(s)
	}
	return out
}

// CheckPolicy checks an agent's memory and cache policies (agent
// definitions: pkg/agentspec calls it), naming the field.
func CheckPolicy(a *agentmeshv1.Agent) (field string, err error) {
	for i, n := range a.GetMemory().GetWriteScopes() {
		if _, err := ParseScope(n); err != nil {
			return fmt.Sprintf("memory.write_scopes[%d]", i), err
		}
	}
	for i, n := range a.GetMemory().GetReadScopes() {
		if _, err := ParseScope(n); err != nil {
			return fmt.Sprintf("memory.read_scopes[%d]", i), err
		}
	}
	if c := a.GetCache(); c != nil {
		if d := c.GetTtl().AsDuration(); c.GetTtl() == nil || d < time.Second || d > MaxCacheTTL {
			return "cache.ttl", invalid("cache ttl %s: 1s to %s", d, MaxCacheTTL)
		}
	}
	return "", nil
}

// MaxCacheTTL bounds an agent's cache TTL.
const MaxCacheTTL = 30 * 24 * time.Hour
