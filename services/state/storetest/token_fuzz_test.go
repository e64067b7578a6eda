package storetest

import (
	"errors"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// FuzzDecodeToken: page tokens come from clients. Any input decodes to a
// key or to invalid_argument, never panics, and a key round-trips.
func FuzzDecodeToken(f *testing.F) {
	for _, s := range []string{"", "a", store.EncodeToken("01J00000000000000000000000"), "azo", "%%%", "k:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		key, err := store.DecodeToken(tok)
		if err != nil {
			if !errors.Is(err, bus.ErrInvalidArgument) {
				t.Fatalf("DecodeToken(%q): got %v, want invalid_argument", tok, err)
			}
			return
		}
		if key == "" {
			if tok != "" {
				t.Fatalf("DecodeToken(%q): got an empty key without error", tok)
			}
			return
		}
		back, err := store.DecodeToken(store.EncodeToken(key))
		if err != nil || back != key {
			t.Fatalf("round trip of %q: got %q, %v", key, back, err)
		}
	})
}
