package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// tapsCmd is `amctl taps create ORG`.
func (c *cli) tapsCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "create" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(c.stdout, "Usage: amctl taps create ORG [-f FILE] [--ttl D]\n\nWrite a subscribe-only NATS credential for ORG's public events (admin).\n")
			return nil
		}
		return usagef("usage: amctl taps create ORG [-f FILE] [--ttl D]")
	}
	fs := c.flags("taps create", "ORG [-f FILE] [--ttl D]",
		"Write a NATS credential that may only subscribe to ORG's public events\n"+
			"(<prefix>.evt.ORG.> and <prefix>.live.ORG.>, JSON; see docs/events.md). Admin only.\n"+
			"The file is written with mode 0600; use it with any NATS client (nats sub --creds FILE).")
	file := fs.String("f", "", "write the credential here (default ORG.creds); - prints it")
	ttl := fs.Duration("ttl", 0, "how long the credential is valid (default 30 days, at most 365 days)")
	pos, err := c.parse(fs, args[1:])
	if err != nil {
		return err
	}
	if err := exactly("taps create", pos, "ORG"); err != nil {
		return err
	}
	org := pos[0]
	req := &agentmeshv1.CreateTapRequest{Org: org}
	if *ttl != 0 {
		if *ttl < 0 {
			return usagef("--ttl: must be positive")
		}
		req.Ttl = durationpb.New(*ttl)
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := agentmeshv1.NewTapServiceClient(c.conn).CreateTap(cctx, req)
	if err != nil {
		return err
	}
	path := *file
	if path == "" {
		path = org + ".creds"
	}
	if path == "-" {
		_, err := fmt.Fprint(c.stdout, resp.GetCreds())
		return err
	}
	if err := writePrivate(path, []byte(resp.GetCreds())); err != nil {
		return err
	}
	if c.json() {
		resp.Creds = ""
		return c.printJSON(resp, true)
	}
	fmt.Fprintf(c.stdout, "wrote %s: a subscribe-only tap of org %s, valid until %s\n", path, resp.GetOrg(),
		resp.GetExpiresAt().AsTime().UTC().Format(time.RFC3339))
	for _, s := range resp.GetSubjects() {
		fmt.Fprintf(c.stdout, "  may subscribe to %s\n", s)
	}
	fmt.Fprintf(c.stdout, "try: nats sub --creds %s '%s'\n", path, first(resp.GetSubjects()))
	return nil
}

func first(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	return ss[0]
}

// writePrivate writes data to path with mode 0600, replacing the file.
func writePrivate(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tap-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
