// Package tail keeps the last bytes of a stream: the stderr of a child
// process (an MCP server, an agent process), kept for the error report when
// it dies.
package tail

import "sync"

// Buffer is an io.Writer that keeps the last Max bytes written to it. It is
// safe for concurrent use; the zero value keeps nothing.
type Buffer struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

// New returns a Buffer that keeps the last max bytes.
func New(max int) *Buffer { return &Buffer{Max: max} }

// Write keeps the end of what was written so far; it never fails.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is what is kept.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Reset forgets what was written.
func (t *Buffer) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = t.buf[:0]
}
