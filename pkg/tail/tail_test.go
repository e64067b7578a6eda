package tail

import (
	"strings"
	"testing"
)

func TestBufferKeepsTheEnd(t *testing.T) {
	b := New(8)
	for _, s := range []string{"hello ", "world", ", and more"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want %d, nil", s, n, err, len(s))
		}
	}
	if got := b.String(); got != "and more" {
		t.Errorf("got %q, want the last 8 bytes %q", got, "and more")
	}
	b.Reset()
	if got := b.String(); got != "" {
		t.Errorf("after Reset: got %q, want empty", got)
	}
	_, _ = b.Write([]byte(strings.Repeat("x", 20)))
	if got := b.String(); got != strings.Repeat("x", 8) {
		t.Errorf("one long write: got %q, want 8 x", got)
	}
	var zero Buffer
	_, _ = zero.Write([]byte("abc"))
	if got := zero.String(); got != "" {
		t.Errorf("zero Buffer kept %q, want nothing", got)
	}
}
