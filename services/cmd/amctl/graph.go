package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// stdin is where --input-file - reads (tests replace it).
var stdin io.Reader = os.Stdin

// maxInputFile bounds what amctl reads for one input.
const maxInputFile = 4 << 20

// graphFlags are submit's dependency, tag and input flags.
type graphFlags struct {
	dependsOn stringList
	tags      stringList
	policy    *string
	parent    *string
	inputFile *string
}

func (c *cli) graphFlags(fs *cmdFlags) *graphFlags {
	g := &graphFlags{}
	fs.Var(&g.dependsOn, "depends-on", "run after this task (an id; repeat, or comma-separate)")
	fs.Var(&g.tags, "tag", "a tag (repeat, or comma-separate)")
	g.policy = fs.String("dependency-policy", "", "require-success (default: a failed parent fails this task) or run-anyway")
	g.parent = fs.String("parent", "", "the task this one is a sub-task of")
	g.inputFile = fs.String("input-file", "", "read the input from this file (\"-\": standard input) instead of TEXT")
	return g
}

// input is the task's input: TEXT, or the --input-file.
func (g *graphFlags) input(pos []string) (string, error) {
	if *g.inputFile == "" {
		return strings.Join(pos, " "), nil
	}
	if len(pos) > 0 {
		return "", usagef("submit: give TEXT or --input-file, not both")
	}
	return readInput(*g.inputFile)
}

func readInput(name string) (string, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return "", usagef("--input-file: %v", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInputFile+1))
	if err != nil {
		return "", fmt.Errorf("read input: %w", err)
	}
	if len(b) > maxInputFile {
		return "", usagef("--input-file: larger than %d bytes", maxInputFile)
	}
	return string(b), nil
}

func parsePolicy(s string) (agentmeshv1.DependencyPolicy, error) {
	switch strings.ToLower(strings.ReplaceAll(s, "_", "-")) {
	case "":
		return agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_UNSPECIFIED, nil
	case "require-success":
		return agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_REQUIRE_SUCCESS, nil
	case "run-anyway":
		return agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_RUN_ANYWAY, nil
	}
	return 0, fmt.Errorf("unknown policy %q (want require-success or run-anyway)", s)
}

// apply puts the flags into the request.
func (g *graphFlags) apply(req *agentmeshv1.SubmitTaskRequest) error {
	p, err := parsePolicy(*g.policy)
	if err != nil {
		return usagef("--dependency-policy: %v", err)
	}
	req.DependsOn, req.Tags, req.DependencyPolicy, req.ParentTaskId = taskRefs(g.dependsOn), g.tags, p, taskstate.NormalizeTaskID(*g.parent)
	return nil
}

// listFlags are list's tag, priority and parent filters.
type listFlags struct {
	tag, parent *string
	prios       stringList
}

func (c *cli) listFlags(fs *cmdFlags) *listFlags {
	l := &listFlags{}
	l.tag = fs.String("tag", "", "only tasks with this tag")
	l.parent = fs.String("parent", "", "only sub-tasks of this task")
	fs.Var(&l.prios, "priority", "only tasks of this priority (repeat, or comma-separate)")
	return l
}

func (l *listFlags) apply(req *agentmeshv1.ListTasksRequest) error {
	req.Tag, req.ParentTaskId = *l.tag, taskstate.NormalizeTaskID(*l.parent)
	for _, p := range l.prios {
		v, err := parsePriority(p)
		if err != nil {
			return usagef("--priority: %v", err)
		}
		req.Priorities = append(req.Priorities, v)
	}
	return nil
}

// statusLine is a task's status as list prints it: a blocked task says
// what it waits for.
func statusLine(t *agentmeshv1.Task) string {
	s := taskstate.Name(t.GetStatus())
	if t.GetStatus() != taskstate.Blocked {
		return s
	}
	if a := t.GetPendingApproval(); a != nil {
		return fmt.Sprintf("%s (approval %s: amctl approvals approve|reject %s)", s, a.GetTool(), a.GetId())
	}
	if taskstate.ProposalPending(t) {
		return fmt.Sprintf("%s (proposed agent %s: amctl proposals show %s)", s, t.GetPendingProposal().GetAgent().GetName(), t.GetPendingProposal().GetId())
	}
	if w := t.GetWaitingOn(); len(w) > 0 {
		const show = 3
		if len(w) > show {
			return fmt.Sprintf("%s (waits for %s and %d more)", s, strings.Join(w[:show], ", "), len(w)-show)
		}
		return fmt.Sprintf("%s (waits for %s)", s, strings.Join(w, ", "))
	}
	return s
}

