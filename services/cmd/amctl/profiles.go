package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"gopkg.in/yaml.v3"
)

// Profiles: named contexts in a YAML file, each a server, a key and TLS
// files, so that `amctl --context prod list` needs nothing else:
//
//	current_context: dev
//	contexts:
//	  dev:
//	    server: 127.0.0.1:7400
//	  prod:
//	    server: agentmesh.example.com:7400
//	    api_key: sk-...
//	    tls: true
//	    ca: ~/certs/ca.pem          # relative paths: from the file's directory
//	    cert: ~/certs/me.pem        # mutual TLS
//	    cert_key: ~/certs/me-key.pem
//
// The context is --context NAME, else AGENTMESH_CONTEXT, else the file's
// current_context; flags and the environment (AGENTMESH_SERVER,
// AGENTMESH_API_KEY) still win over what it says. The file is
// $AGENTMESH_CONFIG, else $XDG_CONFIG_HOME/agentmesh/config.yaml, else
// ~/.config/agentmesh/config.yaml; no file, no contexts.

// Environment variables of the profiles.
const (
	envContext = "AGENTMESH_CONTEXT"
	envConfig  = "AGENTMESH_CONFIG"
)

// profileFile is the config file.
type profileFile struct {
	CurrentContext string             `yaml:"current_context"`
	Contexts       map[string]profile `yaml:"contexts"`
}

// profile is one named context.
type profile struct {
	Server  string `yaml:"server"`
	APIKey  string `yaml:"api_key"`
	TLS     bool   `yaml:"tls"`
	CA      string `yaml:"ca"`
	Cert    string `yaml:"cert"`
	CertKey string `yaml:"cert_key"`
}

// configPath is where the profiles are read from.
func configPath() (string, error) {
	if p := os.Getenv(envConfig); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the config directory: %v (set %s)", err, envConfig)
	}
	return filepath.Join(dir, "agentmesh", "config.yaml"), nil
}

// loadProfiles reads the file at path; a missing file is no contexts.
func loadProfiles(path string) (*profileFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &profileFile{}, nil
	}
	if err != nil {
		return nil, err
	}
	var f profileFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &f, nil
}

// contextName is the context asked for: --context, else AGENTMESH_CONTEXT,
// else the file's current_context.
func (c *cli) contextName(f *profileFile) string {
	if c.context != "" {
		return c.context
	}
	return f.CurrentContext
}

// applyContext fills the connection settings that neither a flag nor the
// environment gave from the chosen context.
func (c *cli) applyContext() error {
	path, err := configPath()
	if err != nil && c.context == "" { // --context or AGENTMESH_CONTEXT
		return nil // no config directory (no $HOME): no contexts, none asked for
	}
	if err != nil {
		return err
	}
	f, err := loadProfiles(path)
	if err != nil {
		return fmt.Errorf("profiles: %v", err)
	}
	name := c.contextName(f)
	if name == "" {
		return nil
	}
	p, ok := f.Contexts[name]
	if !ok {
		return usagef("--context: no context %q in %s (contexts: %s)", name, path, strings.Join(sortedKeys(f.Contexts), ", "))
	}
	if p.APIKey != "" {
		warnOpenFile(c, path)
	}
	dir := filepath.Dir(path)
	set := func(flagName, env string, dst *string, v string) {
		if v != "" && !c.set[flagName] && (env == "" || os.Getenv(env) == "") {
			*dst = v
		}
	}
	set("server", envServer, &c.server, p.Server)
	set("api-key", envAPIKey, &c.apiKey, p.APIKey)
	set("ca", "", &c.caFile, expandPath(dir, p.CA))
	set("cert", "", &c.certFile, expandPath(dir, p.Cert))
	set("key", "", &c.keyFile, expandPath(dir, p.CertKey))
	if p.TLS && !c.set["tls"] {
		c.useTLS = true
	}
	return nil
}

// expandPath makes a context's file path absolute: ~/ is the home
// directory, a relative path is from the config file's directory.
func expandPath(dir, p string) string {
	switch {
	case p == "":
		return ""
	case strings.HasPrefix(p, "~/"):
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	case !filepath.IsAbs(p):
		return filepath.Join(dir, p)
	}
	return p
}

// warnOpenFile warns once when a file holding an API key can be read by
// others than its owner.
func warnOpenFile(c *cli, path string) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(c.stderr, "amctl: warning: %s holds an API key and is readable by others (mode %v): chmod 600 it\n", path, fi.Mode().Perm())
	}
}

// contextsCmd lists the contexts of the config file.
func (c *cli) contextsCmd(_ context.Context, args []string) error {
	fs := c.flags("contexts", "[--names]", `List the contexts of the config file (`+"$"+envConfig+`, else ~/.config/agentmesh/config.yaml),
the current one marked with *. Choose one with --context NAME or `+envContext+`.`)
	namesOnly := fs.Bool("names", false, "print the names only, one a line")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("contexts", pos); err != nil {
		return err
	}
	path, err := configPath()
	if err != nil {
		return err
	}
	f, err := loadProfiles(path)
	if err != nil {
		return err
	}
	names := sortedKeys(f.Contexts)
	sort.Strings(names)
	if *namesOnly {
		for _, n := range names {
			fmt.Fprintln(c.stdout, n)
		}
		return nil
	}
	current := c.contextName(f)
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CURRENT\tNAME\tSERVER\tTLS\tKEY")
	for _, n := range names {
		p := f.Contexts[n]
		mark, key := "", ""
		if n == current {
			mark = "*"
		}
		if p.APIKey != "" {
			key = "set"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", mark, n, p.Server, p.TLS || p.CA != "" || p.Cert != "", key)
	}
	return tw.Flush()
}
