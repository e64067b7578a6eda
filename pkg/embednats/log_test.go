package embednats

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Refusals are logged once per client host and message: the connection
// id and the port of each retry do not make a new line.
func TestLoggerOncePerClient(t *testing.T) {
	var buf bytes.Buffer
	l := newLogger(slog.New(slog.NewTextHandler(&buf, nil)), false)
	for i, line := range []string{
		"127.0.0.1:50001 - cid:5 - authentication error",
		"127.0.0.1:50002 - cid:6 - authentication error",
		"127.0.0.1:50003 - cid:7 - authentication error",
		"10.0.0.9:40000 - cid:8 - authentication error",
		`127.0.0.1:50004 - cid:9 - "v1.55.0:go:router" - Publish Violation - Subject "am.state.task.complete"`,
		`127.0.0.1:50005 - cid:9 - "v1.55.0:go:router" - Publish Violation - Subject "am.state.task.complete"`,
		`127.0.0.1:50005 - cid:9 - "v1.55.0:go:router" - Publish Violation - Subject "am.work.x"`,
	} {
		if i%2 == 0 {
			l.Errorf("%s", line)
		} else {
			l.Warnf("%s", line)
		}
	}
	out := buf.String()
	for _, c := range []struct {
		text string
		n    int
	}{{"127.0.0.1", 3}, {"10.0.0.9", 1}, {"authentication error", 2}, {"am.state.task.complete", 1}, {"am.work.x", 1}} {
		if got := strings.Count(out, c.text); got != c.n {
			t.Errorf("%q logged %d times, want %d:\n%s", c.text, got, c.n, out)
		}
	}
}
