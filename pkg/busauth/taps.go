package busauth

import (
	"bytes"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// TapSigner mints tap credentials with the account's scoped tap signing
// key. The key's scope (in the account JWT, which only the operator can
// sign) fixes what any user it signs may do — subscribe to
// <p>.evt.<name>.> and <p>.live.<name>.>, publish nothing — so holding it
// gives no more than reading the events of an org.
type TapSigner struct {
	kp         nkeys.KeyPair
	accountPub string
}

// NewTapSigner builds a signer from the tap signer's seed and the public
// key of the account the scoped key belongs to.
func NewTapSigner(seed []byte, accountPub string) (*TapSigner, error) {
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		return nil, fmt.Errorf("busauth: tap signer: %w", err)
	}
	if pub, _ := kp.PublicKey(); nkeys.Prefix(pub) != nkeys.PrefixByteAccount {
		return nil, fmt.Errorf("busauth: tap signer: not an account signing key")
	}
	if !nkeys.IsValidPublicAccountKey(accountPub) {
		return nil, fmt.Errorf("busauth: tap signer: %q is not an account public key", accountPub)
	}
	return &TapSigner{kp: kp, accountPub: accountPub}, nil
}

// AccountFromCreds returns the account public key that signed the user
// JWT of a creds file (a service's own creds name its account).
func AccountFromCreds(creds []byte) (string, error) {
	tok, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		return "", fmt.Errorf("busauth: creds: %w", err)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return "", fmt.Errorf("busauth: creds: %w", err)
	}
	if uc.IssuerAccount != "" {
		return uc.IssuerAccount, nil
	}
	return uc.Issuer, nil
}

// Tap is a minted tap credential.
type Tap struct {
	Org     string
	Creds   []byte
	Expires time.Time
}

// Mint signs a tap user for org valid for ttl (0: DefaultTapTTL; at most
// MaxTapTTL). The org must be one subject token.
func (s *TapSigner) Mint(org string, ttl time.Duration) (*Tap, error) {
	if !subjects.ValidToken(org) {
		return nil, fmt.Errorf("busauth: %q is not a valid org", org)
	}
	switch {
	case ttl == 0:
		ttl = DefaultTapTTL
	case ttl < 0 || ttl > MaxTapTTL:
		return nil, fmt.Errorf("busauth: tap lifetime %s out of range (0 < ttl <= %s)", ttl, MaxTapTTL)
	}
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("busauth: %w", err)
	}
	pub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = org // the scope's {{name()}}
	uc.IssuerAccount = s.accountPub
	uc.SetScoped(true)
	uc.Tags.Add("tap")
	expires := time.Now().Add(ttl).Truncate(time.Second)
	uc.Expires = expires.Unix()
	tok, err := uc.Encode(s.kp)
	if err != nil {
		return nil, fmt.Errorf("busauth: sign tap: %w", err)
	}
	seed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(tok, seed)
	if err != nil {
		return nil, fmt.Errorf("busauth: %w", err)
	}
	return &Tap{Org: org, Creds: creds, Expires: expires}, nil
}
