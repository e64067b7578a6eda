package app

import (
	"maps"
	"testing"
)

func TestParseLabels(t *testing.T) {
	got, err := parseLabels(" zone=a , gpu=none,")
	if err != nil || !maps.Equal(got, map[string]string{"zone": "a", "gpu": "none"}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := parseLabels("novalue"); err == nil {
		t.Fatal("a label without = was accepted")
	}
}
