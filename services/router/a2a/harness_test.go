package a2a

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/agentmesh/agentmesh/services/executor/child"
)

func TestMain(m *testing.M) {
	child.RunIfChild()
	os.Exit(m.Run())
}

// env is a running stack with the A2A server served over real HTTP at the
// two paths the router's listener mounts it at.
type env struct {
	stack *doortest.Stack
	srv   *httptest.Server
}

func start(t testing.TB) *env {
	t.Helper()
	return startOn(t, doortest.Start(t))
}

// startOn serves the A2A server on st.
func startOn(t testing.TB, st *doortest.Stack) *env {
	t.Helper()
	s, err := New(Config{KeepAlive: time.Second}, Deps{Conn: st.Conn, Log: doortest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/a2a", s)
	mux.Handle("/.well-known/agent-card.json", s)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{stack: st, srv: srv}
}

func ctxT(t testing.TB) context.Context { return doortest.Ctx(t) }

// client resolves the agent card as who and returns the official A2A Go
// SDK's client for it, authenticating as who.
func (e *env) client(t testing.TB, who string) (*a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	key := doortest.Secret(t, who)
	card, err := agentcard.DefaultResolver.Resolve(ctxT(t), e.srv.URL, agentcard.WithRequestHeader("Authorization", "Bearer "+key))
	if err != nil {
		t.Fatalf("resolve the agent card: %v", err)
	}
	c, err := a2aclient.NewFromCard(ctxT(t), card,
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: doortest.KeyTransport{Key: key}}))
	if err != nil {
		t.Fatalf("a2a client: %v", err)
	}
	return c, card
}

// rpcReply is a JSON-RPC response as a raw client sees it.
type rpcReply struct {
	status int
	header http.Header
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// post sends body to /a2a as key ("" for none); an SSE answer is read
// whole and its events returned.
func (e *env) post(t testing.TB, key, body string) (rpcReply, []rpcReply) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.srv.URL+"/a2a", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := rpcReply{status: resp.StatusCode, header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var events []rpcReply
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var ev rpcReply
				if err := json.Unmarshal([]byte(d), &ev); err != nil {
					t.Fatalf("event %q: %v", d, err)
				}
				events = append(events, ev)
			}
		}
		return r, events
	}
	if len(data) > 0 && data[0] == '{' {
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("reply %q: %v", data, err)
		}
	}
	return r, nil
}

// call sends one JSON-RPC request with params as key.
func (e *env) call(t testing.TB, key, method string, params any) rpcReply {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "t1", "method": method, "params": params})
	r, _ := e.post(t, key, string(body))
	return r
}

// userMessage is a message of the user with text.
func userMessage(text string) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: text})
}

func textOfParts(parts a2a.ContentParts) string {
	var b strings.Builder
	for _, p := range parts {
		if tp, ok := p.(a2a.TextPart); ok {
			b.WriteString(tp.Text)
		}
	}
	return b.String()
}
