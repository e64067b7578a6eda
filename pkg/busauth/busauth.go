// Package busauth holds the identities of the agentmesh bus: decentralised
// NATS JWT authentication (operator → accounts → users, nkeys) with the
// permissions of each identity derived from pkg/subjects.
//
// One operator signs two accounts: SYS (the server's system account) and
// AGENTMESH, the account all agentmesh traffic lives in. AGENTMESH carries
// JetStream limits and one scoped signing key, the tap signer, whose
// template allows only subscribing to the events of the org named by the
// user it signs (subjects.TapTemplate). Each service identity is a user
// signed by the account key with exactly subjects.Permissions(service).
//
// Why JWTs and not nkey users in a server config: tap credentials are
// minted at run time (amctl taps create) by the state service without a
// server reload or restart, and the key that mints them can, by the scoped
// template, mint nothing but subscribe-only taps of one org. Servers load
// the operator and account JWTs with the memory resolver and a preload, the
// same from an embedded server (ServerOptions) and from a config file
// (ServerConfig).
//
// The bundle persists as seeds only (Write/Load); JWTs and creds are signed
// again at every load, so a change of the permission map in a new release
// takes effect on restart with the same keys.
package busauth

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Account names.
const (
	AccountName    = "AGENTMESH"
	SysAccountName = "SYS"
)

// TapRole is the role of the tap scoped signing key.
const TapRole = "tap"

// MaxControlLine is the max_control_line a server needs: a service's
// CONNECT carries its user JWT, permissions included (the state
// service's is the largest, a few KiB).
const MaxControlLine = 32 << 10

// DefaultTapTTL is how long a tap credential is valid when not said.
const DefaultTapTTL = 30 * 24 * time.Hour

// MaxTapTTL bounds a tap credential's lifetime: taps cannot be revoked
// one by one without re-signing the account, so they expire.
const MaxTapTTL = 365 * 24 * time.Hour

// Seed file names in a bundle directory (0600).
const (
	operatorSeedFile = "operator.nk"
	sysSeedFile      = "sys-account.nk"
	accountSeedFile  = "account.nk"
	// TapSignerFile holds the tap signer's seed: the state service needs it
	// (AGENTMESH_NATS_TAP_SIGNER) and nothing else does.
	TapSignerFile = "tap-signer.nk"
	// ServerConfigFile is the nats-server config fragment (operator,
	// resolver, preload) to include from a server's config.
	ServerConfigFile = "auth.conf"
	// AdminCredsFile is the operator's own identity in the account: may
	// say and hear anything (nats stream ls, reading the audit stream).
	// No service gets it; keep it offline with the seeds.
	AdminCredsFile = "admin.creds"
)

// CredsFile is the file name of a service's credentials in a bundle dir.
func CredsFile(service string) string { return service + ".creds" }

// ErrNoBundle says a directory holds no bundle yet.
var ErrNoBundle = errors.New("busauth: no credentials in directory")

// Bundle is the operator, accounts and service identities of one bus.
type Bundle struct {
	names    subjects.Names
	operator nkeys.KeyPair
	sys      nkeys.KeyPair
	account  nkeys.KeyPair
	tap      nkeys.KeyPair
	users    map[string]nkeys.KeyPair // service → user key

	operatorJWT, sysJWT, accountJWT string
	accountPub, sysPub              string
	creds                           map[string][]byte
}

// New creates a bundle with fresh keys for names.
func New(names subjects.Names) (*Bundle, error) {
	seeds := map[string][]byte{}
	for file, mk := range map[string]func() (nkeys.KeyPair, error){
		operatorSeedFile: nkeys.CreateOperator,
		sysSeedFile:      nkeys.CreateAccount,
		accountSeedFile:  nkeys.CreateAccount,
		TapSignerFile:    nkeys.CreateAccount,
	} {
		kp, err := mk()
		if err != nil {
			return nil, fmt.Errorf("busauth: create key: %w", err)
		}
		seeds[file], _ = kp.Seed()
	}
	for _, svc := range subjects.Services {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, fmt.Errorf("busauth: create key: %w", err)
		}
		seeds[svc+".nk"], _ = kp.Seed()
	}
	return fromSeeds(names, seeds)
}

