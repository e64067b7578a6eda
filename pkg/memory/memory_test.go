package memory

import (
	"errors"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestKeys(t *testing.T) {
	for _, k := range []string{"a", "plan.step.1", "A-b_c", strings.Repeat("k", MaxKeyLen)} {
		if err := CheckKey(k); err != nil {
			t.Errorf("CheckKey(%q): %v", k, err)
		}
	}
	for _, k := range []string{"", ".a", "a.", "a..b", "a b", "a/b", "a*", "ä", strings.Repeat("k", MaxKeyLen+1)} {
		if err := CheckKey(k); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckKey(%q): got %v, want ErrInvalid", k, err)
		}
	}
	for _, id := range []string{"", "a.b", "x y", strings.Repeat("t", MaxThreadIDLen+1)} {
		if err := CheckThreadID(id); err == nil {
			t.Errorf("CheckThreadID(%q) accepted", id)
		}
	}
	if err := CheckScopeID(ScopeOrg, "x"); err == nil {
		t.Error("an org scope with a scope id was accepted")
	}
	if err := CheckScopeID(ScopeAgent, ""); err == nil {
		t.Error("an agent scope without a scope id was accepted")
	}
}

func TestPolicy(t *testing.T) {
	def := PolicyOf(&agentmeshv1.Agent{})
	if !def.MayWrite(ScopeTaskTree) || def.MayWrite(ScopeAgent) || def.MayWrite(ScopeOrg) ||
		!def.MayRead(ScopeAgent) || def.MayRead(ScopeOrg) {
		t.Errorf("defaults: %+v; want write task-tree, read task-tree and agent", def)
	}
	broad := PolicyOf(&agentmeshv1.Agent{Memory: &agentmeshv1.MemoryPolicy{WriteScopes: []string{"org", "agent"}, ReadScopes: []string{"org"}}})
	n := Narrow(broad, def)
	if len(n.Write) != 0 || len(n.Read) != 0 {
		t.Errorf("Narrow(broad, default) = %+v; want nothing both allow (a sub-task gains no scope)", n)
	}
	if n := Narrow(broad, PolicyOf(&agentmeshv1.Agent{Memory: &agentmeshv1.MemoryPolicy{WriteScopes: []string{"agent", "task-tree"}}})); !n.MayWrite(ScopeAgent) || n.MayWrite(ScopeOrg) || n.MayWrite(ScopeTaskTree) {
		t.Errorf("Narrow keeps what both allow: %+v; want write agent only", n)
	}
	if why := def.Denied(ToolStateSet, Access{Scope: ScopeOrg, Write: true}); !strings.Contains(why, "task-tree") {
		t.Errorf("denial names what it may write: %q", why)
	}
	if def.Denied(ToolRecall, Access{All: true}) != "" {
		t.Error("recall of every readable scope refused under the default policy")
	}
	for _, bad := range []*agentmeshv1.Agent{
		{Memory: &agentmeshv1.MemoryPolicy{WriteScopes: []string{"galaxy"}}},
		{Cache: &agentmeshv1.CachePolicy{}},
		{Cache: &agentmeshv1.CachePolicy{Ttl: durationpb.New(31 * 24 * time.Hour)}},
	} {
		if field, err := CheckPolicy(bad); err == nil || field == "" {
			t.Errorf("CheckPolicy(%v) accepted", bad)
		}
	}
}

func TestToolArguments(t *testing.T) {
	a, err := ParseStateSet([]byte(`{"key":"k","value":{"x":[1,2]},"scope":"agent","ttl_seconds":60,"persist":true,"if_revision":0}`))
	if err != nil || a.Scope != ScopeAgent || a.TTL() != time.Minute || !a.Persist || a.IfRevision == nil || *a.IfRevision != 0 {
		t.Errorf("ParseStateSet: %+v, %v", a, err)
	}
	big := `{"key":"k","value":"` + strings.Repeat("x", MaxValueBytes) + `"}`
	if _, err := ParseStateSet([]byte(big)); err == nil || !strings.Contains(err.Error(), "65536") {
		t.Errorf("a value over 64 KiB: %v; want refused naming the limit", err)
	}
	if g, err := ParseStateGet([]byte(`{"key":"k"}`)); err != nil || g.Scope != ScopeTaskTree {
		t.Errorf("state_get's default scope: %+v, %v", g, err)
	}
	for _, bad := range []string{`{"key":"k","value":1,"scope":"galaxy"}`, `{"key":"k"}`, `{"key":"k","value":1,"extra":2}`, `[1]`, `{"key":"k","value":1,"ttl_seconds":-1}`} {
		if _, err := ParseStateSet([]byte(bad)); err == nil {
			t.Errorf("ParseStateSet(%s) accepted", bad)
		}
	}
	r, err := ParseRecall([]byte(`{"query":"q"}`))
	if err != nil || r.K != DefaultK || r.Scope != "" {
		t.Errorf("ParseRecall defaults: %+v, %v", r, err)
	}
	if _, err := ParseRemember([]byte(`{"text":"` + strings.Repeat("w", MaxTextBytes+1) + `"}`)); err == nil || !strings.Contains(err.Error(), "8192") {
		t.Errorf("a memory over 8 KiB: %v", err)
	}
	if acc, ok, err := AccessOf(ToolRemember, []byte(`{"text":"x","scope":"org"}`)); !ok || err != nil || !acc.Write || acc.Scope != ScopeOrg {
		t.Errorf("AccessOf(remember): %+v %v %v", acc, ok, err)
	}
	if _, ok, _ := AccessOf("echo", []byte(`{}`)); ok {
		t.Error("AccessOf(echo) is a memory access")
	}
	if p, err := ParseThreadPolicy("interrupt"); err != nil || p != agentmeshv1.ThreadPolicy_THREAD_POLICY_INTERRUPT || ThreadPolicyName(p) != "interrupt" {
		t.Errorf("ParseThreadPolicy: %v, %v", p, err)
	}
	if _, err := ParseThreadPolicy("wait"); err == nil {
		t.Error("an unknown thread policy was accepted")
	}
}

// The tools' argument parsers take the model's output: never a panic,
// and what they accept satisfies the limits.
func FuzzToolArguments(f *testing.F) {
	for _, s := range []string{`{"key":"a.b","value":{"x":1},"scope":"agent"}`, `{"text":"t","tags":["a"]}`, `{"query":"q","k":3}`, `{}`, `[]`, `{"scope":3}`, `{"key":"k","if_revision":-1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, tool := range Tools {
			acc, ok, err := AccessOf(tool, []byte(raw))
			if !ok {
				t.Fatalf("%s is not a memory tool", tool)
			}
			if err != nil {
				continue
			}
			if !acc.All && acc.Scope != ScopeTaskTree && acc.Scope != ScopeAgent && acc.Scope != ScopeOrg {
				t.Fatalf("%s(%q) accepted scope %q", tool, raw, acc.Scope)
			}
		}
		if a, err := ParseStateSet([]byte(raw)); err == nil && (len(a.Value) > MaxValueBytes || CheckKey(a.Key) != nil) {
			t.Fatalf("ParseStateSet(%q) accepted %+v", raw, a)
		}
		if a, err := ParseRemember([]byte(raw)); err == nil && (len(a.Text) > MaxTextBytes || len(a.Tags) > MaxTags) {
			t.Fatalf("ParseRemember(%q) accepted %+v", raw, a)
		}
		if a, err := ParseRecall([]byte(raw)); err == nil && (a.K < 1 || a.K > MaxK) {
			t.Fatalf("ParseRecall(%q) accepted k %d", raw, a.K)
		}
	})
}
