package router

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// APIKey is one API key the router accepts: its SHA-256 (the key itself is
// never kept), the org it acts for, its role and a name that audit records
// (an approval's decided_by) carry.
type APIKey struct {
	Name string
	// Org the key acts for; empty for a platform key.
	Org  string
	Role Role
	// SHA256 of the key as presented by the client.
	SHA256 [sha256.Size]byte
	// ID of a key kept by the state service (KeyService; apikeys.go), and
	// when it stops being accepted (zero: never). Configured keys have
	// neither.
	ID        string
	ExpiresAt time.Time
}

// OrgPattern is the form of an org name: 1-63 lower-case letters and
// digits, single hyphens between them, so that an org maps one-to-one onto
// a subject token and onto the AGENTMESH_SECRET_<ORG>__<NAME> variables of
// the executor (an org never holds "--", which would read as "__").
const OrgPattern = `[a-z0-9]+(-[a-z0-9]+)*`

var (
	orgRe     = regexp.MustCompile(`^` + OrgPattern + `$`)
	keyNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,63}$`)
)

// ValidOrg reports whether org is a valid org name.
func ValidOrg(org string) bool { return len(org) <= 63 && orgRe.MatchString(org) }

// keyring is the set of keys; it is replaced whole on reload.
type keyring struct {
	keys []APIKey
}

// lookup returns the key whose hash equals sum. Every stored hash is
// compared, in constant time, whatever matches.
func (r *keyring) lookup(sum [sha256.Size]byte) (APIKey, bool) {
	var found APIKey
	hit := 0
	for i := range r.keys {
		eq := subtle.ConstantTimeCompare(r.keys[i].SHA256[:], sum[:])
		if eq == 1 && hit == 0 {
			found = r.keys[i]
		}
		hit |= eq
	}
	return found, hit == 1
}

func checkKey(k APIKey) error {
	if !keyNameRe.MatchString(k.Name) {
		return fmt.Errorf("key name %q must match [A-Za-z0-9][A-Za-z0-9_.@:-]{0,63}", k.Name)
	}
	if !k.Role.valid() {
		return fmt.Errorf("key %q: unknown role %q (want admin, operator, approver, reader or platform)", k.Name, k.Role)
	}
	if k.Role == RolePlatform {
		if k.Org != "" {
			return fmt.Errorf("key %q: a platform key names no org (it manages the shared agents)", k.Name)
		}
		return nil
	}
	if !ValidOrg(k.Org) {
		return fmt.Errorf("key %q: org %q must be 1-63 lower-case letters and digits with single hyphens between (%s)", k.Name, k.Org, OrgPattern)
	}
	return nil
}

func newKeyring(keys []APIKey) (*keyring, error) {
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, err
		}
		if names[k.Name] {
			return nil, fmt.Errorf("key name %q appears twice", k.Name)
		}
		if hashes[k.SHA256] {
			return nil, fmt.Errorf("key %q: the same key appears twice", k.Name)
		}
		names[k.Name], hashes[k.SHA256] = true, true
	}
	return &keyring{keys: keys}, nil
}

// EnvKeys turns the AGENTMESH_API_KEYS form (key → "org" or "org:role")
// into keys. A key without a role is admin in its org: it may do
// everything, as every key could before roles. "*:platform" makes a
// platform key. Each is named "key-" and the first 8 hex digits of its
// SHA-256.
func EnvKeys(m map[string]string) ([]APIKey, error) {
	out := make([]APIKey, 0, len(m))
	for key, v := range m {
		if key == "" || v == "" {
			return nil, errors.New("API keys must not hold an empty key or org")
		}
		org, role, ok := strings.Cut(v, ":")
		if !ok {
			role = string(RoleAdmin)
		}
		if Role(role) == RolePlatform && org == "*" {
			org = ""
		}
		sum := sha256.Sum256([]byte(key))
		out = append(out, APIKey{Name: "key-" + hex.EncodeToString(sum[:4]), Org: org, Role: Role(role), SHA256: sum})
	}
	return out, nil
}

// keysFile is the JSON form of AGENTMESH_API_KEYS_FILE.
type keysFile struct {
	Keys []struct {
		Name   string `json:"name"`
		Org    string `json:"org"`
		Role   string `json:"role"`
		SHA256 string `json:"sha256"`
	} `json:"keys"`
}

// MaxKeysFileBytes bounds a keys file.
const MaxKeysFileBytes = 4 << 20

// ParseKeysFile parses a keys file:
//
//	{"keys": [{"name": "ci", "org": "acme", "role": "operator",
//	           "sha256": "<64 hex digits: SHA-256 of the key>"}]}
//
// Unknown fields, bad hashes, unknown roles, duplicate names or keys are
// errors naming the entry.
func ParseKeysFile(data []byte) ([]APIKey, error) {
	if len(data) > MaxKeysFileBytes {
		return nil, fmt.Errorf("keys file is larger than %d bytes", MaxKeysFileBytes)
	}
	var f keysFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("keys file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("keys file: trailing data after the JSON object")
	}
	out := make([]APIKey, 0, len(f.Keys))
	for i, e := range f.Keys {
		h, err := hex.DecodeString(strings.ToLower(strings.TrimSpace(e.SHA256)))
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("keys file: keys[%d] (%q): sha256 must be 64 hex digits (printf %%s \"$KEY\" | sha256sum)", i, e.Name)
		}
		k := APIKey{Name: e.Name, Org: e.Org, Role: Role(e.Role)}
		copy(k.SHA256[:], h)
		if err := checkKey(k); err != nil {
			return nil, fmt.Errorf("keys file: keys[%d]: %w", i, err)
		}
		out = append(out, k)
	}
	if _, err := newKeyring(out); err != nil {
		return nil, fmt.Errorf("keys file: %w", err)
	}
	return out, nil
}

// keySource holds the current keyring: the fixed keys (configuration)
// plus those of the keys file, reloaded when the file's content changes.
type keySource struct {
	fixed []APIKey
	path  string

	cur atomic.Pointer[keyring]

	mu  sync.Mutex
	sum [sha256.Size]byte // of the keys file the keyring was built from

	// stored are the keys kept by the state service (apikeys.go).
	stored storedKeys
}

func newKeySource(fixed []APIKey, path string) (*keySource, error) {
	ks := &keySource{fixed: fixed, path: path}
	if _, err := ks.reload(true); err != nil {
		return nil, err
	}
	return ks, nil
}

// reload reads the keys file (when there is one) and swaps the keyring if
// the file's content changed (or force). A file that fails to parse leaves
// the old keyring in place.
func (ks *keySource) reload(force bool) (changed bool, err error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	keys := append([]APIKey(nil), ks.fixed...)
	var sum [sha256.Size]byte
	if ks.path != "" {
		data, err := readLimited(ks.path, MaxKeysFileBytes)
		if err != nil {
			return false, fmt.Errorf("keys file: %w", err)
		}
		sum = sha256.Sum256(data)
		if !force && ks.cur.Load() != nil && sum == ks.sum {
			return false, nil
		}
		fileKeys, err := ParseKeysFile(data)
		if err != nil {
			return false, fmt.Errorf("%s: %w", ks.path, err)
		}
		keys = append(keys, fileKeys...)
	}
	ring, err := newKeyring(keys)
	if err != nil {
		return false, err
	}
	ks.cur.Store(ring)
	ks.sum = sum
	return true, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}

func (ks *keySource) ring() *keyring { return ks.cur.Load() }

// lookup finds the key whose hash is sum: a configured one (compared in
// constant time), else one kept by the state service.
func (ks *keySource) lookup(sum [sha256.Size]byte) (APIKey, bool) {
	if k, ok := ks.ring().lookup(sum); ok {
		return k, true
	}
	return ks.stored.lookup(sum)
}

// keysOf builds the key source of cfg (its API keys and keys file); with
// neither, authentication is off (and said so in the log).
func keysOf(cfg Config, log *slog.Logger) (keys *keySource, authOff bool, err error) {
	envKeys, err := EnvKeys(cfg.APIKeys)
	if err != nil {
		return nil, false, err
	}
	if keys, err = newKeySource(envKeys, cfg.KeysFile); err != nil {
		return nil, false, err
	}
	authOff = len(cfg.APIKeys) == 0 && cfg.KeysFile == ""
	if authOff {
		log.Warn("router: no API keys configured; authentication is OFF and every caller is an admin of org " + DefaultOrg + " (development only)")
	}
	return keys, authOff, nil
}
