// Package memory holds the rules of what agents keep (issue 30,
// docs/memory.md) that the router, the state service and the executor
// share: the scopes and the agents' memory policy (which scopes a tool may
// read and write), the limits of keys, values, texts, tags and thread ids,
// and the arguments of the memory tools (state_get, state_set,
// state_delete, remember, recall) with their parsers.
//
// Stored text is data: nothing here or anywhere in the runtime interprets
// a value or a memory; the model sees it as a tool result only.
package memory

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// Scope is where a working-state value or a memory lives and who shares
// it.
type Scope string

const (
	// ScopeTaskTree: one task tree (a task, its sub-tasks, theirs); the
	// scope id is the root task's id. It is what a delegating agent and
	// its workers share.
	ScopeTaskTree Scope = "task-tree"
	// ScopeAgent: every task of one agent (by name) in the org; the scope
	// id is the agent's name. It is what makes an agent remember from one
	// task to the next.
	ScopeAgent Scope = "agent"
	// ScopeOrg: every task of every agent of the org; no scope id.
	ScopeOrg Scope = "org"
)

// Scopes lists the scopes, narrowest first.
var Scopes = []Scope{ScopeTaskTree, ScopeAgent, ScopeOrg}

// ErrInvalid is returned (wrapped) for a scope, key, value, text or
// argument that breaks these rules; the message names the limit.
var ErrInvalid = errors.New("invalid")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ParseScope reads a scope name ("task-tree", also "task_tree" and
// "tree"; "agent"; "org").
func ParseScope(s string) (Scope, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "task-tree", "task_tree", "tree":
		return ScopeTaskTree, nil
	case "agent":
		return ScopeAgent, nil
	case "org":
		return ScopeOrg, nil
	case "":
		return "", invalid("a scope is required (task-tree, agent or org)")
	}
	return "", invalid("unknown scope %q (want task-tree, agent or org)", s)
}

// Token is the scope's short form in keys ("tree", "agent", "org").
func (s Scope) Token() string {
	if s == ScopeTaskTree {
		return "tree"
	}
	return string(s)
}

// Limits.
const (
	// MaxKeyLen bounds a working-state key.
	MaxKeyLen = 200
	// MaxValueBytes bounds a working-state value, JSON-encoded.
	MaxValueBytes = 64 << 10
	// DefaultTTL is an entry's lifetime when none is given.
	DefaultTTL = 7 * 24 * time.Hour
	// MaxTTL bounds an entry's lifetime.
	MaxTTL = 365 * 24 * time.Hour
	// MaxTextBytes bounds a memory's text.
	MaxTextBytes = 8 << 10
	// MaxQueryBytes bounds a recall query.
	MaxQueryBytes = 8 << 10
	// MaxTags bounds a memory's tags; MaxTagLen each one.
	MaxTags   = 16
	MaxTagLen = 64
	// MaxDimensions bounds an embedding's length.
	MaxDimensions = 4096
	// DefaultK and MaxK: how many memories recall returns.
	DefaultK = 5
	MaxK     = 50
	// MaxThreadIDLen bounds a thread id.
	MaxThreadIDLen = 128
	// MaxScopeIDLen bounds a scope id given through the API.
	MaxScopeIDLen = 128
)

// CheckKey checks a working-state key: 1-MaxKeyLen of A-Z a-z 0-9 _ - and
// '.', the dot not first, last or doubled (a key is a path of tokens).
func CheckKey(k string) error {
	switch {
	case k == "":
		return invalid("a key is required")
	case len(k) > MaxKeyLen:
		return invalid("key is %d bytes; at most %d", len(k), MaxKeyLen)
	case k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, ".."):
		return invalid("key %q: a '.' may not be first, last or doubled", k)
	}
	for _, r := range k {
		if !plain(r) && r != '.' {
			return invalid("key %q: only A-Z a-z 0-9 _ - and . are allowed", k)
		}
	}
	return nil
}

func plain(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// CheckThreadID checks a thread id: 1-MaxThreadIDLen of A-Z a-z 0-9 _ -.
func CheckThreadID(id string) error {
	switch {
	case id == "":
		return invalid("a thread id is required")
	case len(id) > MaxThreadIDLen:
		return invalid("thread id is %d bytes; at most %d", len(id), MaxThreadIDLen)
	}
	for _, r := range id {
		if !plain(r) {
			return invalid("thread id %q: only A-Z a-z 0-9 _ and - are allowed", id)
		}
	}
	return nil
}

// CheckScopeID checks the scope id an API caller gives: a task id or an
// agent name of plain characters for task-tree and agent (required), none
// for org.
func CheckScopeID(s Scope, id string) error {
	if s == ScopeOrg {
		if id != "" {
			return invalid("scope org takes no scope_id")
		}
		return nil
	}
	switch {
	case id == "":
		return invalid("scope %s needs a scope_id (%s)", s, map[Scope]string{ScopeTaskTree: "the root task's id", ScopeAgent: "the agent's name"}[s])
	case len(id) > MaxScopeIDLen:
		return invalid("scope_id is %d bytes; at most %d", len(id), MaxScopeIDLen)
	}
	for _, r := range id {
		if !plain(r) {
			return invalid("scope_id %q: only A-Z a-z 0-9 _ and - are allowed", id)
		}
	}
	return nil
}

// CheckTags checks a memory's tags (at most MaxTags of 1-MaxTagLen
// printable characters without spaces) and returns them sorted without
// repeats.
func CheckTags(tags []string) ([]string, error) {
	if len(tags) > MaxTags {
		return nil, invalid("%d tags; at most %d", len(tags), MaxTags)
	}
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		if t == "" || len(t) > MaxTagLen {
			return nil, invalid("tag %q: 1-%d characters", t, MaxTagLen)
		}
		for _, r := range t {
			if r <= ' ' || r == 0x7f {
				return nil, invalid("tag %q: no spaces or control characters", t)
			}
		}
		out = append(out, t)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ScopeID is the id of scope s for a task: its tree's root, its agent, or
// none for the org.
func ScopeID(s Scope, t *agentmeshv1.Task) string {
	switch s {
	case ScopeTaskTree:
		if r := t.GetRootTaskId(); r != "" {
			return r
		}
		return t.GetId()
	case ScopeAgent:
		return t.GetAgent()
	}
	return ""
}

// TTL returns an entry's lifetime from a requested one (0: DefaultTTL).
func TTL(d time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return DefaultTTL, nil
	case d < time.Second:
		return 0, invalid("ttl %s: at least 1s (or 0 for the default, %s)", d, DefaultTTL)
	case d > MaxTTL:
		return 0, invalid("ttl %s: at most %s", d, MaxTTL)
	}
	return d, nil
}
