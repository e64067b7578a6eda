package router

import (
	"context"
	"runtime"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// versionServer implements agentmeshv1.VersionService.
type versionServer struct {
	agentmeshv1.UnimplementedVersionServiceServer
	s *Service
}

// UnknownVersion is what GetVersion answers when the binary was built
// without one (go build without the Makefile's -ldflags).
const UnknownVersion = "dev"

func (v *versionServer) GetVersion(context.Context, *agentmeshv1.GetVersionRequest) (*agentmeshv1.GetVersionResponse, error) {
	ver := v.s.cfg.Version
	if ver == "" {
		ver = UnknownVersion
	}
	return &agentmeshv1.GetVersionResponse{Version: ver, GoVersion: runtime.Version()}, nil
}
