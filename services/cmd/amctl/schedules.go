package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/schedule"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func (c *cli) schedulesCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "schedules", `Usage: amctl schedules COMMAND [flags]

Tasks that start themselves: a task template (agent or skills, input,
priority, budget, tags) run at the slots of a cron expression in a time
zone. Each slot runs once, as a task tagged schedule:ID.

Commands:
  create --cron EXPR [flags] TEXT   make a schedule whose runs have input TEXT
  list                              list your org's schedules
  get ID                            show a schedule, its last and next runs
  update ID [flags] [TEXT]          change what the flags name
  pause ID [--reason R]             stop firing (missed slots are not caught up)
  resume ID                         fire again from now
  delete ID                         remove it (its runs stay)
  trigger ID                        run it now
  runs ID                           list its runs (tasks), newest first

Cron: five fields (minute hour day-of-month month day-of-week) or @yearly,
@monthly, @weekly, @daily, @hourly, @every 15m.

Run 'amctl schedules COMMAND -h' for a command's flags.
`, args,
		subcommand{"create", c.scheduleCreate},
		subcommand{"list", c.scheduleList},
		subcommand{"get", c.scheduleGet},
		subcommand{"update", c.scheduleUpdate},
		subcommand{"pause", c.schedulePause},
		subcommand{"resume", c.scheduleResume},
		subcommand{"delete", c.scheduleDelete},
		subcommand{"trigger", c.scheduleTrigger},
		subcommand{"runs", c.scheduleRuns},
	)
}

func (c *cli) schedules() agentmeshv1.ScheduleServiceClient {
	return agentmeshv1.NewScheduleServiceClient(c.conn)
}

// scheduleSpecFlags are the flags of a schedule's spec and template.
type scheduleSpecFlags struct {
	fs                                        *flag.FlagSet
	name, description, cron, tz, agent, title *string
	prio, overlap, catchup, start, end        *string
	jitter, window                            *time.Duration
	skills, tags                              stringList
	meta                                      metaFlag
	task                                      *scheduleFlags
}

func addScheduleSpecFlags(fs *flag.FlagSet) *scheduleSpecFlags {
	f := &scheduleSpecFlags{fs: fs, meta: metaFlag{}}
	f.name = fs.String("name", "", "a name")
	f.description = fs.String("description", "", "a description")
	f.cron = fs.String("cron", "", "the cron expression: 5 fields or @daily, @every 1h, ...")
	f.tz = fs.String("tz", "", "the IANA time zone of the expression (default UTC), e.g. Europe/Paris")
	f.jitter = fs.Duration("jitter", 0, "delay each run by up to this much (at most 1h)")
	f.overlap = fs.String("overlap", "", "while a run has not finished: skip (default), allow, cancel_previous or enqueue")
	f.catchup = fs.String("catchup", "", "slots missed while no scheduler ran: none (default), last or all")
	f.window = fs.Duration("catchup-window", 0, "how far back last and all catch up (default 1h)")
	f.start = fs.String("start", "", "no run before this RFC 3339 time")
	f.end = fs.String("end", "", "no run at or after this RFC 3339 time")
	f.agent = fs.String("agent", "", "run on this agent")
	fs.Var(&f.skills, "skill", "a required skill (repeat, or comma-separate)")
	f.title = fs.String("title", "", "the runs' title")
	f.prio = fs.String("priority", "", "backlog, low, normal (default), high or critical")
	fs.Var(&f.tags, "tag", "a tag of every run (repeat, or comma-separate)")
	fs.Var(f.meta, "meta", "metadata key=value of every run (repeat)")
	f.task = addScheduleFlags(fs)
	return f
}

// set reports which flags were given.
func (f *scheduleSpecFlags) set() map[string]bool {
	out := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { out[fl.Name] = true })
	return out
}

func enumFlag[E ~int32](name, v string, values map[string]int32, prefix string) (E, error) {
	key := prefix + strings.ToUpper(strings.ReplaceAll(v, "-", "_"))
	n, ok := values[key]
	if !ok {
		return 0, usagef("--%s: unknown value %q", name, v)
	}
	return E(n), nil
}

func parseTime(name, v string) (*timestamppb.Timestamp, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, usagef("--%s: %q is not an RFC 3339 time (2026-06-01T00:00:00Z)", name, v)
	}
	return timestamppb.New(t), nil
}

// apply writes the given flags (all of them when create) and TEXT onto
// the spec and template.
func (f *scheduleSpecFlags) apply(sp *agentmeshv1.ScheduleSpec, tpl *agentmeshv1.TaskTemplate, text string) error {
	set := f.set()
	var err error
	for _, s := range []struct {
		flag string
		dst  *string
		v    string
	}{{"cron", &sp.Cron, *f.cron}, {"tz", &sp.TimeZone, *f.tz}, {"agent", &tpl.Agent, *f.agent}, {"title", &tpl.Title, *f.title}} {
		if set[s.flag] {
			*s.dst = s.v
		}
	}
	if set["jitter"] {
		sp.Jitter = durationpb.New(*f.jitter)
	}
	if set["catchup-window"] {
		sp.CatchupWindow = durationpb.New(*f.window)
	}
	if set["overlap"] {
		if sp.Overlap, err = enumFlag[agentmeshv1.OverlapPolicy]("overlap", *f.overlap, agentmeshv1.OverlapPolicy_value, "OVERLAP_POLICY_"); err != nil {
			return err
		}
	}
	if set["catchup"] {
		if sp.Catchup, err = enumFlag[agentmeshv1.CatchupPolicy]("catchup", *f.catchup, agentmeshv1.CatchupPolicy_value, "CATCHUP_POLICY_"); err != nil {
			return err
		}
	}
	if set["start"] {
		if sp.StartAt, err = parseTime("start", *f.start); err != nil {
			return err
		}
	}
	if set["end"] {
		if sp.EndAt, err = parseTime("end", *f.end); err != nil {
			return err
		}
	}
	if set["priority"] {
		if tpl.Priority, err = parsePriority(*f.prio); err != nil {
			return usagef("--priority: %v", err)
		}
	}
	if set["skill"] {
		tpl.RequiredSkills, tpl.Agent = f.skills, ""
	} else if set["agent"] {
		tpl.RequiredSkills = nil
	}
	if set["tag"] {
		tpl.Tags = f.tags
	}
	if set["meta"] {
		tpl.Metadata = f.meta
	}
	if text != "" {
		tpl.Input = text
	}
	// The task flags (budgets, retries, queue timeout), as submit reads
	// them.
	req := &agentmeshv1.SubmitTaskRequest{Budget: tpl.Budget, RetryPolicy: tpl.RetryPolicy, QueueTimeout: tpl.QueueTimeout}
	if err := f.task.apply(req); err != nil {
		return err
	}
	tpl.Budget, tpl.RetryPolicy, tpl.QueueTimeout = req.Budget, req.RetryPolicy, req.QueueTimeout
	return nil
}

func (c *cli) scheduleCreate(ctx context.Context, args []string) error {
	fs := c.flags("schedules create", "--cron EXPR [--tz ZONE] [--agent A | --skill S] [flags] TEXT",
		"Create a schedule: each slot of --cron (in --tz) runs a task with input TEXT.")
	f := addScheduleSpecFlags(fs.FlagSet)
	paused := fs.Bool("paused", false, "create it paused")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	text := strings.TrimSpace(strings.Join(pos, " "))
	switch {
	case *f.cron == "":
		return usagef("schedules create: --cron is required")
	case text == "":
		return usagef("schedules create: TEXT (the runs' input) is required")
	}
	req := &agentmeshv1.CreateScheduleRequest{Name: *f.name, Description: *f.description, Paused: *paused,
		Spec: &agentmeshv1.ScheduleSpec{}, Template: &agentmeshv1.TaskTemplate{}}
	if err := f.apply(req.Spec, req.Template, text); err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.schedules().CreateSchedule(cctx, req)
	if err != nil {
		return err
	}
	return c.showSchedule(resp.Schedule)
}

func (c *cli) scheduleUpdate(ctx context.Context, args []string) error {
	fs := c.flags("schedules update", "ID [flags] [TEXT]", "Change a schedule: what the flags name (and the input, when TEXT is given).")
	f := addScheduleSpecFlags(fs.FlagSet)
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("schedules update: want ID [TEXT]")
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	cur, err := c.schedules().GetSchedule(cctx, &agentmeshv1.GetScheduleRequest{Id: pos[0]})
	if err != nil {
		return err
	}
	sc := cur.Schedule
	set := f.set()
	if set["name"] {
		sc.Name = *f.name
	}
	if set["description"] {
		sc.Description = *f.description
	}
	if err := f.apply(sc.Spec, sc.Template, strings.TrimSpace(strings.Join(pos[1:], " "))); err != nil {
		return err
	}
	resp, err := c.schedules().UpdateSchedule(cctx, &agentmeshv1.UpdateScheduleRequest{Id: sc.Id, Name: sc.Name, Description: sc.Description,
		Spec: sc.Spec, Template: sc.Template, ExpectedVersion: sc.Version})
	if err != nil {
		return err
	}
	return c.showSchedule(resp.Schedule)
}

func (c *cli) showSchedule(sc *agentmeshv1.Schedule) error {
	if c.json() {
		return c.printJSON(sc, true)
	}
	printSchedule(c.stdout, sc)
	return nil
}

func printSchedule(w io.Writer, sc *agentmeshv1.Schedule) {
	sp, tpl := sc.GetSpec(), sc.GetTemplate()
	fmt.Fprintf(w, "schedule %s", sc.Id)
	if sc.Name != "" {
		fmt.Fprintf(w, " (%s)", sc.Name)
	}
	tz := sp.GetTimeZone()
	if tz == "" {
		tz = "UTC"
	}
	fmt.Fprintf(w, "\n  cron:      %s in %s", sp.GetCron(), tz)
	if j := sp.GetJitter(); j != nil && j.AsDuration() > 0 {
		fmt.Fprintf(w, ", jitter %s", j.AsDuration())
	}
	fmt.Fprintf(w, "\n  policies:  overlap %s, catch-up %s\n", policyName(sp.GetOverlap().String(), "OVERLAP_POLICY_", "skip"),
		policyName(sp.GetCatchup().String(), "CATCHUP_POLICY_", "none"))
	target := tpl.GetAgent()
	if len(tpl.GetRequiredSkills()) > 0 {
		target = "skills " + strings.Join(tpl.GetRequiredSkills(), ",")
	}
	if target == "" {
		target = "(the default agent)"
	}
	fmt.Fprintf(w, "  runs:      %s, input %q\n", target, clip(tpl.GetInput(), 60))
	state := "active"
	if sc.Paused {
		state = "paused"
		if sc.PauseReason != "" {
			state += ": " + sc.PauseReason
		}
	}
	fmt.Fprintf(w, "  state:     %s; %d runs, %d skipped, %d failed, %d missed\n", state, sc.Runs, sc.Skipped, sc.Failed, sc.Missed)
	if r := sc.LastRun; r != nil {
		fmt.Fprintf(w, "  last run:  %s %s", when(r.Slot), strings.ToLower(strings.TrimPrefix(r.Outcome.String(), "SCHEDULE_RUN_OUTCOME_")))
		if r.TaskId != "" {
			fmt.Fprintf(w, " task %s", r.TaskId)
		}
		if r.Reason != "" {
			fmt.Fprintf(w, " (%s)", clip(r.Reason, 100))
		}
		fmt.Fprintln(w)
	}
	next := "none"
	if sc.NextRunAt != nil {
		next = when(sc.NextRunAt)
	}
	fmt.Fprintf(w, "  next run:  %s\n  created:   %s by %s (%s)\n", next, when(sc.CreatedAt), sc.CreatedBy, sc.CreatorRole)
}

func policyName(s, prefix, unspecified string) string {
	s = strings.ToLower(strings.TrimPrefix(s, prefix))
	if s == "unspecified" {
		return unspecified
	}
	return s
}

func (c *cli) scheduleList(ctx context.Context, args []string) error {
	fs := c.flags("schedules list", "", "List your org's schedules.")
	token := fs.String("page-token", "", "continue from a previous listing")
	if _, err := c.parseConnect(fs, args, "schedules list"); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.schedules().ListSchedules(cctx, &agentmeshv1.ListSchedulesRequest{PageToken: *token})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCRON\tZONE\tSTATE\tRUNS\tLAST\tNEXT")
	for _, sc := range resp.Schedules {
		state, last := "active", "-"
		if sc.Paused {
			state = "paused"
		}
		if r := sc.LastRun; r != nil {
			last = strings.ToLower(strings.TrimPrefix(r.Outcome.String(), "SCHEDULE_RUN_OUTCOME_")) + " " + when(r.Slot)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", sc.Id, sc.Name, sc.Spec.GetCron(), sc.Spec.GetTimeZone(), state, sc.Runs, last, when(sc.NextRunAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.NextPageToken != "" {
		fmt.Fprintf(c.stdout, "more: --page-token %s\n", resp.NextPageToken)
	}
	return nil
}

// scheduleOne runs a command on one schedule and shows the schedule it
// answers.
func (c *cli) scheduleOne(ctx context.Context, args []string, cmd, about string, call func(context.Context, string) (*agentmeshv1.Schedule, error)) error {
	fs := c.flags("schedules "+cmd, "ID", about)
	pos, err := c.parseConnect(fs, args, "schedules "+cmd, "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	sc, err := call(cctx, pos[0])
	if err != nil {
		return err
	}
	return c.showSchedule(sc)
}

func (c *cli) scheduleGet(ctx context.Context, args []string) error {
	return c.scheduleOne(ctx, args, "get", "Show a schedule, its last and next runs.", func(ctx context.Context, id string) (*agentmeshv1.Schedule, error) {
		r, err := c.schedules().GetSchedule(ctx, &agentmeshv1.GetScheduleRequest{Id: id})
		return r.GetSchedule(), err
	})
}

func (c *cli) schedulePause(ctx context.Context, args []string) error {
	fs := c.flags("schedules pause", "ID [--reason R]", "Pause a schedule: no slot fires, and none is caught up after resume.")
	reason := fs.String("reason", "", "why (shown with the schedule)")
	pos, err := c.parseConnect(fs, args, "schedules pause", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	r, err := c.schedules().PauseSchedule(cctx, &agentmeshv1.PauseScheduleRequest{Id: pos[0], Reason: *reason})
	if err != nil {
		return err
	}
	return c.showSchedule(r.Schedule)
}

func (c *cli) scheduleResume(ctx context.Context, args []string) error {
	return c.scheduleOne(ctx, args, "resume", "Resume a schedule from now.", func(ctx context.Context, id string) (*agentmeshv1.Schedule, error) {
		r, err := c.schedules().ResumeSchedule(ctx, &agentmeshv1.ResumeScheduleRequest{Id: id})
		return r.GetSchedule(), err
	})
}

func (c *cli) scheduleDelete(ctx context.Context, args []string) error {
	fs := c.flags("schedules delete", "ID", "Delete a schedule. Its runs (tasks) stay.")
	pos, err := c.parseConnect(fs, args, "schedules delete", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	if _, err := c.schedules().DeleteSchedule(cctx, &agentmeshv1.DeleteScheduleRequest{Id: pos[0]}); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "schedule %s deleted\n", pos[0])
	return nil
}

func (c *cli) scheduleTrigger(ctx context.Context, args []string) error {
	fs := c.flags("schedules trigger", "ID", "Run a schedule now (under its overlap policy); the cron slots do not move.")
	pos, err := c.parseConnect(fs, args, "schedules trigger", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	r, err := c.schedules().TriggerSchedule(cctx, &agentmeshv1.TriggerScheduleRequest{Id: pos[0]})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(r, true)
	}
	out := strings.ToLower(strings.TrimPrefix(r.Run.GetOutcome().String(), "SCHEDULE_RUN_OUTCOME_"))
	switch {
	case r.Task != nil:
		fmt.Fprintf(c.stdout, "%s: task %s\n", out, r.Task.Id)
	default:
		fmt.Fprintf(c.stdout, "%s: %s\n", out, r.Run.GetReason())
	}
	return nil
}

func (c *cli) scheduleRuns(ctx context.Context, args []string) error {
	fs := c.flags("schedules runs", "ID", "List a schedule's runs: the tasks tagged schedule:ID, newest first.")
	limit := fs.Int("limit", 20, "at most this many")
	pos, err := c.parseConnect(fs, args, "schedules runs", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.tasks.ListTasks(cctx, &agentmeshv1.ListTasksRequest{Tag: schedule.Tag(pos[0]), PageSize: int32(*limit)})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATUS\tAGENT\tCREATED\tKEY")
	for _, t := range resp.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Id, strings.ToLower(strings.TrimPrefix(t.Status.String(), "TASK_STATUS_")), t.Agent, when(t.CreatedAt), t.IdempotencyKey)
	}
	return tw.Flush()
}
