// Command agentmesh runs agentmesh: all services in one process (`dev`) or
// one service per process. See services/app.
package main

import (
	"os"

	"github.com/agentmesh/agentmesh/services/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:]))
}
