package app

import (
	"maps"
	"strings"
	"testing"
)

func TestParseOrgLimits(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]int
		wantErr bool
	}{
		{"", map[string]int{}, false},
		{"acme=50", map[string]int{"acme": 50}, false},
		{" acme = 50 , globex=0 ,", map[string]int{"acme": 50, "globex": 0}, false},
		{"acme", nil, true},
		{"acme=-1", nil, true},
		{"acme=lots", nil, true},
		{"a.b=1", nil, true},
		{"=3", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseOrgLimits(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !maps.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseLabels(t *testing.T) {
	got, err := parseLabels(" zone=a , gpu=none,")
	if err != nil || !maps.Equal(got, map[string]string{"zone": "a", "gpu": "none"}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := parseLabels("novalue"); err == nil {
		t.Fatal("a label without = was accepted")
	}
}

// FuzzParseOrgLimits: whatever the environment holds, the parser returns
// an error or limits that are ≥ 0 for orgs that are valid subject tokens.
func FuzzParseOrgLimits(f *testing.F) {
	for _, s := range []string{"", "acme=50", "a=1,b=2", "x=-1", "=", ",,,", "a=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseOrgLimits(s)
		if err != nil {
			return
		}
		for org, n := range got {
			if n < 0 || org == "" || strings.ContainsAny(org, ".*> \t") {
				t.Fatalf("parseOrgLimits(%q) gave %q=%d", s, org, n)
			}
		}
	})
}
