package scriptedmodel

import "sync"

// ReceivedMessage is one message of a request as the server received it:
// its role, its text and the names of the tools it called.
type ReceivedMessage struct {
	Role  string
	Text  string
	Tools []string
}

// maxReceived bounds the requests the server remembers (the newest).
const maxReceived = 512

// received remembers the conversations of the latest requests, so a test
// can assert on what a model was sent.
type received struct {
	mu    sync.Mutex
	convs [][]ReceivedMessage
}

func (s *Server) received() *received { return &s.rec }

func (s *Server) remember(msgs []chatMessage) {
	conv := make([]ReceivedMessage, 0, len(msgs))
	for _, m := range msgs {
		rm := ReceivedMessage{Role: m.Role, Text: m.text()}
		for _, c := range m.ToolCalls {
			rm.Tools = append(rm.Tools, c.Function.Name)
		}
		conv = append(conv, rm)
	}
	s.rememberReceived(conv)
}

// rememberReceived remembers one request's conversation.
func (s *Server) rememberReceived(conv []ReceivedMessage) {
	r := s.received()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.convs = append(r.convs, conv)
	if len(r.convs) > maxReceived {
		r.convs = r.convs[len(r.convs)-maxReceived:]
	}
}

// Received returns the conversations of the latest requests (at most 512),
// oldest first: the messages each request carried.
func (s *Server) Received() [][]ReceivedMessage {
	r := s.received()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]ReceivedMessage, len(r.convs))
	copy(out, r.convs)
	return out
}
