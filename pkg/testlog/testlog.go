// Package testlog is the logger of the tests: one place instead of a
// discard logger written out in every test file.
//
// A test's logger discards what it is given (a text handler over
// io.Discard: records are formatted as in production, so benchmarks that
// log pay what the services pay, then dropped), so a passing run stays
// quiet. Set AGENTMESH_TEST_LOG=1 to see what the services say instead:
// every record, debug included, goes to stderr tagged with the test's
// name. (Not t.Log: services log from goroutines that may outlive the
// test, and t.Log after the test ended panics.)
package testlog

import (
	"io"
	"log/slog"
	"os"
	"testing"
)

// EnvVar turns the tests' logs on when set (to anything but "").
const EnvVar = "AGENTMESH_TEST_LOG"

// New returns the logger for t: a discarding one, or with EnvVar set one
// that writes debug and up to stderr with the attribute test=<t.Name()>.
func New(t testing.TB) *slog.Logger {
	w, opts := output()
	l := slog.New(slog.NewTextHandler(w, opts))
	if w != io.Discard {
		l = l.With("test", t.Name())
	}
	return l
}

// output is where the tests' records go and at which level.
func output() (io.Writer, *slog.HandlerOptions) {
	if os.Getenv(EnvVar) == "" {
		return io.Discard, nil
	}
	return os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}
}
