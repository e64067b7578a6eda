package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (c *cli) proposalsCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "proposals", `Usage: amctl proposals COMMAND [flags]

When no agent fits a task (none offers its skills, or none covers enough of
them), the registry drafts one from the skill catalogue and the task waits,
blocked, for a person to decide. Approved for the task, the agent serves
that task and its sub-tasks and then goes; approved --permanent, it is
saved to your org's catalogue; rejected, the task fails with the reason.

Commands:
  list [--status STATUS]              list proposals (pending by default)
  show ID                             show a proposal and its drafted agent
  approve ID [--permanent]            approve: the task runs on the agent
  reject ID --reason TEXT             reject: the task fails with the reason

Run 'amctl proposals COMMAND -h' for a command's flags.
`, args,
		subcommand{"list", c.proposalList},
		subcommand{"show", c.proposalShow},
		subcommand{"approve", c.proposalApprove},
		subcommand{"reject", c.proposalReject},
	)
}

// parseProposalStatus reads --status: pending, approved, permanent or
// rejected (or the enum's name).
func parseProposalStatus(s string) (agentmeshv1.ProposalStatus, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "pending":
		return agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING, nil
	case "approved":
		return agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, nil
	case "permanent", "approved-permanent", "approved_permanent":
		return agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT, nil
	case "rejected":
		return agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED, nil
	}
	if v, ok := agentmeshv1.ProposalStatus_value[strings.ToUpper(strings.TrimSpace(s))]; ok && v != 0 {
		return agentmeshv1.ProposalStatus(v), nil
	}
	return 0, usagef("--status: %q is not a proposal status (want pending, approved, permanent or rejected)", s)
}

func proposalStatusName(s agentmeshv1.ProposalStatus) string {
	switch s {
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING:
		return "pending"
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED:
		return "approved"
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT:
		return "approved permanently"
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED:
		return "rejected"
	}
	return "unspecified"
}

// proposalErr names the proposal in a not-found error.
func proposalErr(id string, err error) error {
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("proposal %s not found", id)
	}
	return err
}

