package embednats

import (
	"fmt"
	"log/slog"
	"regexp"
	"sync"
)

// logger forwards the server's log to slog. Warnings and errors — among
// them every refused authentication and permission violation — are logged
// once per client and message: the key drops the connection id and the
// client's port, so a client reconnecting with bad credentials every
// second fills no disk.
type logger struct {
	log     *slog.Logger
	verbose bool

	mu   sync.Mutex
	seen map[string]struct{}
}

// maxSeen bounds the memory of what was logged; past it the memory starts
// over (a line may then be logged again).
const maxSeen = 4096

func newLogger(log *slog.Logger, verbose bool) *logger {
	return &logger{log: log.With("component", "nats-server"), verbose: verbose, seen: map[string]struct{}{}}
}

var volatile = regexp.MustCompile(`cid:\d+|(\d+\.\d+\.\d+\.\d+|\[[0-9a-fA-F:]+\]):\d+|pipe:\d+`)

func (l *logger) once(msg string) bool {
	key := volatile.ReplaceAllStringFunc(msg, func(m string) string {
		if i := lastColon(m); i > 0 && m[:3] != "cid" && m[:4] != "pipe" {
			return m[:i] // keep the host, drop the port
		}
		return ""
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[key]; ok {
		return false
	}
	if len(l.seen) >= maxSeen {
		l.seen = map[string]struct{}{}
	}
	l.seen[key] = struct{}{}
	return true
}

func lastColon(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			return i
		}
	}
	return -1
}

func (l *logger) Noticef(format string, v ...any) {
	if l.verbose {
		l.log.Debug(fmt.Sprintf(format, v...))
	}
}

func (l *logger) Warnf(format string, v ...any) {
	if msg := fmt.Sprintf(format, v...); l.once(msg) {
		l.log.Warn(msg)
	}
}

func (l *logger) Errorf(format string, v ...any) {
	if msg := fmt.Sprintf(format, v...); l.once(msg) {
		l.log.Error(msg)
	}
}

func (l *logger) Fatalf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }

func (l *logger) Debugf(format string, v ...any) {
	if l.verbose {
		l.log.Debug(fmt.Sprintf(format, v...))
	}
}

func (l *logger) Tracef(string, ...any) {}
