package door

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestKey(t *testing.T) {
	for _, tt := range []struct {
		name   string
		header map[string]string
		want   string
	}{
		{"bearer", map[string]string{"Authorization": "Bearer k1"}, "k1"},
		{"any case", map[string]string{"Authorization": "bearer  k2 "}, "k2"},
		{"x-api-key", map[string]string{"X-API-Key": " k3 "}, "k3"},
		{"basic is not a key", map[string]string{"Authorization": "Basic dTpw"}, ""},
		{"empty bearer", map[string]string{"Authorization": "Bearer "}, ""},
		{"none", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			if got := Key(r); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// FromError keeps the API's words, maps the codes, and never passes on
// what a transport failure says (it names addresses).
func TestFromError(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		err  error
		code int64
		msg  string
	}{
		{status.Error(codes.NotFound, `task "x" not found`), taskNotFound, `task "x" not found`},
		{status.Error(codes.InvalidArgument, "input: required"), CodeInvalidParams, "input: required"},
		{status.Error(codes.PermissionDenied, "CancelTask needs role operator"), CodePermissionDenied, "CancelTask needs role operator"},
		{status.Error(codes.Unavailable, "connection error: dial tcp 10.1.2.3:7400: refused"), CodeUnavailable, msgUnavailable},
		{status.Error(codes.Internal, "panic at router.go:12"), CodeInternal, msgInternal},
		{errors.New("dial tcp 10.1.2.3:7400"), CodeInternal, msgInternal},
		{context.DeadlineExceeded, CodeTimeout, msgTimeout},
	} {
		re := FromError(log, tt.err, taskNotFound)
		if re.Code != tt.code || re.Message != tt.msg {
			t.Errorf("%v: got %d %q, want %d %q", tt.err, re.Code, re.Message, tt.code, tt.msg)
		}
	}
	if got := Sentence(log, status.Error(codes.FailedPrecondition, "task x already finished")); got != "failed precondition: task x already finished" {
		t.Errorf("Sentence: %q", got)
	}
}

const taskNotFound = -32001

type tools struct {
	agentmeshv1.UnimplementedToolServiceServer
	calls atomic.Int32
}

func (s *tools) ListTools(ctx context.Context, _ *agentmeshv1.ListToolsRequest) (*agentmeshv1.ListToolsResponse, error) {
	s.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	switch strings.Join(md.Get("authorization"), ",") {
	case "Bearer good":
		return &agentmeshv1.ListToolsResponse{}, nil
	case "Bearer busy":
		return nil, status.Error(codes.ResourceExhausted, "rate")
	}
	return nil, status.Error(codes.Unauthenticated, "unknown API key")
}

// Check asks the API once per key and TTL; an org over its rate still
// has a known key; an unknown key is ErrBadKey, every time.
func TestChecker(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	api := &tools{}
	agentmeshv1.RegisterToolServiceServer(srv, api)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := NewChecker(conn, 0)
	ctx := context.Background()
	for range 3 {
		if err := c.Check(ctx, "good"); err != nil {
			t.Fatal(err)
		}
	}
	if n := api.calls.Load(); n != 1 {
		t.Errorf("%d calls for one key within its TTL, want 1", n)
	}
	if err := c.Check(ctx, "busy"); err != nil {
		t.Errorf("a key over its rate: %v", err)
	}
	for range 2 {
		if err := c.Check(ctx, "bad"); !errors.Is(err, ErrBadKey) {
			t.Errorf("an unknown key: %v", err)
		}
	}
	if err := c.Check(ctx, ""); !errors.Is(err, ErrNoKey) {
		t.Errorf("no key: %v", err)
	}
	srv.Stop()
	if err := c.Check(ctx, "other"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("the API down: %v", err)
	}
}

// Cut never splits a rune: the cut of valid UTF-8 is valid and a prefix.
func TestCut(t *testing.T) {
	for _, tt := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"}, {"abc", 2, "ab"}, {"a€b", 2, "a"}, {"a€b", 3, "a"}, {"a€b", 4, "a€"}, {"€", 0, ""}, {"€€", 1, ""},
	} {
		if got := Cut(tt.s, tt.n); got != tt.want || !utf8.ValidString(got) {
			t.Errorf("Cut(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}
