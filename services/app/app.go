// Package app is the agentmesh binary: one subcommand per service
// (state, registry, scheduler, executor, router), `dev` that runs all of
// them over an embedded NATS server, and the scripted model server. The
// main in services/cmd/agentmesh only calls Main.
package app
