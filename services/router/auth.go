package router

import (
	"context"
	"crypto/sha256"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// protectedPrefix is the method prefix of the RPCs that need an API key;
// health and reflection do not.
const protectedPrefix = "/agentmesh."

// anonymous is the caller of every RPC when authentication is off.
var anonymous = Caller{KeyName: "anonymous", Org: DefaultOrg, Role: RoleAdmin}

// authenticate returns ctx carrying the caller, or Unauthenticated; then
// the method table (MethodRoles) decides, or PermissionDenied names the
// role needed; then the org's request rate, or ResourceExhausted.
func (s *Service) authenticate(ctx context.Context, method string) (context.Context, error) {
	if !strings.HasPrefix(method, protectedPrefix) {
		return ctx, nil
	}
	key, err := apiKey(ctx)
	if err != nil && !s.authOff {
		return nil, err
	}
	c, err := s.callerOf(key)
	if err != nil {
		return nil, err
	}
	if c, err = actingIn(c, orgHeader(ctx)); err != nil {
		return nil, err
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		s.conns.authenticated(p.Addr.String())
	}
	if err := authorize(c, method); err != nil {
		return nil, err
	}
	if c.Org == "" && !platformMethods[method] {
		// Defence in depth: an empty org reads as "every org" to the state
		// service; only the platform methods (which never send one) go on.
		return nil, status.Errorf(codes.PermissionDenied, "%s needs a key of an org; key %q has none", shortMethod(method), c.KeyName)
	}
	if err := s.limiter.allow(c); err != nil {
		return nil, err
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

// callerOf returns the caller key stands for, or Unauthenticated; with
// authentication off, the anonymous admin.
func (s *Service) callerOf(key string) (Caller, error) {
	if s.authOff {
		return anonymous, nil
	}
	if key == "" {
		return Caller{}, status.Error(codes.Unauthenticated, "missing API key: send \"authorization: Bearer <key>\" or \"x-api-key: <key>\"")
	}
	k, ok := s.keys.lookup(sha256.Sum256([]byte(key)))
	if !ok {
		return Caller{}, status.Error(codes.Unauthenticated, "unknown API key")
	}
	if !k.ExpiresAt.IsZero() && !time.Now().Before(k.ExpiresAt) {
		return Caller{}, status.Errorf(codes.Unauthenticated, "API key %q expired at %s", k.Name, k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return Caller{KeyName: k.Name, Org: k.Org, Role: k.Role}, nil
}

// OrgHeader is the metadata (and HTTP header) with which a platform key
// names the org it reads as a reader (the dashboard's org switch). A key of
// an org may send its own org, no other.
const OrgHeader = "x-agentmesh-org"

// actingIn returns the caller a request that names org (OrgHeader) acts
// as: a platform key becomes a reader of that org — it may look at an
// org's tasks, approvals, agents and metrics, and change nothing of it;
// another key must name its own org. No org named: c as it is.
func actingIn(c Caller, org string) (Caller, error) {
	switch {
	case org == "":
		return c, nil
	case !ValidOrg(org):
		return Caller{}, status.Errorf(codes.InvalidArgument, "%s: org %q must be 1-63 lower-case letters and digits with single hyphens between", OrgHeader, org)
	case c.Role == RolePlatform:
		return Caller{KeyName: c.KeyName, Org: org, Role: RoleReader}, nil
	case org != c.Org:
		return Caller{}, status.Errorf(codes.PermissionDenied, "%s: key %q belongs to org %q and may not act in org %q (only a platform key may read another org)", OrgHeader, c.KeyName, c.Org, org)
	}
	return c, nil
}

// orgHeader returns the org the caller names (OrgHeader), if any.
func orgHeader(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(OrgHeader); len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}

// apiKey returns the key the caller presented, if any: the token of an
// "authorization: Bearer" header or an x-api-key value. Different keys at
// once (two headers, or one of each kind) are refused, whatever their
// order: a proxy in front may have checked one and the router would act
// on another. The same key sent twice is that key.
func apiKey(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var keys []string
	for _, v := range md.Get("authorization") {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
		if ok && strings.EqualFold(scheme, "bearer") {
			if tok = strings.TrimSpace(tok); tok != "" {
				keys = append(keys, tok)
			}
		}
	}
	for _, v := range md.Get("x-api-key") {
		if v = strings.TrimSpace(v); v != "" {
			keys = append(keys, v)
		}
	}
	for _, k := range keys[min(1, len(keys)):] {
		if k != keys[0] {
			return "", status.Error(codes.Unauthenticated, "different API keys in one request (authorization, x-api-key): send one key")
		}
	}
	if len(keys) == 0 {
		return "", nil
	}
	return keys[0], nil
}

func (s *Service) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := s.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Service) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := s.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &ctxStream{ServerStream: ss, ctx: ctx})
}

// ctxStream is a server stream with a replaced context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *ctxStream) Context() context.Context { return c.ctx }
