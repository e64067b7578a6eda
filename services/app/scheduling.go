package app

import "github.com/agentmesh/agentmesh/pkg/envconf"

// parseLabels reads "k=v,k2=v2".
func parseLabels(v string) (map[string]string, error) { return envconf.ParsePairs(v) }
