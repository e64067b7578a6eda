package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

type discard struct{ bytes.Buffer }

func (*discard) Close() error { return nil }

// A stdio server's stdout is outside input: whatever a line holds,
// dispatch answers, delivers or refuses it without panicking; a response
// reaches only the call waiting for its id, once.
func FuzzDispatch(f *testing.F) {
	f.Add(`{"jsonrpc":"2.0","id":1,"result":{}}`)
	f.Add(`{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}`)
	f.Add(`{"jsonrpc":"2.0","id":"a","method":"ping"}`)
	f.Add(`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`)
	f.Add(`{"id":2,"method":"sampling/createMessage"}`)
	f.Add(`not json`)
	f.Fuzz(func(t *testing.T, line string) {
		out := &discard{}
		ch := make(chan incoming, 1)
		s := &stdioSession{stdin: out, pending: map[int64]chan incoming{1: ch}}
		err := s.dispatch([]byte(line))
		if err != nil && !errors.Is(err, ErrProtocol) {
			t.Fatalf("dispatch(%q) = %v, want nil or ErrProtocol", line, err)
		}
		select {
		case m := <-ch:
			if string(bytes.TrimSpace(m.ID)) != "1" || m.Method != "" {
				t.Errorf("line %q delivered %+v to call 1", line, m)
			}
			if _, still := s.pending[1]; still {
				t.Error("call 1 still waits after its response")
			}
		default:
		}
		if err == nil && strings.Contains(line, `"method"`) && out.Len() > 0 && !json.Valid(bytes.TrimSpace(out.Bytes())) {
			t.Errorf("answer to %q is not JSON: %q", line, out.String())
		}
	})
}

// readLine returns lines of any length up to MaxMessage, a last line
// without its newline, and refuses a longer one.
func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	r := bufio.NewReaderSize(strings.NewReader("a\n"+long+"\nlast"), 16)
	for _, want := range []string{"a", long, "last"} {
		got, err := readLine(r)
		if err != nil || string(got) != want {
			t.Fatalf("readLine = %d bytes, %v; want %d bytes", len(got), err, len(want))
		}
	}
	if _, err := readLine(r); !errors.Is(err, io.EOF) {
		t.Errorf("at the end: %v, want EOF", err)
	}
	big := bufio.NewReader(io.MultiReader(strings.NewReader(strings.Repeat("y", MaxMessage+10)), strings.NewReader("\n")))
	if _, err := readLine(big); !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("a line over MaxMessage: %v, want ErrMessageTooLarge", err)
	}
}
