package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// version is amctl's version, stamped by the Makefile
// (-ldflags "-X main.version=..."); empty: from the build's information.
var version = ""

// clientVersion is amctl's version: the stamped one, else the module's
// (go install …@vX), else the commit it was built from, else "dev".
func clientVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// versionInfo is one side's version, as -o json prints it.
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Server    string `json:"server,omitempty"`
}

// versionCmd prints amctl's version and the server's (VersionService).
func (c *cli) versionCmd(ctx context.Context, args []string) error {
	fs := c.flags("version", "[--client]", "Show amctl's version and the version of the agentmesh server it talks to.")
	clientOnly := fs.Bool("client", false, "only amctl's version (no connection)")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("version", pos); err != nil {
		return err
	}
	out := map[string]versionInfo{"client": {Version: clientVersion(), GoVersion: runtime.Version()}}
	var serverErr error
	if !*clientOnly {
		if serverErr = c.connect(); serverErr == nil {
			cctx, cancel := c.call(ctx)
			defer cancel()
			var v *agentmeshv1.GetVersionResponse
			if v, serverErr = agentmeshv1.NewVersionServiceClient(c.conn).GetVersion(cctx, &agentmeshv1.GetVersionRequest{}); serverErr == nil {
				out["server"] = versionInfo{Version: v.GetVersion(), GoVersion: v.GetGoVersion(), Server: c.server}
			}
		}
	}
	if c.json() {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, string(b))
		return serverErr
	}
	fmt.Fprintf(c.stdout, "client: amctl %s (%s)\n", out["client"].Version, out["client"].GoVersion)
	if s, ok := out["server"]; ok {
		fmt.Fprintf(c.stdout, "server: agentmesh %s (%s) at %s\n", s.Version, s.GoVersion, s.Server)
	}
	return serverErr
}
