package ui

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Sessions. A session is the API key it was opened with, sealed into the
// session cookie with AES-256-GCM under a key derived from the dashboard's
// secret (Config.Secret, AGENTMESH_UI_SECRET), with what the session needs
// besides: its id, its CSRF token, when it was opened and last used, and
// the org a platform key chose. Nothing is kept on the server, so any
// replica holding the same secret honours a session another opened; the
// key is never in a URL and, the cookie being HttpOnly, never readable by
// the page's scripts.
//
// Every request re-checks the key (Authenticate), so a key removed from
// the router's keys ends its sessions at once. A session ends after
// IdleTimeout without a request and MaxAge after sign-in whatever happens;
// signing out clears the cookie and puts the session's id on this
// process's list of ended sessions until its MaxAge has passed. (With
// several replicas another replica does not see that list: a copy of the
// cookie taken before sign-out stays good there until its idle timeout.
// Rotating the secret ends every session.)

// cookieName is the session cookie.
const cookieName = "am_session"

// sealVersion prefixes a sealed session; a cookie of another version
// does not open.
const sealVersion = "v1."

// touchEvery is how stale a session's "last used" may grow before a
// request writes the cookie again (idle expiry has this slack).
const touchEvery = time.Minute

// session is what the cookie holds.
type session struct {
	ID     string `json:"id"`
	Key    string `json:"k"`
	CSRF   string `json:"c"`
	Org    string `json:"o,omitempty"` // a platform key's chosen org
	Opened int64  `json:"t"`           // unix seconds
	Seen   int64  `json:"s"`           // unix seconds
}

// errNoSession is a request without a usable session.
var errNoSession = errors.New("no session")

// sealer seals and opens sessions.
type sealer struct {
	aead cipher.AEAD
	idle time.Duration
	max  time.Duration

	mu    sync.Mutex
	ended map[string]time.Time // signed-out session ids → when they expire anyway
}

func newSealer(secret []byte, idle, maxAge time.Duration) (*sealer, error) {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
	}
	key := sha256.Sum256(append([]byte("agentmesh dashboard session v1\x00"), secret...))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead, idle: idle, max: maxAge, ended: map[string]time.Time{}}, nil
}

// newSession opens a session for key at now.
func newSession(key string, now time.Time) *session {
	return &session{ID: randomToken(16), Key: key, CSRF: randomToken(32), Opened: now.Unix(), Seen: now.Unix()}
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

// seal returns the cookie value of s.
func (k *sealer) seal(s *session) (string, error) {
	plain, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := k.aead.Seal(nonce, nonce, plain, []byte(cookieName))
	return sealVersion + base64.RawURLEncoding.EncodeToString(out), nil
}

// open returns the session a cookie value holds if it is sealed by this
// secret, not ended and not expired at now.
func (k *sealer) open(v string, now time.Time) (*session, error) {
	raw, ok := strings.CutPrefix(v, sealVersion)
	if !ok || len(raw) > 4096 {
		return nil, errNoSession
	}
	data, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || len(data) < k.aead.NonceSize() {
		return nil, errNoSession
	}
	ns := k.aead.NonceSize()
	plain, err := k.aead.Open(nil, data[:ns], data[ns:], []byte(cookieName))
	if err != nil {
		return nil, errNoSession
	}
	var s session
	if err := json.Unmarshal(plain, &s); err != nil || s.Key == "" || s.ID == "" || s.CSRF == "" {
		return nil, errNoSession
	}
	opened, seen := time.Unix(s.Opened, 0), time.Unix(s.Seen, 0)
	if now.Sub(opened) > k.max || now.Sub(seen) > k.idle || seen.After(now.Add(time.Minute)) {
		return nil, errNoSession
	}
	k.mu.Lock()
	_, gone := k.ended[s.ID]
	k.mu.Unlock()
	if gone {
		return nil, errNoSession
	}
	return &s, nil
}

// end records that s was signed out (until it would have expired anyway).
func (k *sealer) end(s *session, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, until := range k.ended {
		if now.After(until) {
			delete(k.ended, id)
		}
	}
	k.ended[s.ID] = time.Unix(s.Opened, 0).Add(k.max)
}

// sameToken compares CSRF tokens in constant time.
func sameToken(a, b string) bool {
	return len(a) > 0 && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// setCookie writes the session cookie: HttpOnly, SameSite=Strict, Secure
// over TLS, for the dashboard's path only, as long as the session's
// absolute lifetime.
func (k *sealer) setCookie(w http.ResponseWriter, r *http.Request, s *session) error {
	v, err := k.seal(s)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: v, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: int(k.max / time.Second),
	})
	return nil
}

// clearCookie removes the session cookie.
func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: -1})
}
