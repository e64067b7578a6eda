package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// tapServer answers CreateTap for org acme only (the caller's own org).
type tapServer struct {
	agentmeshv1.UnimplementedTapServiceServer
	got []*agentmeshv1.CreateTapRequest
}

func (s *tapServer) CreateTap(_ context.Context, req *agentmeshv1.CreateTapRequest) (*agentmeshv1.CreateTapResponse, error) {
	s.got = append(s.got, req)
	if req.GetOrg() != "acme" {
		return nil, status.Errorf(codes.PermissionDenied, "org %q: an admin key of that org is required", req.GetOrg())
	}
	return &agentmeshv1.CreateTapResponse{
		Org: "acme", Creds: "-----BEGIN NATS USER JWT-----\nfake\n------END NATS USER JWT------\n",
		ExpiresAt: timestamppb.New(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)),
		Subjects:  []string{"am.evt.acme.>", "am.live.acme.>"},
	}, nil
}

func TestTapsCreate(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	ts := &tapServer{}
	agentmeshv1.RegisterTapServiceServer(g, ts)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	addr := lis.Addr().String()

	path := filepath.Join(t.TempDir(), "acme.creds")
	code, out, errOut := amctl(t, addr, "taps", "create", "acme", "-f", path, "--ttl", "24h")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("creds file mode %v, want 0600", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "NATS USER JWT") {
		t.Errorf("creds file: %q", b)
	}
	if !strings.Contains(out, "am.evt.acme.>") || !strings.Contains(out, "nats sub --creds "+path) {
		t.Errorf("output %q does not say what the tap may read and how", out)
	}
	if got := ts.got[0]; got.GetOrg() != "acme" || got.GetTtl().AsDuration() != 24*time.Hour {
		t.Errorf("request %v, want org acme, ttl 24h", got)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no org", []string{"taps", "create"}, exitUsage, "ORG"},
		{"no subcommand", []string{"taps"}, exitUsage, "taps create ORG"},
		{"negative ttl", []string{"taps", "create", "acme", "--ttl", "-1h"}, exitUsage, "--ttl"},
		{"another org", []string{"taps", "create", "globex", "-f", filepath.Join(t.TempDir(), "g.creds")}, exitError, "admin key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := amctl(t, addr, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d naming %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}
