package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

func (c *cli) approvalsCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "approvals", `Usage: amctl approvals COMMAND [flags]

A tool call that needs a person's approval blocks its task until someone
decides. Approved, the call runs once and the task goes on where it stopped;
rejected, the model is told and carries on.

Commands:
  list [--task ID]                 list pending approvals
  approve ID [--comment TEXT]      approve a tool call
  reject ID [--comment TEXT]       reject a tool call

Run 'amctl approvals COMMAND -h' for a command's flags.
`, args,
		subcommand{"list", c.approvalList},
		subcommand{"approve", func(ctx context.Context, a []string) error { return c.approvalDecide(ctx, a, true) }},
		subcommand{"reject", func(ctx context.Context, a []string) error { return c.approvalDecide(ctx, a, false) }},
	)
}

func (c *cli) approvalList(ctx context.Context, args []string) error {
	fs := c.flags("approvals list", "[--task ID]", "List pending approvals, with the exact tool call each one would run.")
	task := fs.String("task", "", "only this task's")
	limit := fs.Int("limit", 0, "at most this many")
	token := fs.String("page-token", "", "continue from a previous listing")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("approvals list", pos); err != nil {
		return err
	}
	if *limit < 0 || *limit > 1000 {
		return usagef("--limit: must be between 0 and 1000")
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := agentmeshv1.NewApprovalServiceClient(c.conn).ListApprovals(cctx, &agentmeshv1.ListApprovalsRequest{
		TaskId: *task, PageSize: int32(*limit), PageToken: *token,
	})
	if err != nil {
		return taskErr(*task, err)
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	if len(resp.GetApprovals()) == 0 {
		fmt.Fprintln(c.stdout, "no pending approvals")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "APPROVAL\tTASK\tAGENT\tTOOL\tRISK\tDEADLINE\tARGUMENTS")
	for _, a := range resp.GetApprovals() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Id, a.TaskId, a.Agent, a.Tool, dash(a.Risk), when(a.Deadline), clip(a.Arguments, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.GetNextPageToken() != "" {
		fmt.Fprintf(c.stdout, "more: --page-token %s\n", resp.GetNextPageToken())
	}
	return nil
}

func (c *cli) approvalDecide(ctx context.Context, args []string, approve bool) error {
	verb := "reject"
	if approve {
		verb = "approve"
	}
	fs := c.flags("approvals "+verb, "ID [--comment TEXT]", "Decide a pending tool call.")
	comment := fs.String("comment", "", "why (shown to the model when rejecting)")
	pos, err := c.parseConnect(fs, args, "approvals "+verb, "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	client := agentmeshv1.NewApprovalServiceClient(c.conn)
	var ap *agentmeshv1.Approval
	var task *agentmeshv1.Task
	if approve {
		resp, err := client.ApproveToolCall(cctx, &agentmeshv1.ApproveToolCallRequest{ApprovalId: pos[0], Comment: *comment})
		if err != nil {
			return err
		}
		ap, task = resp.GetApproval(), resp.GetTask()
	} else {
		resp, err := client.RejectToolCall(cctx, &agentmeshv1.RejectToolCallRequest{ApprovalId: pos[0], Comment: *comment})
		if err != nil {
			return err
		}
		ap, task = resp.GetApproval(), resp.GetTask()
	}
	if c.json() {
		return c.printJSON(ap, false)
	}
	done := "rejected"
	if approve {
		done = "approved"
	}
	fmt.Fprintf(c.stdout, "%s %s: %s %s; task %s resumes\n", ap.GetId(), done, ap.GetTool(), clip(ap.GetArguments(), 80), task.GetId())
	return nil
}

func (c *cli) toolsCmd(ctx context.Context, args []string) error {
	fs := c.flags("tools", "", "List the built-in tools agents can be given.")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("tools", pos); err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := agentmeshv1.NewToolServiceClient(c.conn).ListTools(cctx, &agentmeshv1.ListToolsRequest{})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tCATEGORY\tRISK\tRUNS IN\tAPPROVAL\tDESCRIPTION")
	for _, t := range resp.GetTools() {
		appr := "no"
		if t.NeedsApproval {
			appr = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Category, t.Risk, t.RunsIn, appr, clip(t.Description, 70))
	}
	return tw.Flush()
}
