package app

import (
	"os"
	"strings"
	"testing"
)

func TestReadmeDocumentsEveryVariable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range EnvVars() {
		if !strings.Contains(string(b), "| `"+e.Name+"` |") {
			t.Errorf("README's configuration table lacks %s", e.Name)
		}
	}
}

func TestParseAPIKeys(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"", map[string]string{}, false},
		{"k1=acme", map[string]string{"k1": "acme"}, false},
		{" k1 = acme , k2=globex ,", map[string]string{"k1": "acme", "k2": "globex"}, false},
		{"k1", nil, true},
		{"=acme", nil, true},
		{"k1=", nil, true},
		{"k1=ac.me", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAPIKeys(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestMainExitCodes(t *testing.T) {
	tests := []struct {
		args []string
		want int
	}{
		{nil, 2},
		{[]string{"bogus"}, 2},
		{[]string{"version"}, 0},
		{[]string{"router", "--no-such-flag"}, 2},
		{[]string{"router", "extra-arg"}, 2},
		{[]string{"executor", "--capacity", "many"}, 2},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if got := Main(tt.args); got != tt.want {
				t.Fatalf("exit %d, want %d", got, tt.want)
			}
		})
	}
}

func FuzzParseAPIKeys(f *testing.F) {
	for _, s := range []string{"k=o", "a=b,c=d", ",,", "=", "k=o.x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := ParseAPIKeys(s)
		if err != nil {
			return
		}
		for k, org := range keys {
			if k == "" || org == "" || strings.ContainsAny(org, ".*> ") {
				t.Fatalf("ParseAPIKeys(%q) accepted key %q org %q", s, k, org)
			}
		}
	})
}
