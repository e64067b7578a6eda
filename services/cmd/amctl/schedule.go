package main

import (
	"flag"
	"math"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/types/known/durationpb"
)

// scheduleFlags are submit's flags for retries, the queue timeout and the
// budget.
type scheduleFlags struct {
	fs           *flag.FlagSet
	retries      int
	queueTimeout time.Duration
	maxSteps     int
	maxTokens    int64
	maxCost      float64
	maxWall      time.Duration
}

func addScheduleFlags(fs *flag.FlagSet) *scheduleFlags {
	f := &scheduleFlags{fs: fs}
	fs.IntVar(&f.retries, "retries", -1, "retry a transient failure (model down, crash, executor lost, timeout) up to N times (default: the agent's policy, else 3)")
	fs.DurationVar(&f.queueTimeout, "queue-timeout", 0, "fail the task (kind TIMEOUT) if it waits in the queue longer than this, e.g. 10m (default: the agent's, else none)")
	fs.IntVar(&f.maxSteps, "max-steps", 0, "budget: at most N agent steps (default: the agent's)")
	fs.Int64Var(&f.maxTokens, "max-tokens", 0, "budget: at most N model tokens in all (default: the agent's)")
	fs.Float64Var(&f.maxCost, "max-cost", 0, "budget: at most this many US dollars of model cost (default: the agent's)")
	fs.DurationVar(&f.maxWall, "max-wall", 0, "budget: at most this much wall time, e.g. 5m (default: the agent's)")
	return f
}

// apply sets what the flags say on req, or returns a usage error naming
// the flag.
func (f *scheduleFlags) apply(req *agentmeshv1.SubmitTaskRequest) error {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["retries"] {
		if f.retries < 0 || f.retries >= taskstate.MaxRetryAttempts {
			return usagef("--retries: %d is out of range (0 to %d)", f.retries, taskstate.MaxRetryAttempts-1)
		}
		req.RetryPolicy = &agentmeshv1.RetryPolicy{MaxAttempts: int32(f.retries) + 1}
	}
	if set["queue-timeout"] {
		if f.queueTimeout < taskstate.MinQueueTimeout || f.queueTimeout > taskstate.MaxQueueTimeout {
			return usagef("--queue-timeout: %s is out of range (%s to %s)", f.queueTimeout, taskstate.MinQueueTimeout, taskstate.MaxQueueTimeout)
		}
		req.QueueTimeout = durationpb.New(f.queueTimeout)
	}
	b := &agentmeshv1.Budget{}
	switch {
	case f.maxSteps < 0 || f.maxSteps > math.MaxInt32:
		return usagef("--max-steps: %d is out of range", f.maxSteps)
	case f.maxTokens < 0:
		return usagef("--max-tokens: must not be negative")
	case f.maxCost < 0 || math.IsNaN(f.maxCost) || math.IsInf(f.maxCost, 0):
		return usagef("--max-cost: must be a number ≥ 0")
	case f.maxWall < 0:
		return usagef("--max-wall: must not be negative")
	}
	b.MaxSteps, b.MaxTokens, b.MaxCostUsd = int32(f.maxSteps), f.maxTokens, f.maxCost
	if f.maxWall > 0 {
		b.MaxWallTime = durationpb.New(f.maxWall)
	}
	if b.MaxSteps != 0 || b.MaxTokens != 0 || b.MaxCostUsd != 0 || b.MaxWallTime != nil {
		req.Budget = b
	}
	return nil
}
