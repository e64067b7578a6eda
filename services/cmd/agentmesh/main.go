// Command agentmesh runs agentmesh: all services in one process (`dev`) or
// one service per process. See services/app.
package main

import (
	"os"
	"runtime/debug"

	"github.com/agentmesh/agentmesh/services/app"
)

// serverGCPercent is the garbage collector's target for agentmesh's server
// processes when GOGC is not set. Every bus message a task makes allocates
// (its payload, headers, decoded request, the reply), and at Go's default
// of 100 the collector was the largest single line of the server's CPU per
// task under load — 12–17% (docs/benchmarks.md, "The control plane's cost
// per task"). 200 halves the number of collections for a heap that may
// grow to three times the live data instead of two (the live heap of
// `agentmesh dev` under load is tens of MiB). GOGC in the environment
// still decides (e.g. GOGC=100, or GOMEMLIMIT with GOGC=off).
const serverGCPercent = 200

// gcPercent returns the GC percent to set, or -1 to leave the runtime's
// (GOGC set in the environment).
func gcPercent(lookup func(string) (string, bool)) int {
	if _, set := lookup("GOGC"); set {
		return -1
	}
	return serverGCPercent
}

func main() {
	if p := gcPercent(os.LookupEnv); p >= 0 {
		debug.SetGCPercent(p)
	}
	os.Exit(app.Main(os.Args[1:]))
}
