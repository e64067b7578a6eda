package router

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// keyServer implements agentmeshv1.KeyService: keys kept by the state
// service (key.<op>), an org admin's for its org, a platform key's for
// every org. The secret is made here, answered once, and only its SHA-256
// leaves the router. A change applies to this router's copy at once and to
// every other router's by the key event it follows (apikeys.go).
type keyServer struct {
	agentmeshv1.UnimplementedKeyServiceServer
	s *Service
}

// Bounds of KeyService.
const (
	// MaxKeyLifetime bounds a key's expiry.
	MaxKeyLifetime = 10 * 365 * 24 * time.Hour
	// MaxKeyGrace bounds how long a rotated key's old secret keeps working.
	MaxKeyGrace = 30 * 24 * time.Hour
	// keySecretPrefix starts every secret KeyService makes.
	keySecretPrefix = "amk_"
)

// keyScope is the org a key request of the caller acts within: an org
// admin's own (naming another is refused), a platform key's named org, or
// every org (anyOrg) when it names none.
func keyScope(ctx context.Context, org string) (scope string, anyOrg bool, err error) {
	c, _ := CallerFrom(ctx)
	if c.Role == RolePlatform {
		if org == "" {
			return "", true, nil
		}
		if !ValidOrg(org) {
			return "", false, bus.FieldError("org", "%q is not an org", org)
		}
		return org, false, nil
	}
	if org != "" && org != c.Org {
		return "", false, status.Errorf(codes.PermissionDenied, "org %q: an admin key of that org is required", org)
	}
	return c.Org, false, nil
}

// newKeySecret returns a fresh secret, its SHA-256 and its hint.
func newKeySecret() (secret string, sum [sha256.Size]byte, hint string, err error) {
	b := make([]byte, 32)
	if _, err = rand.Read(b); err != nil {
		return "", sum, "", fmt.Errorf("key secret: %w", err)
	}
	secret = keySecretPrefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, sha256.Sum256([]byte(secret)), secret[:len(keySecretPrefix)+6], nil
}

func (k *keyServer) CreateKey(ctx context.Context, req *agentmeshv1.CreateKeyRequest) (*agentmeshv1.CreateKeyResponse, error) {
	resp, err := k.s.createKey(ctx, req)
	return resp, toStatus(k.s.log, "CreateKey", err)
}

func (s *Service) createKey(ctx context.Context, req *agentmeshv1.CreateKeyRequest) (*agentmeshv1.CreateKeyResponse, error) {
	c, _ := CallerFrom(ctx)
	role := Role(req.GetRole())
	if role == "" {
		role = RoleReader
	}
	org := req.GetOrg()
	switch {
	case !role.valid():
		return nil, bus.FieldError("role", "%q is not a role (admin, operator, approver, reader or platform)", role)
	case role == RolePlatform && c.Role != RolePlatform:
		return nil, status.Error(codes.PermissionDenied, "only a platform key creates platform keys")
	case role == RolePlatform && org != "":
		return nil, bus.FieldError("org", "a platform key names no org")
	case role != RolePlatform && c.Role == RolePlatform && !ValidOrg(org):
		return nil, bus.FieldError("org", "the key's org is required (%s)", OrgPattern)
	case role != RolePlatform && c.Role != RolePlatform:
		if org != "" && org != c.Org {
			return nil, status.Errorf(codes.PermissionDenied, "org %q: an admin key of that org is required", org)
		}
		org = c.Org
	}
	if !keyNameRe.MatchString(req.GetName()) {
		return nil, bus.FieldError("name", "%q must match [A-Za-z0-9][A-Za-z0-9_.@:-]{0,63}", req.GetName())
	}
	if e := req.GetExpiresAt(); e != nil {
		if err := e.CheckValid(); err != nil {
			return nil, bus.FieldError("expires_at", "%v", err)
		}
		if d := time.Until(e.AsTime()); d <= 0 || d > MaxKeyLifetime {
			return nil, bus.FieldError("expires_at", "must be in the future, at most 10 years ahead")
		}
	}
	secret, sum, hint, err := newKeySecret()
	if err != nil {
		return nil, err
	}
	rec := &busv1.KeyRecord{Key: &agentmeshv1.ApiKey{
		Id: "key_" + ulid.Make().String(), Name: req.GetName(), Org: org, Role: string(role),
		Hint: hint, CreatedBy: c.KeyName, ExpiresAt: req.GetExpiresAt(),
	}, Sha256: sum[:]}
	var resp busv1.KeyResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateCreateKey), &busv1.CreateKeyRequest{Record: rec}, &resp); err != nil {
		return nil, err
	}
	s.keys.stored.change(map[string][]APIKey{resp.Record.Key.Id: entriesOf(resp.Record)}, false)
	s.log.Info("API key created", "key", resp.Record.Key.Id, "name", rec.Key.Name, "org", org, "role", role, "by", c.KeyName)
	return &agentmeshv1.CreateKeyResponse{Key: resp.Record.Key, Secret: secret}, nil
}

func (k *keyServer) ListKeys(ctx context.Context, req *agentmeshv1.ListKeysRequest) (*agentmeshv1.ListKeysResponse, error) {
	resp, err := k.s.listKeys(ctx, req)
	return resp, toStatus(k.s.log, "ListKeys", err)
}

