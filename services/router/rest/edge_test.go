package rest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/router/rest/resttest"
	"google.golang.org/grpc/codes"
)

// A body that trickles in is cut off after the body timeout: 408, and the
// connection closed, instead of holding it for as long as the client likes.
func TestSlowBody(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	edge, err := Edge(h, EdgeOptions{MaxBodyBytes: 1 << 16, BodyTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(edge)
	t.Cleanup(ts.Close)
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // the test's own bound, not the server's
	if _, err := io.WriteString(conn, "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"in"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	st := (resttest.Response{Body: b}).Status()
	if resp.StatusCode != http.StatusRequestTimeout || st == nil || st.Code() != codes.DeadlineExceeded || !strings.Contains(st.Message(), "not received within 200ms (4 bytes came)") {
		t.Fatalf("HTTP %d %s, want 408 saying the body did not arrive in time", resp.StatusCode, b)
	}
	if !resp.Close {
		t.Error("the connection of a stalled body stays open")
	}
}
