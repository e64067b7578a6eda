package app

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/agentmesh/agentmesh/services/executor/sqltool"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
)

// toolsConfig reads the configuration of the executor's privileged tools.
func (s *settings) toolsConfig() (executor.ToolsConfig, error) {
	var cfg executor.ToolsConfig
	for _, h := range strings.Split(s.str("AGENTMESH_WEB_FETCH_ALLOW"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.WebFetch.Allow = append(cfg.WebFetch.Allow, h)
		}
	}
	if v := s.str("AGENTMESH_WEB_FETCH_MAX_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return cfg, usageError{fmt.Errorf("AGENTMESH_WEB_FETCH_MAX_BYTES: want a positive number of bytes, got %q", v)}
		}
		cfg.WebFetch.MaxBytes = n
	}
	cfg.SQL.URL = s.str("AGENTMESH_SQL_URL")
	switch p := s.str("AGENTMESH_SQL_POLICY"); p {
	case "", "approve":
		cfg.SQL.Policy = sqltool.PolicyApprove
	case "refuse":
		cfg.SQL.Policy = sqltool.PolicyRefuse
	default:
		return cfg, usageError{fmt.Errorf("AGENTMESH_SQL_POLICY: want approve or refuse, got %q", p)}
	}
	rw, err := strconv.ParseBool(s.str("AGENTMESH_SQL_READ_WRITE"))
	if err != nil {
		return cfg, usageError{fmt.Errorf("AGENTMESH_SQL_READ_WRITE: want true or false, got %q", s.str("AGENTMESH_SQL_READ_WRITE"))}
	}
	cfg.SQL.ReadWrite = rw
	if v := s.str("AGENTMESH_SQL_ALLOW_PRIVILEGED_ROLE"); v != "" {
		if cfg.SQL.AllowPrivilegedRole, err = strconv.ParseBool(v); err != nil {
			return cfg, usageError{fmt.Errorf("AGENTMESH_SQL_ALLOW_PRIVILEGED_ROLE: want true or false, got %q", v)}
		}
	}
	if v := s.str("AGENTMESH_SQL_MAX_ROW_BYTES"); v != "" {
		n, err := parseBytes(v)
		if err != nil || n <= 0 || n > 1<<30 {
			return cfg, usageError{fmt.Errorf("AGENTMESH_SQL_MAX_ROW_BYTES: want a size from 1 byte to 1GiB such as 1MiB, got %q", v)}
		}
		cfg.SQL.MaxRowBytes = int(n)
	}
	return cfg, nil
}

// privileged builds the executor-side tools from the settings, and sets
// them (and the HTTP client for MCP servers, under web_fetch's address
// policy and allowlist) on cfg.
func (s *settings) privileged(ctx context.Context, cfg *executor.Config) (func(), error) {
	tc, err := s.toolsConfig()
	if err != nil {
		return nil, err
	}
	fns, closeFn, err := executor.PrivilegedTools(ctx, tc)
	if err != nil {
		return nil, usageError{err}
	}
	f, err := webfetch.New(tc.WebFetch)
	if err != nil {
		closeFn()
		return nil, usageError{err}
	}
	cfg.Tools, cfg.MCPClient = fns, f.ServiceClient()
	return closeFn, nil
}

// modelOutbound reads the model's outbound policy: the allowlist for
// agents' base URLs and the response cap.
func (s *settings) modelOutbound() (llm.Config, error) {
	var m llm.Config
	for _, h := range strings.Split(s.str("AGENTMESH_MODEL_ALLOW"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			m.Allow = append(m.Allow, h)
		}
	}
	if v := s.str("AGENTMESH_MODEL_MAX_BYTES"); v != "" {
		n, err := parseBytes(v)
		if err != nil || n <= 0 {
			return m, usageError{fmt.Errorf("AGENTMESH_MODEL_MAX_BYTES: want a positive size such as 16MiB, got %q", v)}
		}
		m.MaxResponseBytes = n
	}
	return m, nil
}

// parseBytes reads a size: a number of bytes with an optional K, M or G
// (KiB, MiB, GiB; powers of 1024).
func parseBytes(v string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(v))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional K, M or G", v)
	}
	return n * mult, nil
}
