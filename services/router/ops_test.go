package router

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/embednats"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The configured keys of the tests with a real state service.
var opsKeys = map[string]string{
	"acme-admin-secret":   "acme:admin",
	"acme-reader-secret":  "acme:reader",
	"acme-op-secret":      "acme:operator",
	"globex-admin-secret": "globex:admin",
	"platform-secret":     "*:platform",
}

// startState runs the real state service (embedded store) on srv.
func startState(t *testing.T, srv *embednats.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	nc := natstest.ConnectAs(t, srv, subjects.ServiceState)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kvstore.Open(ctx, js, subjects.Must(""), kvstore.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := state.New(ctx, state.Config{}, state.Deps{NC: nc, Store: st, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; _ = st.Close() })
}

// opsRouter is a router on srv with the ops keys, its keys loaded.
type opsRouter struct {
	svc  *Service
	conn *grpc.ClientConn
}

func startOpsRouter(t *testing.T, srv *embednats.Server, tweak ...func(*Config)) *opsRouter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := Config{Listen: "127.0.0.1:0", APIKeys: opsKeys, OrgRate: -1}
	for _, f := range tweak {
		f(&cfg)
	}
	svc, err := New(ctx, cfg, Deps{NC: natstest.ConnectAs(t, srv, subjects.ServiceRouter), Log: testlog.New(t)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient(svc.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(callTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	poll.Until(t, 20*time.Second, func() error {
		if !svc.KeysLoaded() {
			return errors.New("keys kept by state not loaded yet")
		}
		return nil
	})
	return &opsRouter{svc: svc, conn: conn}
}

// callTimeout bounds each call of the tests' clients.
func callTimeout(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// as is a context of one call made with key.
func as(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
}

// accepted reports how r answers an RPC made with key: nil when it
// authenticates (ListTools needs any org role and no bus request).
func (r *opsRouter) accepted(key string) error {
	_, err := agentmeshv1.NewToolServiceClient(r.conn).ListTools(as(key), &agentmeshv1.ListToolsRequest{})
	return err
}

func (r *opsRouter) keys() agentmeshv1.KeyServiceClient {
	return agentmeshv1.NewKeyServiceClient(r.conn)
}

// refused waits (bounded by within) until r refuses key as unauthenticated.
func refused(t *testing.T, r *opsRouter, key string, within time.Duration) {
	t.Helper()
	poll.Until(t, within, func() error {
		err := r.accepted(key)
		if status.Code(err) != codes.Unauthenticated {
			return errors.New("the key is still accepted: " + status.Code(err).String())
		}
		return nil
	})
}

// A key created on one router works on another; revoked on one, the other
// refuses it within a second; rotated, the old secret stops and the new
// one works everywhere; an expired key is refused; a router started later
// loads the keys.
func TestKeysAcrossRouters(t *testing.T) {
	srv := natstest.Start(t)
	startState(t, srv)
	a, b := startOpsRouter(t, srv), startOpsRouter(t, srv)

	created, err := a.keys().CreateKey(as("acme-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "ci", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if created.Key.Org != "acme" || !strings.HasPrefix(created.Secret, "amk_") || created.Key.Source != agentmeshv1.KeySource_KEY_SOURCE_API || !strings.HasPrefix(created.Secret, created.Key.Hint) {
		t.Fatalf("created: %v", created)
	}
	if err := a.accepted(created.Secret); err != nil {
		t.Fatalf("the creating router refuses the new key: %v", err)
	}
	poll.Until(t, time.Second, func() error { return b.accepted(created.Secret) })

	// Revoked on b, refused on a within a second.
	if _, err := b.keys().RevokeKey(as("acme-admin-secret"), &agentmeshv1.RevokeKeyRequest{Id: created.Key.Id}); err != nil {
		t.Fatal(err)
	}
	refused(t, a, created.Secret, time.Second)
	refused(t, b, created.Secret, time.Second)

	// Rotated on a with no grace: the old secret is refused on b, the new
	// one accepted there.
	k2, err := a.keys().CreateKey(as("acme-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "deploy", Role: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Second, func() error { return b.accepted(k2.Secret) })
	rot, err := a.keys().RotateKey(as("acme-admin-secret"), &agentmeshv1.RotateKeyRequest{Id: k2.Key.Id})
	if err != nil {
		t.Fatal(err)
	}
	refused(t, b, k2.Secret, time.Second)
	poll.Until(t, time.Second, func() error { return b.accepted(rot.Secret) })
	// With a grace, both work on the other router until it ends.
	rot2, err := b.keys().RotateKey(as("acme-admin-secret"), &agentmeshv1.RotateKeyRequest{Id: k2.Key.Id, Grace: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Second, func() error { return a.accepted(rot2.Secret) })
	if err := a.accepted(rot.Secret); err != nil {
		t.Errorf("the replaced secret within its grace: %v", err)
	}

	// Expired: refused as unauthenticated.
	short, err := a.keys().CreateKey(as("acme-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "short", Role: "reader",
		ExpiresAt: timestamppb.New(time.Now().Add(3 * time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Second, func() error { return b.accepted(short.Secret) })
	refused(t, b, short.Secret, 10*time.Second)
	if st := status.Convert(b.accepted(short.Secret)); !strings.Contains(st.Message(), "expired") {
		t.Errorf("expired key: %v, want it said expired", st.Message())
	}

	// A router started now loads what state keeps.
	c := startOpsRouter(t, srv)
	if err := c.accepted(rot2.Secret); err != nil {
		t.Errorf("a new router refuses a live key: %v", err)
	}
	if status.Code(c.accepted(created.Secret)) != codes.Unauthenticated {
		t.Error("a new router accepts a revoked key")
	}
}

// A key's name is its org's once: a second CreateKey of it, or one after
// the first key is revoked, is AlreadyExists with a BadRequest naming the
// field name; another org, or a platform key, may use it.
func TestCreateKeyNameTaken(t *testing.T) {
	srv := natstest.Start(t)
	startState(t, srv)
	r := startOpsRouter(t, srv)
	first, err := r.keys().CreateKey(as("acme-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "x1"})
	if err != nil {
		t.Fatal(err)
	}
	wantTaken := func(what string) {
		t.Helper()
		_, err := r.keys().CreateKey(as("acme-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "x1", Role: "operator"})
		st := status.Convert(err)
		if st.Code() != codes.AlreadyExists {
			t.Fatalf("%s: got %v, want AlreadyExists", what, err)
		}
		var fields []string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		if len(fields) != 1 || fields[0] != "name" {
			t.Fatalf("%s: BadRequest fields %v, want [name] (%v)", what, fields, err)
		}
	}
	wantTaken("a second x1")
	if _, err := r.keys().RevokeKey(as("acme-admin-secret"), &agentmeshv1.RevokeKeyRequest{Id: first.Key.Id}); err != nil {
		t.Fatal(err)
	}
	wantTaken("x1 after its key is revoked")
	if _, err := r.keys().CreateKey(as("globex-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "x1"}); err != nil {
		t.Errorf("x1 in another org: %v", err)
	}
	if _, err := r.keys().CreateKey(as("platform-secret"), &agentmeshv1.CreateKeyRequest{Name: "x1", Role: "platform"}); err != nil {
		t.Errorf("a platform x1: %v", err)
	}
}

// Who may manage which keys: an org admin its own org's (another org's key
// is not found, a configured key read-only), a platform key every org's;
// other roles none.
func TestKeyServiceTenancy(t *testing.T) {
	srv := natstest.Start(t)
	startState(t, srv)
	r := startOpsRouter(t, srv)
	k, err := r.keys().CreateKey(as("acme-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "ci", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"another org revokes", func() error {
			_, err := r.keys().RevokeKey(as("globex-admin-secret"), &agentmeshv1.RevokeKeyRequest{Id: k.Key.Id})
			return err
		}, codes.NotFound},
		{"another org rotates", func() error {
			_, err := r.keys().RotateKey(as("globex-admin-secret"), &agentmeshv1.RotateKeyRequest{Id: k.Key.Id})
			return err
		}, codes.NotFound},
		{"another org creates in acme", func() error {
			_, err := r.keys().CreateKey(as("globex-admin-secret"), &agentmeshv1.CreateKeyRequest{Org: "acme", Name: "x"})
			return err
		}, codes.PermissionDenied},
		{"another org lists acme", func() error {
			_, err := r.keys().ListKeys(as("globex-admin-secret"), &agentmeshv1.ListKeysRequest{Org: "acme"})
			return err
		}, codes.PermissionDenied},
		{"an admin makes a platform key", func() error {
			_, err := r.keys().CreateKey(as("acme-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "x", Role: "platform"})
			return err
		}, codes.PermissionDenied},
		{"a reader creates", func() error {
			_, err := r.keys().CreateKey(as("acme-reader-secret"), &agentmeshv1.CreateKeyRequest{Name: "x"})
			return err
		}, codes.PermissionDenied},
		{"a reader lists", func() error {
			_, err := r.keys().ListKeys(as("acme-reader-secret"), &agentmeshv1.ListKeysRequest{})
			return err
		}, codes.PermissionDenied},
		{"a configured key is read-only", func() error {
			_, err := r.keys().RevokeKey(as("acme-admin-secret"), &agentmeshv1.RevokeKeyRequest{Id: r.configuredName(t, "acme", RoleReader)})
			return err
		}, codes.FailedPrecondition},
		{"a bad name", func() error {
			_, err := r.keys().CreateKey(as("acme-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "no spaces"})
			return err
		}, codes.InvalidArgument},
		{"an expiry in the past", func() error {
			_, err := r.keys().CreateKey(as("acme-admin-secret"), &agentmeshv1.CreateKeyRequest{Name: "old", ExpiresAt: timestamppb.New(time.Now().Add(-time.Hour))})
			return err
		}, codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(tc.call()); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if err := r.accepted(k.Secret); err != nil {
		t.Errorf("acme's key after globex's tries: %v", err)
	}
	// Lists: the org's own, the configured ones read-only first; a
	// platform key sees every org's and may revoke them.
	list, err := r.keys().ListKeys(as("acme-admin-secret"), &agentmeshv1.ListKeysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var api, conf int
	for _, key := range list.Keys {
		switch {
		case key.Org != "acme":
			t.Errorf("acme lists %v", key)
		case key.ReadOnly && key.Source == agentmeshv1.KeySource_KEY_SOURCE_ENV:
			conf++
		case key.Id == k.Key.Id:
			api++
		}
	}
	if api != 1 || conf != 3 {
		t.Errorf("acme's list: %d API keys, %d configured; want 1 and 3 (%v)", api, conf, list.Keys)
	}
	if _, err := r.keys().RevokeKey(as("platform-secret"), &agentmeshv1.RevokeKeyRequest{Id: k.Key.Id}); err != nil {
		t.Errorf("the platform key revokes acme's key: %v", err)
	}
	refused(t, r, k.Secret, time.Second)
}

// configuredName is the name of a configured key of org and role.
func (r *opsRouter) configuredName(t *testing.T, org string, role Role) string {
	t.Helper()
	for _, k := range r.svc.keys.ring().keys {
		if k.Org == org && k.Role == role {
			return k.Name
		}
	}
	t.Fatalf("no configured key of %s with role %s", org, role)
	return ""
}
