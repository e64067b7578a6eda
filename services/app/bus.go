package app

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/router"
	"github.com/nats-io/nats.go"
)

// serviceCreds is a service's bus identity as read from its settings.
type serviceCreds struct {
	raw  []byte
	opts []nats.Option
}

// busCreds reads the service's creds (AGENTMESH_NATS_CREDS, required) and
// the CA of the server's TLS certificate (AGENTMESH_NATS_CA).
func (s *settings) busCreds(service string, log *slog.Logger) (serviceCreds, error) {
	path := s.str("AGENTMESH_NATS_CREDS")
	if path == "" {
		return serviceCreds{}, usageError{fmt.Errorf("AGENTMESH_NATS_CREDS is required: the bus refuses anonymous connections (`agentmesh bus init --dir DIR` writes %s)", busauth.CredsFile(service))}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return serviceCreds{}, usageError{fmt.Errorf("AGENTMESH_NATS_CREDS: %w", err)}
	}
	opts, err := busauth.ClientOptions(raw, service, log)
	if err != nil {
		return serviceCreds{}, usageError{fmt.Errorf("AGENTMESH_NATS_CREDS: %w", err)}
	}
	if ca := s.str("AGENTMESH_NATS_CA"); ca != "" {
		if _, err := os.Stat(ca); err != nil {
			return serviceCreds{}, usageError{fmt.Errorf("AGENTMESH_NATS_CA: %w", err)}
		}
		opts = append(opts, nats.RootCAs(ca))
	}
	return serviceCreds{raw: raw, opts: opts}, nil
}

// tapSigner reads the tap signing key (AGENTMESH_NATS_TAP_SIGNER); its
// account is the one that signed the state service's own creds.
func (s *settings) tapSigner(creds []byte) (*busauth.TapSigner, error) {
	path := s.str("AGENTMESH_NATS_TAP_SIGNER")
	if path == "" {
		return nil, nil
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("AGENTMESH_NATS_TAP_SIGNER: %w", err)}
	}
	account, err := busauth.AccountFromCreds(creds)
	if err != nil {
		return nil, usageError{fmt.Errorf("AGENTMESH_NATS_CREDS: %w", err)}
	}
	t, err := busauth.NewTapSigner(seed, account)
	if err != nil {
		return nil, usageError{fmt.Errorf("AGENTMESH_NATS_TAP_SIGNER: %w", err)}
	}
	return t, nil
}

// devAuth loads the bus identities of `agentmesh dev` from <data>/bus,
// creating them on first start (files 0600), and mints a tap credential of
// each org the API keys name (of the default org without keys) into
// <data>/bus/tap-<org>.creds. It returns the taps' paths by org.
func devAuth(dataDir, prefix string, rcfg router.Config, log *slog.Logger) (*busauth.Bundle, map[string]string, error) {
	names, err := subjects.New(prefix)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("AGENTMESH_PREFIX: %w", err)}
	}
	dir := filepath.Join(dataDir, "bus")
	auth, created, err := busauth.Ensure(dir, names)
	if err != nil {
		return nil, nil, err
	}
	if created {
		log.Info("created the bus credentials", "dir", dir)
	}
	orgs := []string{router.DefaultOrg}
	if len(rcfg.APIKeys) > 0 {
		keys, err := router.EnvKeys(rcfg.APIKeys) // values are "org" or "org:role"
		if err != nil {
			return nil, nil, usageError{fmt.Errorf("AGENTMESH_API_KEYS: %w", err)}
		}
		orgs = orgs[:0]
		for _, k := range keys {
			if k.Org != "" && !slices.Contains(orgs, k.Org) { // a platform key has none
				orgs = append(orgs, k.Org)
			}
		}
		slices.Sort(orgs)
	}
	taps := map[string]string{}
	for _, org := range orgs {
		tap, err := auth.TapSigner().Mint(org, busauth.DefaultTapTTL)
		if err != nil {
			return nil, nil, err
		}
		path := filepath.Join(dir, "tap-"+org+".creds")
		if err := busauth.WriteCreds(path, tap.Creds); err != nil {
			return nil, nil, err
		}
		taps[org] = path
	}
	return auth, taps, nil
}

