package router

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// serverTLS builds the API's TLS configuration from cfg (nil: plaintext):
// the gRPC listener's and the HTTP listener's.
func serverTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCert == "" && cfg.TLSKey == "" {
		if cfg.TLSClientCA != "" {
			return nil, errors.New("TLSClientCA needs TLSCert and TLSKey (mutual TLS is TLS first)")
		}
		return nil, nil
	}
	if cfg.TLSCert == "" || cfg.TLSKey == "" {
		return nil, errors.New("TLSCert and TLSKey go together")
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.TLSClientCA != "" {
		pool, err := loadCAs(cfg.TLSClientCA)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

func loadCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// ReloadKeys re-reads the keys file now. On error the keys stay as they
// were.
func (s *Service) ReloadKeys() error {
	changed, err := s.keys.reload(true)
	if err != nil {
		return err
	}
	if changed {
		s.log.Info("router: API keys reloaded", "file", s.cfg.KeysFile, "keys", len(s.keys.ring().keys))
	}
	return nil
}

// watchKeys reloads the keys file when it changes and on SIGHUP, until
// ctx ends. A failed reload is logged once per change of the error.
func (s *Service) watchKeys(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tick := time.NewTicker(s.cfg.KeysReload)
	defer tick.Stop()
	lastErr := ""
	for {
		force := false
		select {
		case <-ctx.Done():
			return
		case <-hup:
			force = true
		case <-tick.C:
		}
		changed, err := s.keys.reload(force)
		switch {
		case err != nil:
			if err.Error() != lastErr {
				s.log.Error("router: API keys not reloaded; the previous keys stay in force", "err", err)
				lastErr = err.Error()
			}
		case changed:
			lastErr = ""
			s.log.Info("router: API keys reloaded", "file", s.cfg.KeysFile, "keys", len(s.keys.ring().keys))
		}
	}
}
