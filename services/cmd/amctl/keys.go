package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func (c *cli) keysCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "keys", `Usage: amctl keys COMMAND [flags]

API keys managed through the API (admin of an org: its keys; platform key:
every org's, naming --org). A key's secret is shown once, when it is created
or rotated: only its SHA-256 is kept. A revoked key is refused by every
router within about a second. The keys of the server's keys file and of
AGENTMESH_API_KEYS are listed read-only.

Commands:
  create NAME [--role R] [--expires D|TIME] [--org ORG]   make a key, print its secret
  list [--revoked] [--org ORG]                            list the keys
  revoke ID                                               end a key now
  rotate ID [--grace D]                                   a new secret; the old one works D more

Run 'amctl keys COMMAND -h' for a command's flags.
`, args,
		subcommand{"create", c.keyCreate},
		subcommand{"list", c.keyList},
		subcommand{"revoke", c.keyRevoke},
		subcommand{"rotate", c.keyRotate},
	)
}

func (c *cli) keys() agentmeshv1.KeyServiceClient { return agentmeshv1.NewKeyServiceClient(c.conn) }

// parseExpiry reads a duration from now (90d is 90 days) or an RFC 3339
// time.
func parseExpiry(s string) (*timestamppb.Timestamp, error) {
	if s == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return timestamppb.New(t), nil
	}
	d, err := parseSince(s)
	if err != nil {
		return nil, usagef("--expires: %q is neither a duration (720h, 90d) nor an RFC 3339 time", s)
	}
	return timestamppb.New(time.Now().Add(d)), nil
}

func (c *cli) keyCreate(ctx context.Context, args []string) error {
	fs := c.flags("keys create", "NAME [--role R] [--expires D|TIME] [--org ORG]",
		"Create an API key and print its secret, once. Roles: reader (default), operator, approver, admin;\n"+
			"platform (by a platform key, with no --org).")
	role := fs.String("role", "reader", "reader, operator, approver, admin or platform")
	expires := fs.String("expires", "", "refuse the key after this long (720h, 90d) or at this RFC 3339 time")
	org := fs.String("org", "", "the key's org (a platform key must name it; an admin's is its own)")
	pos, err := c.parseConnect(fs, args, "keys create", "NAME")
	if err != nil {
		return err
	}
	exp, err := parseExpiry(*expires)
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.keys().CreateKey(cctx, &agentmeshv1.CreateKeyRequest{Name: pos[0], Role: *role, Org: *org, ExpiresAt: exp})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	fmt.Fprintf(c.stdout, "key %s (%s, org %s, role %s)\nsecret: %s\n", resp.Key.Id, resp.Key.Name, orgName(resp.Key.Org), resp.Key.Role, resp.Secret)
	fmt.Fprintln(c.stderr, "The secret is shown once: store it now.")
	return nil
}

func orgName(org string) string {
	if org == "" {
		return "(platform)"
	}
	return org
}

func (c *cli) keyList(ctx context.Context, args []string) error {
	fs := c.flags("keys list", "[--revoked] [--org ORG]", "List API keys: the configured ones (read-only), then those made through the API.")
	revoked := fs.Bool("revoked", false, "include revoked keys")
	org := fs.String("org", "", "a platform key: only this org's (default: every org's)")
	token := fs.String("page-token", "", "continue from a previous listing")
	if _, err := c.parseConnect(fs, args, "keys list"); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.keys().ListKeys(cctx, &agentmeshv1.ListKeysRequest{IncludeRevoked: *revoked, Org: *org, PageToken: *token})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tORG\tROLE\tSOURCE\tHINT\tCREATED\tEXPIRES\tSTATE")
	for _, k := range resp.Keys {
		state := "active"
		switch {
		case k.RevokedAt != nil:
			state = "revoked " + when(k.RevokedAt) + " by " + k.RevokedBy
		case k.ExpiresAt != nil && k.ExpiresAt.AsTime().Before(time.Now()):
			state = "expired"
		case k.ReadOnly:
			state = "read-only"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Id, k.Name, orgName(k.Org), k.Role, keySource(k.Source), k.Hint,
			when(k.CreatedAt), when(k.ExpiresAt), state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.NextPageToken != "" {
		fmt.Fprintf(c.stdout, "more: --page-token %s\n", resp.NextPageToken)
	}
	return nil
}

func keySource(s agentmeshv1.KeySource) string {
	switch s {
	case agentmeshv1.KeySource_KEY_SOURCE_API:
		return "api"
	case agentmeshv1.KeySource_KEY_SOURCE_FILE:
		return "keys-file"
	case agentmeshv1.KeySource_KEY_SOURCE_ENV:
		return "env"
	}
	return "-"
}

func (c *cli) keyRevoke(ctx context.Context, args []string) error {
	fs := c.flags("keys revoke", "ID", "Revoke an API key: every router refuses it within about a second.")
	pos, err := c.parseConnect(fs, args, "keys revoke", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.keys().RevokeKey(cctx, &agentmeshv1.RevokeKeyRequest{Id: pos[0]})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	fmt.Fprintf(c.stdout, "key %s (%s) revoked at %s\n", resp.Key.Id, resp.Key.Name, when(resp.Key.RevokedAt))
	return nil
}

func (c *cli) keyRotate(ctx context.Context, args []string) error {
	fs := c.flags("keys rotate", "ID [--grace D]", "Give an API key a new secret (printed once); the old secret works for --grace more (default: not at all).")
	grace := fs.Duration("grace", 0, "how long the old secret keeps working (at most 720h)")
	pos, err := c.parseConnect(fs, args, "keys rotate", "ID")
	if err != nil {
		return err
	}
	req := &agentmeshv1.RotateKeyRequest{Id: pos[0]}
	if *grace < 0 {
		return usagef("--grace: must not be negative")
	}
	if *grace > 0 {
		req.Grace = durationpb.New(*grace)
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.keys().RotateKey(cctx, req)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	fmt.Fprintf(c.stdout, "key %s (%s) rotated\nsecret: %s\n", resp.Key.Id, resp.Key.Name, resp.Secret)
	if resp.Key.PreviousExpiresAt != nil {
		fmt.Fprintf(c.stdout, "the old secret works until %s\n", when(resp.Key.PreviousExpiresAt))
	}
	fmt.Fprintln(c.stderr, "The secret is shown once: store it now.")
	return nil
}