// Load reads the bundle in dir (ErrNoBundle when there is none) and signs
// its JWTs and creds for names.
func Load(dir string, names subjects.Names) (*Bundle, error) {
	files := []string{operatorSeedFile, sysSeedFile, accountSeedFile, TapSignerFile}
	for _, svc := range subjects.Services {
		files = append(files, svc+".nk")
	}
	seeds := map[string][]byte{}
	for i, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) && i == 0 {
			return nil, ErrNoBundle
		}
		if err != nil {
			return nil, fmt.Errorf("busauth: %w", err)
		}
		seeds[f] = bytes.TrimSpace(b)
	}
	return fromSeeds(names, seeds)
}

// Ensure loads the bundle in dir, or creates and writes one when there is
// none (created reports which). Files are 0600, the directory 0700.
func Ensure(dir string, names subjects.Names) (b *Bundle, created bool, err error) {
	b, err = Load(dir, names)
	if errors.Is(err, ErrNoBundle) {
		if b, err = New(names); err != nil {
			return nil, false, err
		}
		created = true
	}
	if err != nil {
		return nil, false, err
	}
	// Write every time: creds and auth.conf are re-signed from the seeds.
	if err := b.Write(dir); err != nil {
		return nil, false, err
	}
	return b, created, nil
}

func fromSeeds(names subjects.Names, seeds map[string][]byte) (*Bundle, error) {
	b := &Bundle{names: names, users: map[string]nkeys.KeyPair{}, creds: map[string][]byte{}}
	parse := func(file string, want nkeys.PrefixByte) (nkeys.KeyPair, error) {
		kp, err := nkeys.FromSeed(seeds[file])
		if err != nil {
			return nil, fmt.Errorf("busauth: %s: %w", file, err)
		}
		pub, _ := kp.PublicKey()
		if nkeys.Prefix(pub) != want {
			return nil, fmt.Errorf("busauth: %s: wrong kind of key", file)
		}
		return kp, nil
	}
	var err error
	if b.operator, err = parse(operatorSeedFile, nkeys.PrefixByteOperator); err != nil {
		return nil, err
	}
	if b.sys, err = parse(sysSeedFile, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if b.account, err = parse(accountSeedFile, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if b.tap, err = parse(TapSignerFile, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	for _, svc := range subjects.Services {
		if b.users[svc], err = parse(svc+".nk", nkeys.PrefixByteUser); err != nil {
			return nil, err
		}
	}
	if err := b.sign(); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Bundle) sign() error {
	opPub, _ := b.operator.PublicKey()
	b.sysPub, _ = b.sys.PublicKey()
	b.accountPub, _ = b.account.PublicKey()
	tapPub, _ := b.tap.PublicKey()

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "agentmesh"
	oc.SystemAccount = b.sysPub
	var err error
	if b.operatorJWT, err = oc.Encode(b.operator); err != nil {
		return fmt.Errorf("busauth: operator jwt: %w", err)
	}
	sc := jwt.NewAccountClaims(b.sysPub)
	sc.Name = SysAccountName
	if b.sysJWT, err = sc.Encode(b.operator); err != nil {
		return fmt.Errorf("busauth: system account jwt: %w", err)
	}
	ac := jwt.NewAccountClaims(b.accountPub)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{
		MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit,
		MaxAckPending: jwt.NoLimit, MemoryMaxStreamBytes: jwt.NoLimit, DiskMaxStreamBytes: jwt.NoLimit,
	}
	scope := jwt.NewUserScope()
	scope.Key = tapPub
	scope.Role = TapRole
	scope.Description = "mints subscribe-only tap credentials of one org (the user's name)"
	tmpl := b.names.TapTemplate()
	scope.Template.Sub.Allow = tmpl.Sub
	scope.Template.Pub.Deny = []string{">"}
	ac.SigningKeys.AddScopedSigner(scope)
	if b.accountJWT, err = ac.Encode(b.operator); err != nil {
		return fmt.Errorf("busauth: account jwt: %w", err)
	}
	for _, svc := range subjects.Services {
		perm, err := b.names.Permissions(svc)
		if err != nil {
			return err
		}
		creds, err := b.userCreds(b.users[svc], "agentmesh-"+svc, perm, 0)
		if err != nil {
			return fmt.Errorf("busauth: %s: %w", svc, err)
		}
		b.creds[svc] = creds
	}
	return nil
}

// userCreds signs a user of the account with perm and formats its creds.
func (b *Bundle) userCreds(kp nkeys.KeyPair, name string, perm subjects.Permission, ttl time.Duration) ([]byte, error) {
	pub, _ := kp.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	setPermissions(&uc.Permissions, perm)
	if ttl > 0 {
		uc.Expires = time.Now().Add(ttl).Unix()
	}
	tok, err := uc.Encode(b.account)
	if err != nil {
		return nil, err
	}
	seed, _ := kp.Seed()
	return jwt.FormatUserConfig(tok, seed)
}

func setPermissions(p *jwt.Permissions, perm subjects.Permission) {
	p.Pub.Allow = append(jwt.StringList(nil), perm.Pub...)
	p.Sub.Allow = append(jwt.StringList(nil), perm.Sub...)
	// An empty allow list allows everything: deny all instead.
	if len(perm.Pub) == 0 {
		p.Pub.Deny = jwt.StringList{">"}
	}
	if len(perm.Sub) == 0 {
		p.Sub.Deny = jwt.StringList{">"}
	}
	if perm.Responses {
		p.Resp = &jwt.ResponsePermission{MaxMsgs: 1}
	}
}

// Names are the subject names the permissions were derived from.
func (b *Bundle) Names() subjects.Names { return b.names }

// AccountPublicKey is the AGENTMESH account's public key.
func (b *Bundle) AccountPublicKey() string { return b.accountPub }

// Creds returns the creds file content of a service identity.
func (b *Bundle) Creds(service string) ([]byte, error) {
	c, ok := b.creds[service]
	if !ok {
		return nil, fmt.Errorf("busauth: unknown service identity %q", service)
	}
	return c, nil
}

// TapSigner returns what the state service needs to mint taps.
func (b *Bundle) TapSigner() *TapSigner {
	seed, _ := b.tap.Seed()
	s, _ := NewTapSigner(seed, b.accountPub)
	return s
}

// UserCreds signs an extra user of the account with perm, valid for ttl
// (0: no expiry). Tests use it for identities outside the service map (a
// superuser driving a test, a client with the wrong permissions).
func (b *Bundle) UserCreds(name string, perm subjects.Permission, ttl time.Duration) ([]byte, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	return b.userCreds(kp, name, perm, ttl)
}

// ServerOptions puts the bundle into an embedded server's options:
// operator mode with a memory resolver preloaded with both accounts.
func (b *Bundle) ServerOptions(o *server.Options) error {
	oc, err := jwt.DecodeOperatorClaims(b.operatorJWT)
	if err != nil {
		return fmt.Errorf("busauth: %w", err)
	}
	r := &server.MemAccResolver{}
	_ = r.Store(b.sysPub, b.sysJWT)
	_ = r.Store(b.accountPub, b.accountJWT)
	o.TrustedOperators = []*jwt.OperatorClaims{oc}
	o.AccountResolver = r
	o.SystemAccount = b.sysPub
	o.NoAuthUser = ""
	return nil
}

// ServerConfig is a nats-server config fragment with the same: include it
// from the server's config (`include auth.conf`).
func (b *Bundle) ServerConfig() string {
	return fmt.Sprintf(`# agentmesh bus identities (written by agentmesh; do not edit).
# Operator mode: every connection must present a user JWT signed for the
# %s account; there is no anonymous access.
max_control_line: %d
operator: %s
system_account: %s
resolver: MEMORY
resolver_preload: {
  %s: %s
  %s: %s
}
`, AccountName, MaxControlLine, b.operatorJWT, b.sysPub, b.sysPub, b.sysJWT, b.accountPub, b.accountJWT)
}

// Write stores the seeds, every service's creds and auth.conf in dir.
func (b *Bundle) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("busauth: %w", err)
	}
	admin, err := b.UserCreds("agentmesh-admin", subjects.Permission{Pub: []string{">"}, Sub: []string{">"}, Responses: true}, 0)
	if err != nil {
		return fmt.Errorf("busauth: admin creds: %w", err)
	}
	files := map[string][]byte{ServerConfigFile: []byte(b.ServerConfig()), AdminCredsFile: admin}
	for file, kp := range map[string]nkeys.KeyPair{
		operatorSeedFile: b.operator, sysSeedFile: b.sys, accountSeedFile: b.account, TapSignerFile: b.tap,
	} {
		seed, _ := kp.Seed()
		files[file] = append(seed, '\n')
	}
	for svc, kp := range b.users {
		seed, _ := kp.Seed()
		files[svc+".nk"] = append(seed, '\n')
		files[CredsFile(svc)] = b.creds[svc]
	}
	for name, data := range files {
		if err := writeFile(filepath.Join(dir, name), data); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes data with mode 0600 through a temporary file, so a
// reader never sees half a key.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("busauth: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("busauth: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("busauth: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("busauth: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("busauth: %w", err)
	}
	return nil
}

// WriteCreds writes a creds file with mode 0600.
func WriteCreds(path string, creds []byte) error { return writeFile(path, creds) }