func (s *Service) listKeys(ctx context.Context, req *agentmeshv1.ListKeysRequest) (*agentmeshv1.ListKeysResponse, error) {
	org, anyOrg, err := keyScope(ctx, req.GetOrg())
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, bus.FieldError("page_size", "must not be negative")
	}
	var resp busv1.ListKeysResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListKeys), &busv1.ListKeysRequest{
		Org: org, AnyOrg: anyOrg, IncludeRevoked: req.GetIncludeRevoked(), PageSize: req.GetPageSize(), PageToken: req.GetPageToken(),
	}, &resp); err != nil {
		return nil, err
	}
	out := &agentmeshv1.ListKeysResponse{NextPageToken: resp.NextPageToken}
	if req.GetPageToken() == "" {
		out.Keys = s.configuredKeys(org, anyOrg)
	}
	for _, r := range resp.Records {
		out.Keys = append(out.Keys, r.Key)
	}
	return out, nil
}

// configuredKeys are the keys of this router's configuration in scope:
// read-only, named by their name.
func (s *Service) configuredKeys(org string, anyOrg bool) []*agentmeshv1.ApiKey {
	fixed := map[string]bool{}
	for _, k := range s.keys.fixed {
		fixed[k.Name] = true
	}
	var out []*agentmeshv1.ApiKey
	for _, k := range s.keys.ring().keys {
		if !anyOrg && k.Org != org {
			continue
		}
		src := agentmeshv1.KeySource_KEY_SOURCE_FILE
		if fixed[k.Name] {
			src = agentmeshv1.KeySource_KEY_SOURCE_ENV
		}
		out = append(out, &agentmeshv1.ApiKey{Id: k.Name, Name: k.Name, Org: k.Org, Role: string(k.Role), Source: src, ReadOnly: true})
	}
	return out
}

// checkChangeable refuses a change of a configured key (FailedPrecondition)
// or of an id that names no key of the API (NotFound).
func (s *Service) checkChangeable(id, org string, anyOrg bool) error {
	for _, k := range s.configuredKeys(org, anyOrg) {
		if k.Id == id {
			where := "the keys file (AGENTMESH_API_KEYS_FILE)"
			if k.Source == agentmeshv1.KeySource_KEY_SOURCE_ENV {
				where = "AGENTMESH_API_KEYS"
			}
			return status.Errorf(codes.FailedPrecondition, "key %q is defined in %s: change it there", id, where)
		}
	}
	if !strings.HasPrefix(id, "key_") {
		return status.Errorf(codes.NotFound, "key %q not found", id)
	}
	return nil
}

func (k *keyServer) RevokeKey(ctx context.Context, req *agentmeshv1.RevokeKeyRequest) (*agentmeshv1.RevokeKeyResponse, error) {
	resp, err := k.s.revokeKey(ctx, req)
	return resp, toStatus(k.s.log, "RevokeKey", err)
}

func (s *Service) revokeKey(ctx context.Context, req *agentmeshv1.RevokeKeyRequest) (*agentmeshv1.RevokeKeyResponse, error) {
	org, anyOrg, err := keyScope(ctx, "")
	if err != nil {
		return nil, err
	}
	if err := s.checkChangeable(req.GetId(), org, anyOrg); err != nil {
		return nil, err
	}
	var resp busv1.KeyResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateRevokeKey), &busv1.RevokeKeyRequest{
		Id: req.GetId(), Org: org, AnyOrg: anyOrg, By: keyNameFrom(ctx),
	}, &resp); err != nil {
		return nil, err
	}
	s.keys.stored.change(map[string][]APIKey{req.GetId(): nil}, false)
	s.log.Info("API key revoked", "key", req.GetId(), "org", resp.Record.Key.Org, "by", keyNameFrom(ctx))
	return &agentmeshv1.RevokeKeyResponse{Key: resp.Record.Key}, nil
}

func (k *keyServer) RotateKey(ctx context.Context, req *agentmeshv1.RotateKeyRequest) (*agentmeshv1.RotateKeyResponse, error) {
	resp, err := k.s.rotateKey(ctx, req)
	return resp, toStatus(k.s.log, "RotateKey", err)
}

func (s *Service) rotateKey(ctx context.Context, req *agentmeshv1.RotateKeyRequest) (*agentmeshv1.RotateKeyResponse, error) {
	org, anyOrg, err := keyScope(ctx, "")
	if err != nil {
		return nil, err
	}
	if err := s.checkChangeable(req.GetId(), org, anyOrg); err != nil {
		return nil, err
	}
	var until *timestamppb.Timestamp
	if g := req.GetGrace(); g != nil {
		if err := g.CheckValid(); err != nil || g.AsDuration() < 0 || g.AsDuration() > MaxKeyGrace {
			return nil, bus.FieldError("grace", "must be between 0 and %s", MaxKeyGrace)
		}
		if g.AsDuration() > 0 {
			until = timestamppb.New(time.Now().Add(g.AsDuration()))
		}
	}
	secret, sum, hint, err := newKeySecret()
	if err != nil {
		return nil, err
	}
	var resp busv1.KeyResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateRotateKey), &busv1.RotateKeyRequest{
		Id: req.GetId(), Org: org, AnyOrg: anyOrg, Sha256: sum[:], Hint: hint, PreviousExpiresAt: until, By: keyNameFrom(ctx),
	}, &resp); err != nil {
		return nil, err
	}
	s.keys.stored.change(map[string][]APIKey{req.GetId(): entriesOf(resp.Record)}, false)
	s.log.Info("API key rotated", "key", req.GetId(), "org", resp.Record.Key.Org, "by", keyNameFrom(ctx))
	return &agentmeshv1.RotateKeyResponse{Key: resp.Record.Key, Secret: secret}, nil
}
