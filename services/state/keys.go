package state

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// API keys kept through the API (key.<op>; the router only): the record
// holds the SHA-256 of the secret, never the secret. Each creation,
// revocation and rotation is announced on <p>.evt.<org>.key.<id>
// (agentmesh.v1.KeyEvent): the audit of key changes, and what every router
// follows to refuse a revoked key within a second.

// keyRoles are the roles a key may have.
var keyRoles = map[string]bool{"reader": true, "operator": true, "approver": true, "admin": true, "platform": true}

func checkKeyRecord(rec *busv1.KeyRecord) error {
	k := rec.GetKey()
	switch {
	case k == nil:
		return bus.FieldError("record.key", "a key is required")
	case !store.ValidRecordID(k.Id, "key"):
		return bus.FieldError("record.key.id", "%q is not a key id (key_ and letters or digits)", k.Id)
	case k.Name == "" || len(k.Name) > 64:
		return bus.FieldError("record.key.name", "a name of 1 to 64 characters is required")
	case !keyRoles[k.Role]:
		return bus.FieldError("record.key.role", "%q is not a role", k.Role)
	case (k.Role == "platform") != (k.Org == ""):
		return bus.FieldError("record.key.org", "a platform key and only it has no org")
	case k.Org != "" && (!subjects.ValidToken(k.Org) || k.Org == subjects.NoOrg || k.Org == subjects.SharedOrg):
		return bus.FieldError("record.key.org", "%q is not an org", k.Org)
	case len(rec.Sha256) != sha256.Size:
		return bus.FieldError("record.sha256", "the key's SHA-256 (32 bytes) is required")
	}
	return nil
}

// keyScope is the org a key request acts within ("" with any_org: every
// org), or invalid_argument when it names neither.
func keyScope(org string, anyOrg bool) (string, error) {
	if org == "" && !anyOrg {
		return "", bus.FieldError("org", "an org is required (or any_org)")
	}
	if anyOrg {
		return "", nil
	}
	return org, nil
}

func (s *Service) createKey(ctx context.Context, req *busv1.CreateKeyRequest) (*busv1.KeyResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	rec := req.GetRecord()
	if err := checkKeyRecord(rec); err != nil {
		return nil, err
	}
	rec = proto.Clone(rec).(*busv1.KeyRecord)
	rec.Key.CreatedAt = timestamppb.Now()
	rec.Key.RevokedAt, rec.Key.RevokedBy, rec.PreviousSha256 = nil, "", nil
	rec.Key.Source = agentmeshv1.KeySource_KEY_SOURCE_API
	got, err := ops.PutKey(ctx, rec, true, 0)
	if err != nil {
		return nil, fmt.Errorf("create key: %w", err)
	}
	s.publishKey(ctx, got, "created")
	return &busv1.KeyResponse{Record: got}, nil
}

func (s *Service) getKey(ctx context.Context, req *busv1.GetKeyRequest) (*busv1.KeyResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	org, err := keyScope(req.Org, req.AnyOrg)
	if err != nil {
		return nil, err
	}
	rec, err := ops.GetKey(ctx, org, req.Id)
	if err != nil {
		return nil, err
	}
	return &busv1.KeyResponse{Record: rec}, nil
}

func (s *Service) listKeys(ctx context.Context, req *busv1.ListKeysRequest) (*busv1.ListKeysResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	org, err := keyScope(req.Org, req.AnyOrg)
	if err != nil {
		return nil, err
	}
	if req.PageSize < 0 {
		return nil, bus.FieldError("page_size", "must not be negative")
	}
	recs, next, err := ops.ListKeys(ctx, store.RecordQuery{Org: org, AnyOrg: req.AnyOrg, IncludeRevoked: req.IncludeRevoked,
		PageSize: int(req.PageSize), PageToken: req.PageToken})
	if err != nil {
		return nil, err
	}
	return &busv1.ListKeysResponse{Records: recs, NextPageToken: next}, nil
}

// changeKey reads key id within the scope, lets change change it (nil:
// nothing to change) and puts it, then announces action.
// Six parameters: the one read-change-put of every key mutation (address, scope, action, change).
func (s *Service) changeKey(ctx context.Context, id, org string, anyOrg bool, action string, change func(*busv1.KeyRecord) (*busv1.KeyRecord, error)) (*busv1.KeyResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	scope, err := keyScope(org, anyOrg)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, bus.FieldError("id", "a key id is required")
	}
	got, changed, err := update(ctx, false,
		func(ctx context.Context) (*busv1.KeyRecord, error) { return ops.GetKey(ctx, scope, id) },
		func(cur *busv1.KeyRecord) (*busv1.KeyRecord, bool, error) {
			next, err := change(proto.Clone(cur).(*busv1.KeyRecord))
			return next, next != nil, err
		},
		func(ctx context.Context, rec *busv1.KeyRecord) (*busv1.KeyRecord, error) {
			return ops.PutKey(ctx, rec, false, rec.Key.Version)
		})
	if err != nil {
		return nil, fmt.Errorf("%s key %s: %w", action, id, err)
	}
	if changed {
		s.publishKey(ctx, got, action)
	}
	return &busv1.KeyResponse{Record: got}, nil
}

func (s *Service) revokeKey(ctx context.Context, req *busv1.RevokeKeyRequest) (*busv1.KeyResponse, error) {
	return s.changeKey(ctx, req.Id, req.Org, req.AnyOrg, "revoked", func(rec *busv1.KeyRecord) (*busv1.KeyRecord, error) {
		if store.Revoked(rec) {
			return nil, nil // revoked already: the first revocation stands
		}
		rec.Key.RevokedAt, rec.Key.RevokedBy = timestamppb.Now(), req.By
		return rec, nil
	})
}

func (s *Service) rotateKey(ctx context.Context, req *busv1.RotateKeyRequest) (*busv1.KeyResponse, error) {
	if len(req.Sha256) != sha256.Size {
		return nil, bus.FieldError("sha256", "the new secret's SHA-256 (32 bytes) is required")
	}
	if p := req.PreviousExpiresAt; p != nil {
		if err := p.CheckValid(); err != nil {
			return nil, bus.FieldError("previous_expires_at", "%v", err)
		}
	}
	return s.changeKey(ctx, req.Id, req.Org, req.AnyOrg, "rotated", func(rec *busv1.KeyRecord) (*busv1.KeyRecord, error) {
		if store.Revoked(rec) {
			return nil, bus.Errorf(bus.CodeFailedPrecondition, "key %s is revoked: create a new one", req.Id)
		}
		rec.PreviousSha256, rec.Sha256 = rec.Sha256, req.Sha256
		rec.Key.PreviousExpiresAt = req.PreviousExpiresAt
		if req.PreviousExpiresAt == nil || !req.PreviousExpiresAt.AsTime().After(time.Now()) {
			rec.PreviousSha256, rec.Key.PreviousExpiresAt = nil, nil
		}
		rec.Key.Hint, rec.Key.RotatedAt = req.Hint, timestamppb.Now()
		return rec, nil
	})
}

// publishKey announces a key change (never its hash).
func (s *Service) publishKey(ctx context.Context, rec *busv1.KeyRecord, action string) {
	k := rec.GetKey()
	s.publishRecord(ctx, s.names.KeyEvent(k.Org, k.Id), fmt.Sprintf("key:%s:%d", k.Id, k.Version),
		&agentmeshv1.KeyEvent{Key: k, Action: action})
}
