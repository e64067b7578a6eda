package executor

import (
	"fmt"
	"strings"
)

// Who starts the agent children (Config.Spawner, AGENTMESH_SPAWNER).
const (
	// SpawnerForkServer: a small long-lived spawner process (package
	// spawner) forks them, so a spawn does not copy the executor's page
	// tables. The default.
	SpawnerForkServer = "fork-server"
	// SpawnerDirect: the executor forks them itself (every spawn copies
	// the whole executor's page tables). For comparison and as a fallback.
	SpawnerDirect = "direct"
)

// ParseSpawner parses "fork-server" or "direct" ("" is fork-server).
func ParseSpawner(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", SpawnerForkServer, "forkserver", "fork_server":
		return SpawnerForkServer, nil
	case SpawnerDirect:
		return SpawnerDirect, nil
	}
	return "", fmt.Errorf("spawner %q: want fork-server or direct", s)
}
