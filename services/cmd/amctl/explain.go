package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// explain shows how a task's agent was chosen: the method, the weights,
// every candidate recorded with its score's parts and the facts behind
// them.
func (c *cli) explain(ctx context.Context, args []string) error {
	t, err := c.oneTask(ctx, "explain", "Show why a task went to its agent.", args)
	if err != nil {
		return err
	}
	r := t.GetRouting()
	if c.json() {
		if r == nil {
			r = &agentmeshv1.Routing{}
		}
		return c.printJSON(r, true)
	}
	fmt.Fprintf(c.stdout, "task %s runs on agent %s\n", t.GetId(), t.GetAgent())
	printRouting(c.stdout, r)
	return nil
}

// agentMatch ranks the agents for some skills, as a submit would.
func (c *cli) agentMatch(ctx context.Context, args []string) error {
	fs := c.flags("agents match", "SKILL... [--limit N]", "Rank the agents for these skills (nothing is submitted).")
	limit := fs.Int("limit", 0, "at most this many candidates (server default 20, at most 1000)")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("agents match: at least one SKILL is required")
	}
	if *limit < 0 || *limit > 1000 {
		return usagef("--limit: must be between 0 and 1000")
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.agents.MatchAgents(cctx, &agentmeshv1.MatchAgentsRequest{RequiredSkills: pos, Limit: int32(*limit)})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp.GetRouting(), true)
	}
	printRouting(c.stdout, resp.GetRouting())
	return nil
}

// routingSummary is the one line "amctl get" shows.
func routingSummary(r *agentmeshv1.Routing) string {
	switch r.GetMethod() {
	case "":
		return ""
	case "named":
		return "named by the submitter"
	case "default":
		if a := r.GetAnalysis(); a != nil && len(a.GetSkills()) > 0 {
			return fmt.Sprintf("the default agent (analysis chose %s; no agent offers them)", strings.Join(a.GetSkills(), ", "))
		}
		if r.GetAnalysis() != nil {
			return "the default agent (analysis found no skill of the catalogue)"
		}
		return "the default agent (no agent or skills given)"
	case "proposal":
		return fmt.Sprintf("no agent fitted: %s was proposed, for a person to decide (amctl proposals)", r.GetChosen())
	}
	s := fmt.Sprintf("scored: %s", r.GetChosen())
	if cs := r.GetCandidates(); len(cs) > 0 {
		s += fmt.Sprintf(" (%.3f) of %d candidate(s) shown; amctl explain for the breakdown", cs[0].GetScore(), len(cs))
	}
	return s
}

func printRouting(w io.Writer, r *agentmeshv1.Routing) {
	switch r.GetMethod() {
	case "":
		fmt.Fprintln(w, "no routing decision recorded (the task predates scored matching)")
		return
	case "named", "default":
		fmt.Fprintf(w, "how: %s\n", routingSummary(r))
		if t := r.GetDecidedAt(); t != nil {
			fmt.Fprintf(w, "decided: %s\n", when(t))
		}
		printAnalysis(w, r.GetAnalysis())
		return
	}
	printAnalysis(w, r.GetAnalysis())
	if r.GetMethod() == "proposal" {
		fmt.Fprintf(w, "proposal: %s\n", routingSummary(r))
	}
	wt := r.GetWeights()
	fmt.Fprintf(w, "how: scored for skills %s\n", strings.Join(r.GetRequiredSkills(), ", "))
	fmt.Fprintf(w, "weights: capability %g, workload %g, priority %g, affinity %g\n", wt.GetCapability(), wt.GetWorkload(), wt.GetPriority(), wt.GetAffinity())
	if t := r.GetDecidedAt(); t != nil {
		fmt.Fprintf(w, "decided: %s\n", when(t))
	}
	fmt.Fprintf(w, "chosen: %s\n", r.GetChosen())
	if len(r.GetCandidates()) == 0 {
		fmt.Fprintln(w, "candidates: none (no agent offers any of the skills)")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tAGENT\tSCORE\tCAPABILITY\tWORKLOAD\tPRIORITY\tAFFINITY\tMATCHED\tMISSING\tRUNNING\tRECENT OK/FAILED")
	for i, c := range r.GetCandidates() {
		name := c.GetAgent()
		if c.GetAgentOrg() == "" {
			name += " (shared)"
		}
		running := fmt.Sprint(c.GetRunning())
		if c.GetMaxConcurrency() > 0 {
			running += fmt.Sprintf("/%d", c.GetMaxConcurrency())
		}
		fmt.Fprintf(tw, "%d\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%d/%d\n", i+1, name, c.GetScore(),
			c.GetCapability(), c.GetWorkload(), c.GetPriority(), c.GetAffinity(),
			dash(strings.Join(c.GetMatchedSkills(), ",")), dash(strings.Join(c.GetMissingSkills(), ",")),
			running, c.GetRecentCompleted(), c.GetRecentFailed())
	}
	_ = tw.Flush()
}

// printAnalysis shows how the task analysis chose the required skills of
// a task naming neither agent nor skills.
func printAnalysis(w io.Writer, a *agentmeshv1.TaskAnalysis) {
	if a == nil {
		return
	}
	how := "fallback (similarity of the input to the skills' descriptions)"
	if a.GetMethod() == "model" {
		how = "model " + a.GetModel()
	}
	fmt.Fprintf(w, "analysis: %s over %d skill(s) chose %s\n", how, a.GetCatalogueSkills(), noneIfEmpty(strings.Join(a.GetSkills(), ", ")))
	if e := a.GetModelError(); e != "" {
		fmt.Fprintf(w, "analysis: the model %s was not used: %s\n", a.GetModel(), e)
	}
	if sc := a.GetScores(); len(sc) > 0 {
		parts := make([]string, len(sc))
		for i, s := range sc {
			parts[i] = fmt.Sprintf("%s %.3f", s.GetSkill(), s.GetScore())
		}
		fmt.Fprintf(w, "analysis scores: %s\n", strings.Join(parts, ", "))
	}
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