// printTaps tells how to tap each org's events with its credential.
func printTaps(w io.Writer, url string, auth *busauth.Bundle, taps map[string]string) {
	orgs := make([]string, 0, len(taps))
	for org := range taps {
		orgs = append(orgs, org)
	}
	slices.Sort(orgs)
	fmt.Fprintf(w, "  the bus authenticates: no anonymous clients. Tap an org's events (JSON) with its credential:\n")
	for _, org := range orgs {
		fmt.Fprintf(w, "    go run github.com/nats-io/nats.go/examples/nats-sub@v1.55.0 -s %s -creds %s '%s'\n",
			url, taps[org], auth.Names().OrgEvents(org))
	}
	fmt.Fprintf(w, "  (or nats sub --creds FILE ...; more taps: amctl taps create ORG)\n\n")
}

// runBus runs `agentmesh bus <sub>`.
func runBus(args []string) error {
	if len(args) == 0 || args[0] != "init" {
		return usageError{errors.New("usage: agentmesh bus init --dir DIR [--prefix am] [--tls-hosts nats,localhost]")}
	}
	flags := flag.NewFlagSet("agentmesh bus init", flag.ContinueOnError)
	dir := flags.String("dir", "", "directory to write the bus identities to (created, 0700; existing keys are kept)")
	prefix := flags.String("prefix", envOr("AGENTMESH_PREFIX", subjects.DefaultPrefix), "subject prefix the permissions are derived for ($AGENTMESH_PREFIX)")
	hosts := flags.String("tls-hosts", "nats,localhost,127.0.0.1", "host names and IPs of the NATS server's TLS certificate, comma-separated; empty = no TLS files")
	owner := flags.String("owner", "", "UID:GID to give the written files (when run as root for services that run as another user)")
	if err := flags.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if *dir == "" {
		return usageError{errors.New("--dir is required")}
	}
	names, err := subjects.New(*prefix)
	if err != nil {
		return usageError{err}
	}
	_, created, err := busauth.Ensure(*dir, names)
	if err != nil {
		return err
	}
	verb := "kept the existing"
	if created {
		verb = "created"
	}
	fmt.Printf("%s bus identities in %s (prefix %q):\n", verb, *dir, names.Prefix())
	fmt.Printf("  %s         nats-server config fragment (operator, accounts): include it\n", busauth.ServerConfigFile)
	for _, svc := range subjects.Services {
		fmt.Printf("  %-16s AGENTMESH_NATS_CREDS of the %s service\n", busauth.CredsFile(svc), svc)
	}
	fmt.Printf("  %s     AGENTMESH_NATS_TAP_SIGNER of the state service (mints org taps)\n", busauth.TapSignerFile)
	fmt.Printf("  %s      the operator's own identity (anything in the account: nats stream ls, the audit stream); keep it offline\n", busauth.AdminCredsFile)
	fmt.Printf("  *.nk             seeds: keep them secret; the operator and account seeds belong offline\n")
	if *hosts != "" {
		made, err := writeTLS(filepath.Join(*dir, "tls"), strings.Split(*hosts, ","))
		if err != nil {
			return err
		}
		if made {
			fmt.Printf("  tls/ca.pem, tls/server.pem, tls/server-key.pem: NATS TLS (AGENTMESH_NATS_CA=ca.pem)\n")
		} else {
			fmt.Printf("  tls/: kept the existing files\n")
		}
	}
	if *owner != "" {
		if err := chownAll(*dir, *owner); err != nil {
			return usageError{fmt.Errorf("--owner: %w", err)}
		}
	}
	return nil
}

// chownAll gives dir and everything in it to owner ("UID:GID").
func chownAll(dir, owner string) error {
	u, g, ok := strings.Cut(owner, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return fmt.Errorf("want UID:GID, got %q", owner)
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// writeTLS writes a CA and a server certificate for hosts into dir unless
// the certificate is there already.
func writeTLS(dir string, hosts []string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "server.pem")); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "agentmesh bus CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(5, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return false, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "agentmesh nats"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(2, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return false, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return false, err
	}
	files := map[string][]byte{
		"ca.pem":         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"server.pem":     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"server-key.pem": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	for name, data := range files {
		if err := busauth.WriteCreds(filepath.Join(dir, name), data); err != nil {
			return false, err
		}
	}
	return true, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
