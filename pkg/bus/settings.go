package bus

import (
	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/subjects"
)

// The variables of the bus every service reads (their docs: the binary's
// EnvVars table).
const (
	EnvPrefix         = "AGENTMESH_PREFIX"
	EnvStreamReplicas = "AGENTMESH_STREAM_REPLICAS"
)

// MaxReplicas is the most stream replicas a JetStream cluster keeps.
const MaxReplicas = 5

// ReadSettings reads the bus settings every service shares: the subject
// prefix (AGENTMESH_PREFIX; "" is subjects.DefaultPrefix) and the streams'
// replicas (AGENTMESH_STREAM_REPLICAS, 0 to 5; 0 is 1). A bad value is kept
// in r, naming its variable.
func ReadSettings(r *envconf.Reader) (prefix string, streams StreamOptions) {
	prefix = r.String(EnvPrefix)
	if _, err := subjects.New(prefix); err != nil {
		r.Fail(EnvPrefix, "want NATS tokens separated by dots, without wildcards or spaces")
	}
	streams.Replicas = r.IntRange(EnvStreamReplicas, 0, MaxReplicas)
	return prefix, streams
}
