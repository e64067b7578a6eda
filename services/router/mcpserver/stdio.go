package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/agentmesh/agentmesh/services/router/door"
)

// lineFilter is the stdio transport's input as the SDK reads it: the
// client's messages, one a line (as the stdio transport has them), less
// those that are not JSON-RPC 2.0 (checkBody), longer than max, or batches
// where the revision has none — the SDK ends the session at the first
// such message — which the filter answers itself on out with their
// JSON-RPC error.
type lineFilter struct {
	in      *bufio.Reader
	closer  io.Closer
	out     *lockedWriter
	max     int
	pending []byte
	err     error
	// batches: the client asked for a revision with batches (2024-11-05,
	// 2025-03-26); the SDK refuses them in later ones.
	batches bool
}

func newLineFilter(in io.ReadCloser, out *lockedWriter, max int) *lineFilter {
	return &lineFilter{in: bufio.NewReaderSize(in, 64<<10), closer: in, out: out, max: max}
}

// Read hands the SDK the admitted lines.
func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		var line []byte
		var tooLong bool
		line, tooLong, f.err = f.readLine()
		f.pending = f.admit(line, tooLong)
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

func (f *lineFilter) Close() error { return f.closer.Close() }

// readLine reads one line, keeping at most max bytes of it (tooLong: it
// had more, which were read and dropped).
func (f *lineFilter) readLine() (line []byte, tooLong bool, err error) {
	for {
		chunk, err := f.in.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) <= f.max {
			line = append(line, chunk...)
		} else {
			tooLong, line = true, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, tooLong, err
		}
	}
}

// admit is the line the SDK gets (nil: none; the filter answered it).
func (f *lineFilter) admit(line []byte, tooLong bool) []byte {
	line = bytes.TrimSpace(line)
	if tooLong {
		f.answer(nil, &door.RPCError{Code: door.CodeInvalidRequest, Message: fmt.Sprintf("the message is over the size limit (%d bytes)", f.max)})
		return nil
	}
	if len(line) == 0 {
		return nil
	}
	msg, rerr := checkBody(line)
	if rerr == nil && line[0] == '[' && !f.batches {
		rerr = &door.RPCError{Code: door.CodeInvalidRequest, Message: "batch requests are not supported in MCP 2025-06-18 and later: send one message per line"}
	}
	if rerr != nil {
		f.answer(msg.id, rerr)
		return nil
	}
	if msg.method == "initialize" {
		var init struct {
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		_ = json.Unmarshal(line, &init)
		v := init.Params.ProtocolVersion
		f.batches = v == "2024-11-05" || v == "2025-03-26"
	}
	return append(line, '\n')
}

// answer writes a JSON-RPC error response line (id null when unknown).
func (f *lineFilter) answer(id json.RawMessage, rerr *door.RPCError) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	body, err := json.Marshal(door.Response{JSONRPC: "2.0", ID: id, Error: rerr})
	if err != nil {
		return
	}
	_, _ = f.out.Write(append(body, '\n'))
}

// lockedWriter makes each Write whole: the SDK writes a message per call,
// and so does lineFilter, from another goroutine.
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }
