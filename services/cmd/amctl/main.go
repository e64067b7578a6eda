// Command amctl is the command line client of agentmesh. It speaks only the
// public gRPC API (agentmesh.v1). Named contexts of a config file give it a
// server, a key and TLS files (profiles.go).
//
//	amctl submit [--agent A | --skill S ...] [--wait] TEXT
//	amctl get|cancel|watch|history ID
//	amctl list [--status S ...] [--agent A] [--since 1h]
//	amctl agents create|list|get|versions|update|delete|match ...
//	amctl skills create|list|get|update|delete ...
//	amctl version | contexts | completion bash|zsh|fish
//
// Run `amctl help` for every command and flag. Exit status: 0 on success,
// 1 on an error (or a task that failed or was cancelled under --wait and
// watch), 2 on a usage error.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