func (c *cli) update(ctx context.Context, args []string) error {
	fs := c.flags("update", "ID [flags]",
		"Change a task: its title, priority, tags and metadata at any time (priority only while it waits);\n"+
			"its dependencies only before it starts. Only the flags given change.")
	title := fs.String("title", "", "the new title")
	prio := fs.String("priority", "", "the new priority: backlog, low, normal, high or critical")
	var tags, deps stringList
	fs.Var(&tags, "tag", "the new tags, replacing the old (repeat, or comma-separate)")
	noTags := fs.Bool("no-tags", false, "remove every tag")
	meta := metaFlag{}
	fs.Var(meta, "meta", "the new metadata key=value, replacing the old (repeat)")
	fs.Var(&deps, "depends-on", "the new dependencies, replacing the old (repeat, or comma-separate)")
	noDeps := fs.Bool("no-deps", false, "remove every dependency")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("update", pos, "ID"); err != nil {
		return err
	}
	req := &agentmeshv1.UpdateTaskRequest{Id: pos[0], Task: &agentmeshv1.Task{}, UpdateMask: &fieldmaskpb.FieldMask{}}
	var mask []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "title":
			mask = append(mask, taskstate.FieldTitle)
		case "priority":
			mask = append(mask, taskstate.FieldPriority)
		case "tag", "no-tags":
			mask = append(mask, taskstate.FieldTags)
		case "meta":
			mask = append(mask, taskstate.FieldMetadata)
		case "depends-on", "no-deps":
			mask = append(mask, taskstate.FieldDependsOn)
		}
	})
	switch {
	case len(mask) == 0:
		return usagef("update: give at least one of --title, --priority, --tag, --no-tags, --meta, --depends-on, --no-deps")
	case *noTags && len(tags) > 0:
		return usagef("update: give --tag or --no-tags, not both")
	case *noDeps && len(deps) > 0:
		return usagef("update: give --depends-on or --no-deps, not both")
	}
	req.Task.Title, req.Task.Tags, req.Task.Metadata, req.Task.DependsOn = *title, tags, meta, deps
	if req.Task.Priority, err = parsePriority(*prio); err != nil {
		return usagef("--priority: %v", err)
	}
	req.UpdateMask.Paths = dedup(mask)
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.graph.UpdateTask(cctx, req)
	if err != nil {
		return taskErr(pos[0], err)
	}
	if c.json() {
		return c.printJSON(resp.GetTask(), true)
	}
	fmt.Fprintf(c.stdout, "task %s updated (%s); now %s\n", pos[0], strings.Join(req.UpdateMask.Paths, ", "), statusLine(resp.GetTask()))
	return nil
}

func dedup(s []string) []string {
	var out []string
	for _, v := range s {
		found := false
		for _, o := range out {
			found = found || o == v
		}
		if !found {
			out = append(out, v)
		}
	}
	return out
}

func (c *cli) deleteCmd(ctx context.Context, args []string) error {
	fs := c.flags("delete", "ID...", "Delete finished tasks and their history (for good).")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("delete: want at least one ID")
	}
	if err := c.connect(); err != nil {
		return err
	}
	for _, id := range pos {
		cctx, cancel := c.call(ctx)
		_, err := c.graph.DeleteTask(cctx, &agentmeshv1.DeleteTaskRequest{Id: id})
		cancel()
		if err != nil {
			return taskErr(id, err)
		}
		if !c.json() {
			fmt.Fprintf(c.stdout, "task %s deleted\n", id)
		}
	}
	return nil
}

func (c *cli) cancelTasks(ctx context.Context, args []string) error {
	fs := c.flags("cancel-tasks", "[--agent A] [--tag T] [--priority P] [--parent ID] [--since D] [--reason R]",
		"Cancel every unfinished task of your org that matches all the filters given (at least one).")
	agent := fs.String("agent", "", "tasks of this agent")
	tag := fs.String("tag", "", "tasks with this tag")
	parent := fs.String("parent", "", "sub-tasks of this task")
	var prios stringList
	fs.Var(&prios, "priority", "tasks of this priority (repeat, or comma-separate)")
	since := fs.String("since", "", "tasks created within this long (30m, 2h, 7d)")
	reason := fs.String("reason", "", "why (recorded on each task)")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("cancel-tasks", pos); err != nil {
		return err
	}
	req := &agentmeshv1.CancelTasksRequest{Agent: *agent, Tag: *tag, ParentTaskId: *parent, Reason: *reason}
	for _, p := range prios {
		v, err := parsePriority(p)
		if err != nil {
			return usagef("--priority: %v", err)
		}
		req.Priorities = append(req.Priorities, v)
	}
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
	resp, err := c.graph.CancelTasks(cctx, req)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	fmt.Fprintf(c.stdout, "%d task(s) cancelled\n", resp.GetCancelled())
	return nil
}

