package childproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
)

// readFrame reads one executor-side frame.
func readFrame(r *Reader) (*childv1.Frame, error) {
	f := new(childv1.Frame)
	if err := r.Read(f); err != nil {
		return nil, err
	}
	return f, nil
}

func TestRoundTrip(t *testing.T) {
	frames := []*childv1.Frame{
		{Kind: &childv1.Frame_Start{Start: &childv1.Start{TaskId: "t1", Attempt: 2, Input: "hello", Tools: []string{"echo"},
			History: []*agentmeshv1.Step{{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "x"}}}}},
		{Kind: &childv1.Frame_ModelRequest{ModelRequest: &childv1.ModelRequest{Id: 1, Messages: []*childv1.Message{{Role: "user", Content: strings.Repeat("é", 100000)}}}}},
		{Kind: &childv1.Frame_Final{Final: &childv1.Final{Answer: "done"}}},
		{}, // an empty frame is legal framing
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, f := range frames {
		if err := w.Write(f); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	r := NewReader(&buf)
	for i, want := range frames {
		got, err := readFrame(r)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("frame %d: got %v, want %v", i, got, want)
		}
	}
	if _, err := readFrame(r); err != io.EOF {
		t.Errorf("after last frame: err = %v, want io.EOF", err)
	}
}

func TestKind(t *testing.T) {
	if got := Kind(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: &childv1.StepAck{}}}); got != "step_ack" {
		t.Errorf("got %q, want step_ack", got)
	}
	if got := Kind(&childv1.Frame{}); got != "empty" {
		t.Errorf("got %q, want empty", got)
	}
}

func TestReadErrors(t *testing.T) {
	header := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	tests := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"cut header", []byte{0, 0}, 0, io.ErrUnexpectedEOF},
		{"cut body", append(header(10), 1, 2, 3), 0, io.ErrUnexpectedEOF},
		{"too large", header(1 << 30), 0, ErrFrameTooLarge},
		{"over a small limit", append(header(11), make([]byte, 11)...), 10, ErrFrameTooLarge},
		{"garbage body", append(header(3), 0xff, 0xff, 0xff), 0, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readFrame(NewReaderSize(bytes.NewReader(tt.in), tt.max))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestWriteTooLarge(t *testing.T) {
	w := NewWriter(io.Discard)
	w.max = 100
	err := w.Write(&childv1.Frame{Kind: &childv1.Frame_Final{Final: &childv1.Final{Answer: strings.Repeat("a", 200)}}})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
}

// A claimed length alone must not make the reader allocate it.
func TestClaimedLengthCostsNoMemory(t *testing.T) {
	in := binary.BigEndian.AppendUint32(nil, MaxFrameSize)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readFrame(NewReader(bytes.NewReader(in)))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Errorf("reading a frame that claims 16 MiB and carries nothing allocated %d bytes", d)
	}
}

func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_Final{Final: &childv1.Final{Answer: "x"}}})
	_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: &childv1.StepAck{Index: 3, Error: "stale"}}})
	f.Add(buf.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReaderSize(bytes.NewReader(data), limit)
		for range 1000 {
			fr, err := readFrame(r)
			if err != nil {
				return
			}
			if proto.Size(fr) > limit {
				t.Fatalf("frame of %d bytes passed a %d-byte limit", proto.Size(fr), limit)
			}
		}
	})
}
