package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func (c *cli) usage(ctx context.Context, args []string) error {
	fs := c.flags("usage", "[--since D] [--agent A]",
		"Sum the tokens and cost (USD, from the executors' price table) of your org's tasks,\n"+
			"by the time the tasks were created.")
	since := fs.String("since", "", "only tasks created within this long (30m, 2h, 7d); default: all")
	agent := fs.String("agent", "", "only tasks of this agent")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("usage", pos); err != nil {
		return err
	}
	req := &agentmeshv1.GetUsageRequest{Agent: *agent}
	if *since != "" {
		d, err := parseSince(*since)
		if err != nil {
			return usagef("--since: %v", err)
		}
		req.CreatedAfter = timestamppb.New(time.Now().Add(-d))
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.tasks.GetUsage(cctx, req)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	u := resp.GetUsage()
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	scope := "all tasks"
	if *since != "" {
		scope = "tasks created in the last " + *since
	}
	if *agent != "" {
		scope += " of agent " + *agent
	}
	fmt.Fprintf(tw, "scope\t%s\n", scope)
	fmt.Fprintf(tw, "tasks\t%d\n", resp.GetTasks())
	fmt.Fprintf(tw, "prompt tokens\t%d\n", u.GetPromptTokens())
	fmt.Fprintf(tw, "completion tokens\t%d\n", u.GetCompletionTokens())
	fmt.Fprintf(tw, "total tokens\t%d\n", u.GetTotalTokens())
	fmt.Fprintf(tw, "cost (USD)\t%s\n", strconv.FormatFloat(u.GetCostUsd(), 'f', 6, 64))
	return tw.Flush()
}