func (c *cli) proposalList(ctx context.Context, args []string) error {
	fs := c.flags("proposals list", "[--status STATUS]", "List your org's agent proposals, newest task first.")
	st := fs.String("status", "pending", "pending, approved, permanent or rejected")
	limit := fs.Int("limit", 0, "at most this many tasks looked at")
	token := fs.String("page-token", "", "continue from a previous listing")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("proposals list", pos); err != nil {
		return err
	}
	want, err := parseProposalStatus(*st)
	if err != nil {
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
	resp, err := agentmeshv1.NewProposalServiceClient(c.conn).ListProposals(cctx, &agentmeshv1.ListProposalsRequest{
		Status: want, PageSize: int32(*limit), PageToken: *token,
	})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	if len(resp.GetProposals()) == 0 {
		fmt.Fprintf(c.stdout, "no %s proposals\n", proposalStatusName(want))
	} else {
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PROPOSAL\tTASK\tAGENT\tSKILLS\tSTATUS\tCREATED\tREASON")
		for _, p := range resp.GetProposals() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Id, p.TaskId, p.GetAgent().GetName(), strings.Join(p.GetAgent().GetSkills(), ","),
				proposalStatusName(p.Status), when(p.CreatedAt), clip(p.Reason, 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if resp.GetNextPageToken() != "" {
		fmt.Fprintf(c.stdout, "more: --page-token %s\n", resp.GetNextPageToken())
	}
	return nil
}

func (c *cli) proposalShow(ctx context.Context, args []string) error {
	fs := c.flags("proposals show", "ID", "Show a proposal: why, the drafted agent, the decision.")
	pos, err := c.parseConnect(fs, args, "proposals show", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := agentmeshv1.NewProposalServiceClient(c.conn).GetProposal(cctx, &agentmeshv1.GetProposalRequest{Id: pos[0]})
	if err != nil {
		return proposalErr(pos[0], err)
	}
	p := resp.GetProposal()
	if c.json() {
		return c.printJSON(p, true)
	}
	a := p.GetAgent()
	model := "the default model"
	if m := a.GetModel().GetModel(); m != "" {
		model = m
	}
	fmt.Fprintf(c.stdout, "proposal:  %s (%s)\n", p.Id, proposalStatusName(p.Status))
	fmt.Fprintf(c.stdout, "task:      %s (%s)\n", p.TaskId, taskstate.Name(resp.GetTask().GetStatus()))
	fmt.Fprintf(c.stdout, "why:       %s\n", p.Reason)
	fmt.Fprintf(c.stdout, "created:   %s\n", when(p.CreatedAt))
	if p.DecidedAt != nil {
		fmt.Fprintf(c.stdout, "decided:   %s by %s\n", when(p.DecidedAt), dash(p.DecidedBy))
		if p.Comment != "" {
			fmt.Fprintf(c.stdout, "comment:   %s\n", p.Comment)
		}
	}
	fmt.Fprintf(c.stdout, "agent:     %s\n", a.GetName())
	fmt.Fprintf(c.stdout, "skills:    %s\n", strings.Join(a.GetSkills(), ", "))
	fmt.Fprintf(c.stdout, "tools:     %s\n", noneIfEmpty(strings.Join(a.GetTools(), ", ")))
	fmt.Fprintf(c.stdout, "model:     %s\n", model)
	fmt.Fprintf(c.stdout, "prompt:\n")
	for _, line := range strings.Split(a.GetSystemPrompt(), "\n") {
		fmt.Fprintf(c.stdout, "  %s\n", line)
	}
	if p.Status == agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING {
		fmt.Fprintf(c.stdout, "decide:    amctl proposals approve %s [--permanent] | amctl proposals reject %s --reason TEXT\n", p.Id, p.Id)
	}
	return nil
}

func (c *cli) proposalApprove(ctx context.Context, args []string) error {
	fs := c.flags("proposals approve", "ID [--permanent] [--comment TEXT]", "Approve a proposed agent: the task runs on it.")
	permanent := fs.Bool("permanent", false, "save the agent to your org's catalogue (otherwise it serves this task and its sub-tasks only)")
	comment := fs.String("comment", "", "why, recorded with the decision")
	pos, err := c.parseConnect(fs, args, "proposals approve", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := agentmeshv1.NewProposalServiceClient(c.conn).ApproveProposal(cctx, &agentmeshv1.ApproveProposalRequest{Id: pos[0], Permanent: *permanent, Comment: *comment})
	if err != nil {
		return proposalErr(pos[0], err)
	}
	if c.json() {
		return c.printJSON(resp.GetProposal(), false)
	}
	p := resp.GetProposal()
	scope := "for this task only"
	if *permanent {
		scope = "permanently: saved to the catalogue"
	}
	fmt.Fprintf(c.stdout, "%s approved %s; task %s is queued on agent %s\n", p.GetId(), scope, resp.GetTask().GetId(), p.GetAgent().GetName())
	return nil
}

func (c *cli) proposalReject(ctx context.Context, args []string) error {
	fs := c.flags("proposals reject", "ID --reason TEXT", "Reject a proposed agent: the task fails with the reason.")
	reason := fs.String("reason", "", "why (required; the task fails with it)")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("proposals reject", pos, "ID"); err != nil {
		return err
	}
	if strings.TrimSpace(*reason) == "" {
		return usagef("proposals reject: --reason is required")
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := agentmeshv1.NewProposalServiceClient(c.conn).RejectProposal(cctx, &agentmeshv1.RejectProposalRequest{Id: pos[0], Reason: *reason})
	if err != nil {
		return proposalErr(pos[0], err)
	}
	if c.json() {
		return c.printJSON(resp.GetProposal(), false)
	}
	fmt.Fprintf(c.stdout, "%s rejected; task %s failed: %s\n", resp.GetProposal().GetId(), resp.GetTask().GetId(), *reason)
	return nil
}

// describeProposal is what history and watch say of a PROPOSAL event.
func describeProposal(ev *agentmeshv1.TaskEvent) string {
	p := ev.GetProposal()
	text := oneLine(ev.GetReason())
	if p.GetStatus() == agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING {
		text += fmt.Sprintf(": decide with: amctl proposals approve|reject %s", p.GetId())
	}
	return text
}
