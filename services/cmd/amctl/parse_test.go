package main

import (
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

func TestParsePriority(t *testing.T) {
	tests := []struct {
		in   string
		want agentmeshv1.Priority
		ok   bool
	}{
		{"", agentmeshv1.Priority_PRIORITY_UNSPECIFIED, true},
		{"low", agentmeshv1.Priority_PRIORITY_LOW, true},
		{"HIGH", agentmeshv1.Priority_PRIORITY_HIGH, true},
		{"PRIORITY_CRITICAL", agentmeshv1.Priority_PRIORITY_CRITICAL, true},
		{"backlog", agentmeshv1.Priority_PRIORITY_BACKLOG, true},
		{"normal", agentmeshv1.Priority_PRIORITY_NORMAL, true},
		{"urgent", 0, false},
		{"unspecified", 0, false},
		{"3", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parsePriority(tt.in)
			if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
				t.Fatalf("parsePriority(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestParseMeta(t *testing.T) {
	tests := []struct {
		in, key, value string
		ok             bool
	}{
		{"k=v", "k", "v", true},
		{"k=", "k", "", true},
		{"url=a=b", "url", "a=b", true},
		{" k =v", "k", "v", true},
		{"k", "", "", false},
		{"=v", "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			k, v, err := parseMeta(tt.in)
			if (err == nil) != tt.ok || k != tt.key || v != tt.value {
				t.Fatalf("parseMeta(%q) = %q, %q, %v; want %q, %q ok=%v", tt.in, k, v, err, tt.key, tt.value, tt.ok)
			}
		})
	}
}

func TestParseSince(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30m", 30 * time.Minute, true},
		{"2h", 2 * time.Hour, true},
		{"7d", 7 * 24 * time.Hour, true},
		{"0s", 0, false},
		{"-1h", 0, false},
		{"d", 0, false},
		{"1.5d", 0, false},
		{"yesterday", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSince(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("parseSince(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

// FuzzParseFlags feeds outside input to every flag parser amctl has: none
// may panic, and what they accept must be well-formed.
func FuzzParseFlags(f *testing.F) {
	for _, s := range []string{"k=v", "=", "high", "PRIORITY_LOW", "7d", "1h30m", "-5d", "99999999999d", "a=b=c", "é=ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if k, v, err := parseMeta(s); err == nil {
			if k == "" || k != strings.TrimSpace(k) || !strings.Contains(s, "=") || !strings.HasSuffix(s, v) {
				t.Fatalf("parseMeta(%q) accepted key %q value %q", s, k, v)
			}
		}
		if p, err := parsePriority(s); err == nil {
			if s == "" && p != agentmeshv1.Priority_PRIORITY_UNSPECIFIED {
				t.Fatalf("parsePriority(%q) = %v", s, p)
			}
			if s != "" && (p < agentmeshv1.Priority_PRIORITY_BACKLOG || p > agentmeshv1.Priority_PRIORITY_CRITICAL) {
				t.Fatalf("parsePriority(%q) = %v", s, p)
			}
		}
		if d, err := parseSince(s); err == nil && d <= 0 {
			t.Fatalf("parseSince(%q) = %v, want positive", s, d)
		}
		if _, err := parseStatuses([]string{s}); err == nil && s == "" {
			t.Fatal("parseStatuses accepted an empty status")
		}
		var l stringList
		_ = l.Set(s)
		for _, x := range l {
			if x == "" || strings.Contains(x, ",") {
				t.Fatalf("stringList.Set(%q) gave %q", s, l)
			}
		}
	})
}
