package executor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentmesh/agentmesh/pkg/tools"
	"github.com/agentmesh/agentmesh/services/executor/sqltool"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
)

// ToolsConfig configures the tools the executor runs on the children's
// behalf.
type ToolsConfig struct {
	WebFetch webfetch.Config
	// SQL: sql_query is offered only when SQL.URL is set.
	SQL sqltool.Config
}

// PrivilegedTools builds the executor-side tool implementations (for
// Config.Tools): web_fetch always, sql_query when a database is
// configured. close releases them.
func PrivilegedTools(ctx context.Context, cfg ToolsConfig) (fns map[string]ExecFunc, close func(), err error) {
	fns = map[string]ExecFunc{}
	close = func() {}
	f, err := webfetch.New(cfg.WebFetch)
	if err != nil {
		return nil, nil, fmt.Errorf("web_fetch: %w", err)
	}
	fns["web_fetch"] = func(ctx context.Context, env tools.Env, args json.RawMessage, _ bool) (ExecResult, error) {
		var a webfetch.Args
		if err := json.Unmarshal(args, &a); err != nil {
			return ExecResult{}, fmt.Errorf("web_fetch: %w", err)
		}
		a.IdempotencyKey = env.IdempotencyKey
		res, err := f.Fetch(ctx, a)
		if err != nil {
			return ExecResult{}, err
		}
		out := res.Format()
		size := res.Size
		if size < 0 {
			size = int64(len(res.Body))
		}
		return ExecResult{Output: out, Truncated: res.Truncated, Size: size}, nil
	}
	if cfg.SQL.URL != "" {
		t, err := sqltool.New(ctx, cfg.SQL)
		if err != nil {
			return nil, nil, fmt.Errorf("sql_query: %w", err)
		}
		// The gate judges calls with the configured policy.
		tools.Register("sql_query", nil, t.Assess)
		fns["sql_query"] = func(ctx context.Context, env tools.Env, args json.RawMessage, approved bool) (ExecResult, error) {
			var out string
			var err error
			if approved {
				out, err = t.RunApproved(ctx, env, args)
			} else {
				out, err = t.Run(ctx, env, args)
			}
			if err != nil {
				return ExecResult{}, err
			}
			return ExecResult{Output: out}, nil
		}
		close = t.Close
	}
	return fns, close, nil
}
