package app

import (
	"log/slog"

	"github.com/agentmesh/agentmesh/services/router"
	"github.com/agentmesh/agentmesh/services/router/ui"
)

// dashboardConfig reads the dashboard's settings (AGENTMESH_UI*).
func (s *settings) dashboardConfig() (ui.Config, error) {
	cfg, err := ui.ConfigFrom(s.str)
	if err != nil {
		return ui.Config{}, usageError{err}
	}
	return cfg, nil
}

// mountDashboard serves the dashboard at /ui/ of the router's HTTP
// listener, unless there is none or AGENTMESH_UI is off, and returns its
// address ("" when not served).
func mountDashboard(svc *router.Service, cfg ui.Config, tls bool, dev bool, log *slog.Logger) (string, error) {
	if cfg.Off || svc.HTTPAddr() == "" {
		return "", nil
	}
	if len(cfg.Secret) == 0 && !dev {
		log.Warn("AGENTMESH_UI_SECRET is not set: dashboard sessions are sealed with a random secret of this process; they end when it stops and hold on this replica only (set the same secret on every router replica)")
	}
	if _, err := ui.Mount(svc, cfg, log); err != nil {
		return "", err
	}
	scheme := "http://"
	if tls {
		scheme = "https://"
	}
	return scheme + svc.HTTPAddr() + ui.Prefix, nil
}

// devSignIn says which key signs in to dev's dashboard.
func devSignIn(cfg router.Config) string {
	if len(cfg.APIKeys) == 0 && cfg.KeysFile == "" {
		return `the dev key "dev" (authentication is off without AGENTMESH_API_KEYS: any key signs in as the admin of org "default")`
	}
	return "one of the keys of AGENTMESH_API_KEYS or AGENTMESH_API_KEYS_FILE"
}
