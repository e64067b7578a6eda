package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
)

// SplitNATS is the directory of `agentmesh bus init --split` that holds the
// NATS servers' files.
const SplitNATS = "nats"

// SplitFiles lists, for each directory `agentmesh bus init --split OUT`
// writes (OUT/<service>, OUT/nats), the files it copies from the bundle
// directory: a service gets its own creds and the CA (state also the tap
// signer), the NATS servers auth.conf (operator and account JWTs, public)
// and their TLS files. No directory gets a seed of the operator or of an
// account, another service's identity or the admin identity: a container
// that mounts one directory holds only what it needs.
func SplitFiles() map[string][]string {
	out := map[string][]string{
		SplitNATS: {busauth.ServerConfigFile, "tls/server.pem", "tls/server-key.pem", "tls/ca.pem"},
	}
	for _, svc := range subjects.Services {
		out[svc] = []string{busauth.CredsFile(svc), "tls/ca.pem"}
	}
	out[subjects.ServiceState] = append(out[subjects.ServiceState], busauth.TapSignerFile)
	return out
}

// splitBus copies SplitFiles from the bundle directory dir into out, each
// file under its base name (tls/ca.pem → ca.pem), mode 0600; a TLS file
// that dir lacks (no --tls-hosts) is skipped.
func splitBus(dir, out string) error {
	for sub, files := range SplitFiles() {
		to := filepath.Join(out, sub)
		if err := os.MkdirAll(to, 0o700); err != nil {
			return fmt.Errorf("--split: %w", err)
		}
		for _, f := range files {
			data, err := os.ReadFile(filepath.Join(dir, f))
			if errors.Is(err, fs.ErrNotExist) && filepath.Dir(f) == "tls" {
				continue
			}
			if err != nil {
				return fmt.Errorf("--split: %w", err)
			}
			if err := busauth.WriteCreds(filepath.Join(to, filepath.Base(f)), data); err != nil {
				return fmt.Errorf("--split: %w", err)
			}
		}
	}
	return nil
}
