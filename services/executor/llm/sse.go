package llm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// The server-sent events reader both providers parse their streams with
// (the WHATWG event-stream format, leniently): "field: value" lines, an
// empty line ends an event, "data" lines of one event are joined with
// "\n", lines starting with ':' are comments, "id" and "retry" are
// ignored. Leniencies for real servers: a line ending in "\r\n" is taken
// as ending in "\n"; an event left open when the body ends is still
// delivered; an "error: {…}" line (llama.cpp's server) is an event named
// "error". Bounded: a line longer than MaxSSELine is an error, and the
// body itself is capped by the transport (Config.MaxResponseBytes).

// MaxSSELine bounds one line of a stream.
const MaxSSELine = 1 << 20

// errSSELine is a line longer than the bound.
var errSSELine = errors.New("a line of the stream is too long")

// sseEvent is one event: its name ("" for the default "message") and
// its data, valid until the reader's next call.
type sseEvent struct {
	name string
	data []byte
}

// sseReader reads events from a stream.
type sseReader struct {
	br      *bufio.Reader
	maxLine int
	line    []byte
	data    bytes.Buffer
	name    string
	hasData bool
}

func newSSEReader(r io.Reader, maxLine int) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 16<<10), maxLine: maxLine}
}

// next returns the next event; io.EOF at the end of the body.
func (r *sseReader) next() (sseEvent, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && r.hasData {
				return r.dispatch(), nil // an event left open at the end
			}
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if r.hasData {
				return r.dispatch(), nil
			}
			r.name = ""
			continue
		}
		r.field(line)
	}
}

// field takes one non-empty line.
func (r *sseReader) field(line []byte) {
	if line[0] == ':' {
		return // a comment (keep-alives: ": ping")
	}
	name, value, found := bytes.Cut(line, []byte{':'})
	if found && len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch string(name) {
	case "data":
		if r.hasData {
			r.data.WriteByte('\n')
		}
		r.data.Write(value)
		r.hasData = true
	case "event":
		r.name = string(value)
	case "error":
		// llama.cpp's server writes an error as "error: {json}".
		r.name = "error"
		r.data.Reset()
		r.data.Write(value)
		r.hasData = true
	}
}

func (r *sseReader) dispatch() sseEvent {
	ev := sseEvent{name: r.name, data: r.data.Bytes()}
	r.data.Reset()
	r.name, r.hasData = "", false
	return ev
}

// readLine reads one line without its end ("\n" or "\r\n"), at most
// maxLine bytes; io.EOF when the body ended with no more bytes.
func (r *sseReader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		if len(r.line)+len(chunk) > r.maxLine+2 {
			return nil, fmt.Errorf("%w (over %d bytes)", errSSELine, r.maxLine)
		}
		r.line = append(r.line, chunk...)
		switch {
		case err == nil:
			return trimEOL(r.line), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(r.line) > 0:
			return trimEOL(r.line), nil
		default:
			return nil, err
		}
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte{'\n'})
	return bytes.TrimSuffix(b, []byte{'\r'})
}
