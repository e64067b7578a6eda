// Command agentmesh-agent is the agent child process alone: the executor
// runs it for every task (when it is installed next to the agentmesh
// binary) because it starts several times faster than re-executing the
// whole agentmesh binary. It speaks the child protocol on stdin/stdout and
// nothing else; see services/executor/child.
package main

import (
	"os"

	"github.com/agentmesh/agentmesh/services/executor/child"
)

func main() {
	os.Exit(child.Main(os.Stdin, os.Stdout))
}
