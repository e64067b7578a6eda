// Package childproto frames the protocol between an executor and its agent
// child process: each frame is a 4-byte big-endian length followed by that
// many bytes of a protobuf agentmesh.child.v1.Frame. The executor writes to
// the child's stdin and reads its stdout; the child does the reverse.
//
// The framing takes any protobuf message: the executor reads and writes
// agentmesh.child.v1.Frame, the agent child the same frames as
// agentmesh.childwire.v1.Frame (its own copy of the protocol, which links no
// public API; see proto/agentmesh/childwire/v1). This package imports
// neither, so that the child links only its own.
//
// A Writer and a Reader are each meant for one goroutine. A Reader never
// allocates more than its limit for one frame, however large a length
// the other side claims, so a misbehaving child cannot exhaust the
// executor's memory through the pipe.
package childproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
)

// MaxFrameSize is the default limit of one frame's body.
const MaxFrameSize = 16 << 20

// Errors of the framing. A Reader returns io.EOF only at a frame boundary;
// a stream cut inside a frame is io.ErrUnexpectedEOF.
var (
	// ErrFrameTooLarge: a frame's length exceeds the limit.
	ErrFrameTooLarge = errors.New("childproto: frame too large")
	// ErrMalformed: a frame's body is not a Frame protobuf.
	ErrMalformed = errors.New("childproto: malformed frame")
)

// Writer writes frames. It is not safe for concurrent use.
type Writer struct {
	w   io.Writer
	max int
	buf []byte
}

// NewWriter returns a Writer on w with the default frame limit.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, max: MaxFrameSize} }

// Write encodes f (a Frame) and writes it as one frame with one Write call.
func (w *Writer) Write(f proto.Message) error {
	size := proto.Size(f)
	if size > w.max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, size, w.max)
	}
	buf := append(w.buf[:0], 0, 0, 0, 0)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, f)
	if err != nil {
		return fmt.Errorf("childproto: encode frame: %w", err)
	}
	binary.BigEndian.PutUint32(buf[:4], uint32(len(buf)-4))
	if _, err := w.w.Write(buf); err != nil {
		return fmt.Errorf("childproto: write frame: %w", err)
	}
	if cap(buf) <= 64<<10 { // keep small buffers for the next frame
		w.buf = buf
	}
	return nil
}

// Reader reads frames. It is not safe for concurrent use.
type Reader struct {
	r   *bufio.Reader
	max int
}

// NewReader returns a Reader on r with the default frame limit.
func NewReader(r io.Reader) *Reader { return NewReaderSize(r, MaxFrameSize) }

// NewReaderSize returns a Reader whose frames may be at most max bytes.
func NewReaderSize(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = MaxFrameSize
	}
	return &Reader{r: bufio.NewReader(r), max: max}
}

// growStep bounds how much Read allocates ahead of the bytes that actually
// arrived, so a claimed length alone costs no memory.
const growStep = 64 << 10

// Read reads the next frame into f (a Frame, reset first). It returns
// io.EOF at the end of the stream between frames.
func (r *Reader) Read(f proto.Message) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		return fmt.Errorf("childproto: read frame header: %w", err)
	}
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	if n > int64(r.max) {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, r.max)
	}
	var body bytes.Buffer
	body.Grow(int(min(n, growStep)))
	if _, err := io.CopyN(&body, r.r, n); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("childproto: read frame body (%d bytes): %w", n, err)
	}
	proto.Reset(f)
	if err := proto.Unmarshal(body.Bytes(), f); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

// Kind names the kind of a frame ("model_request"), for messages about
// frames that came at the wrong time: the field set of its oneof "kind".
func Kind(f proto.Message) string {
	if f == nil {
		return "empty"
	}
	m := f.ProtoReflect()
	if !m.IsValid() {
		return "empty"
	}
	kind := m.Descriptor().Oneofs().ByName("kind")
	if kind == nil {
		return "empty"
	}
	fd := m.WhichOneof(kind)
	if fd == nil {
		return "empty"
	}
	return string(fd.Name())
}