func (c *cli) submitGraph(ctx context.Context, args []string) error {
	fs := c.flags("submit-graph", "FILE",
		"Submit a graph of tasks at once (all or none). FILE (\"-\": standard input) is a SubmitTasksRequest\n"+
			"in JSON: {\"tasks\": [{\"ref\": \"a\", \"task\": {\"input\": \"...\"}},\n"+
			"                      {\"ref\": \"b\", \"task\": {\"input\": \"...\", \"dependsOn\": [\"ref:a\"]}}]}")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("submit-graph", pos, "FILE"); err != nil {
		return err
	}
	text, err := readInput(pos[0])
	if err != nil {
		return err
	}
	req := &agentmeshv1.SubmitTasksRequest{}
	if err := protojson.Unmarshal([]byte(text), req); err != nil {
		return usagef("submit-graph: %s is not a SubmitTasksRequest: %v", pos[0], err)
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.graph.SubmitTasks(cctx, req)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REF\tID\tSTATUS\tAGENT")
	for i, t := range resp.GetTasks() {
		ref := ""
		if i < len(req.GetTasks()) {
			ref = req.GetTasks()[i].GetRef()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ref, t.GetId(), statusLine(t), t.GetAgent())
	}
	return tw.Flush()
}

func (c *cli) metricsCmd(ctx context.Context, args []string) error {
	fs := c.flags("metrics", "[--since D] [--agent A]",
		"Show your org's task metrics over a window (default the last hour): completion and failure rates,\n"+
			"throughput, queue wait and run time percentiles, and the queues as they stand now.")
	since := fs.String("since", "1h", "the window: this long up to now (30m, 2h, 7d)")
	agent := fs.String("agent", "", "only this agent")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("metrics", pos); err != nil {
		return err
	}
	d, err := parseSince(*since)
	if err != nil {
		return usagef("--since: %v", err)
	}
	now := time.Now()
	req := &agentmeshv1.GetMetricsRequest{Start: timestamppb.New(now.Add(-d)), End: timestamppb.New(now), Agent: *agent}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.metrics.GetMetrics(cctx, req)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	fmt.Fprintf(c.stdout, "org %s, %s to %s\n\n", resp.GetOrg(), when(resp.GetStart()), when(resp.GetEnd()))
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tDONE\tFAILED\tCANCELLED\tOK%\tPER MIN\tWAIT p50/p90/p99\tRUN p50/p90/p99\tQUEUED\tRUNNING\tBLOCKED\tUTIL")
	row := func(name string, m *agentmeshv1.TaskMetrics) {
		util := "-"
		if m.GetUtilization() > 0 {
			util = fmt.Sprintf("%.0f%%", 100*m.GetUtilization())
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%.2f\t%s\t%s\t%d\t%d\t%d\t%s\n", name,
			m.GetCompleted(), m.GetFailed(), m.GetCancelled(), 100*m.GetCompletionRate(), m.GetThroughputPerMinute(),
			pcts(m.GetQueueWait()), pcts(m.GetRunTime()), m.GetQueued(), m.GetRunning(), m.GetBlocked(), util)
	}
	row("(all)", resp.GetOverall())
	for _, a := range resp.GetAgents() {
		row(a.GetAgent(), a.GetMetrics())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if q := resp.GetOverall().GetQueueDepth(); len(q) > 0 {
		var parts []string
		for _, d := range q {
			parts = append(parts, fmt.Sprintf("%s %d", priorityName(d.GetPriority()), d.GetQueued()))
		}
		fmt.Fprintf(c.stdout, "\nqueued by priority: %s; backlog %d\n", strings.Join(parts, ", "), resp.GetOverall().GetBacklog())
	}
	if d := resp.GetDelegations(); len(d) > 0 {
		fmt.Fprintln(c.stdout, "\ndelegations (sub-tasks by parent agent → child agent):")
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PARENT\tCHILD\tSUBMITTED\tDONE\tFAILED\tCANCELLED\tOK%")
		for _, m := range d {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%.0f\n", m.GetParentAgent(), m.GetChildAgent(),
				m.GetSubmitted(), m.GetCompleted(), m.GetFailed(), m.GetCancelled(), 100*m.GetSuccessRate())
		}
		return tw.Flush()
	}
	return nil
}

func pcts(p *agentmeshv1.DurationPercentiles) string {
	if p.GetCount() == 0 {
		return "-"
	}
	f := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("%s/%s/%s", f(p.GetP50().AsDuration()), f(p.GetP90().AsDuration()), f(p.GetP99().AsDuration()))
}

// graphRows adds the dependency, tag and timing fields to printTask.
func graphRows(row func(k, v string), t *agentmeshv1.Task) {
	if t.GetStatus() == taskstate.Blocked {
		row("waits for", strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(statusLine(t), "blocked"), ")"), " ("))
	}
	row("depends on", strings.Join(t.GetDependsOn(), ", "))
	if p := t.GetDependencyPolicy(); p == agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_RUN_ANYWAY {
		row("dependency policy", "run anyway")
	}
	row("tags", strings.Join(t.GetTags(), ", "))
	row("parent task", t.GetParentTaskId())
	row("continues", t.GetContinueFrom())
	row("created by", t.GetCreatedBy())
	if d := t.GetQueueWait(); d != nil {
		row("queue wait", d.AsDuration().Round(time.Millisecond).String())
	}
	if d := t.GetRunTime(); d != nil {
		row("run time", d.AsDuration().Round(time.Millisecond).String())
	}
}
