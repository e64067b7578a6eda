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
