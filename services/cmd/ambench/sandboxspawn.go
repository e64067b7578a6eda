package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/executor/spawner"
)

// sandboxCeiling starts bin n times, par at a time, as the executor
// starts a fresh agent child with strict isolation — the task's cgroups
// and workspace made, the child forked by a spawner into the sandbox's
// namespaces with its own host uid and placed in its cgroups, waited for,
// everything removed — and returns spawns per second. bin exits at once
// and confines nothing itself (no Landlock, no fresh root, no agent), so
// this is the envelope alone: the most tasks/s a design with a fresh
// sandboxed child per task could reach here, with a server, an agent and
// a model that cost nothing. This binary serves as the spawner (it links
// package spawner) and as the sandbox's start-up probe. It also returns
// the CPU per spawn: sb.server is this process's (preparing and removing
// the cgroups and workspace, as the executor does), sb.agents the
// spawner's and the children's — the figure to set beside a task's
// "spawner + agent children".
func sandboxCeiling(bin string, n, par int) (float64, cpuTimes, error) {
	rate, cpu, err := sandboxRun(bin, n, par)
	if err != nil || n <= 0 {
		return rate, cpuTimes{}, err
	}
	per := func(d time.Duration) time.Duration { return d / time.Duration(n) }
	return rate, cpuTimes{server: per(cpu.server), agents: per(cpu.agents)}, nil
}

func sandboxRun(bin string, n, par int) (float64, cpuTimes, error) {
	ws, err := os.MkdirTemp("", "ambench-sandbox-")
	if err != nil {
		return 0, cpuTimes{}, err
	}
	defer os.RemoveAll(ws)
	// The tasks' uids must reach their workspaces below it.
	if err := os.Chmod(ws, 0o711); err != nil {
		return 0, cpuTimes{}, err
	}
	sb, err := sandbox.New(sandbox.Config{Level: sandbox.Strict, WorkspaceRoot: ws, Node: "ambench", CgroupPool: sandbox.DefaultCgroupPool})
	if err != nil {
		return 0, cpuTimes{}, fmt.Errorf("strict isolation unavailable (run as root): %w", err)
	}
	// The executor's default pool of ended tasks' cgroup sets, removed
	// with the rest of the instance when the phase ends.
	defer sb.Close()
	exe, err := os.Executable()
	if err != nil {
		return 0, cpuTimes{}, err
	}
	sp, err := spawner.Start(exe, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return 0, cpuTimes{}, err
	}
	defer sp.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, cpuTimes{}, err
	}
	defer devnull.Close()
	one := func(i int64) error {
		t, err := sb.Prepare("ceiling-" + strconv.FormatInt(i, 10))
		if err != nil {
			return err
		}
		defer t.Cleanup()
		cmd, err := t.Command(context.Background(), []string{bin}, nil)
		if err != nil {
			return err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, devnull
		p, err := sp.StartTask(context.Background(), t, cmd)
		if err != nil {
			return err
		}
		ws, err := p.Wait()
		if err != nil {
			return err
		}
		if !ws.Exited() || ws.ExitStatus() != 0 {
			return fmt.Errorf("the child ended with wait status %#x", int(ws))
		}
		return nil
	}
	cpu0 := readCPU(os.Getpid())
	rate, err := perSecond(n, par, one)
	if err != nil {
		return 0, cpuTimes{}, fmt.Errorf("spawn %s in the sandbox: %w", bin, err)
	}
	return rate, readCPU(os.Getpid()).sub(cpu0), nil
}
