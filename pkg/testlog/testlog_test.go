package testlog

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
)

func TestOutput(t *testing.T) {
	t.Setenv(EnvVar, "")
	if w, _ := output(); w != io.Discard {
		t.Errorf("unset: writes to %v, want io.Discard", w)
	}
	if New(t).Enabled(context.Background(), slog.LevelDebug) {
		t.Error("unset: debug enabled, want info and up only (as before)")
	}
	t.Setenv(EnvVar, "1")
	if w, _ := output(); w != os.Stderr {
		t.Errorf("set: writes to %v, want os.Stderr", w)
	}
	if !New(t).Enabled(context.Background(), slog.LevelDebug) {
		t.Error("set: debug records dropped, want them written")
	}
}
