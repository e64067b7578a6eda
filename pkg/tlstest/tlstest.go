// Package tlstest makes a throwaway certificate authority with a server
// certificate for 127.0.0.1/localhost and a client certificate, written as
// PEM files into a test's temporary directory: for TLS and mutual-TLS
// tests of the gRPC API and amctl. Test support only.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Files are the PEM files of one test PKI.
type Files struct {
	// CA is the certificate of the authority that signed the others.
	CA string
	// ServerCert and ServerKey: for 127.0.0.1, ::1 and localhost.
	ServerCert, ServerKey string
	// ClientCert and ClientKey: a client certificate signed by CA.
	ClientCert, ClientKey string
	// OtherCA is an unrelated authority (and OtherClientCert/Key a client
	// certificate it signed), for "wrong CA" cases.
	OtherCA                         string
	OtherClientCert, OtherClientKey string
}

// New writes a fresh PKI into t.TempDir().
func New(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := authority(t, "agentmesh test CA")
	other, otherKey := authority(t, "unrelated CA")
	f := Files{
		CA:      writeCert(t, dir, "ca.pem", ca.Raw),
		OtherCA: writeCert(t, dir, "other-ca.pem", other.Raw),
	}
	f.ServerCert, f.ServerKey = leaf(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	f.ClientCert, f.ClientKey = leaf(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	f.OtherClientCert, f.OtherClientKey = leaf(t, dir, "other-client", other, otherKey, x509.ExtKeyUsageClientAuth)
	return f
}

var serial atomic.Int64

func next() *big.Int { return big.NewInt(serial.Add(1)) }

func authority(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: next(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func leaf(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: next(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writeCert(t, dir, name+".pem", der)
	keyFile = filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func writeCert(t testing.TB, dir, name string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
