package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// submit is long on purpose: its flags, then the request built from them, read top-down.
func (c *cli) submit(ctx context.Context, args []string) error {
	fs := c.flags("submit", "[--agent A | --skill S ...] [flags] TEXT",
		"Submit a task. TEXT is the task's input (several words are joined with spaces).\n"+
			"With neither --agent nor --skill, the server's default agent runs it.\n"+
			"With --wait, follow the task and print each step as it happens, then the final answer;\n"+
			"exit 1 if it failed or was cancelled.")
	agent := fs.String("agent", "", "run on this agent")
	var skills stringList
	fs.Var(&skills, "skill", "a required skill (repeat, or comma-separate)")
	title := fs.String("title", "", "a short title")
	prio := fs.String("priority", "", "backlog, low, normal (default), high or critical")
	meta := metaFlag{}
	fs.Var(meta, "meta", "metadata key=value (repeat)")
	idem := fs.String("idempotency-key", "", "a retried submit with the same key returns the first task")
	cont := fs.String("continue", "", "continue the conversation of this finished task (ID or subtask://ID): its agent, unless --agent or --skill")
	wait := fs.Bool("wait", false, "follow the task until it ends and print its answer")
	fs.BoolVar(&c.tokens, "tokens", false, "with --wait, print the model's output as it streams")
	g := c.graphFlags(fs)
	sched := addScheduleFlags(fs.FlagSet)
	thread := addThreadFlags(fs.FlagSet) // memory.go
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	text, err := g.input(pos)
	if err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(text) == "":
		return usagef("submit: TEXT is required")
	case *agent != "" && len(skills) > 0:
		return usagef("submit: give --agent or --skill, not both")
	}
	p, err := parsePriority(*prio)
	if err != nil {
		return usagef("--priority: %v", err)
	}
	// A submit that is retried (UNAVAILABLE: its reply may have been lost
	// after the commit) must not create a second task: without a key of
	// the user's, amctl makes one for this submit.
	key, autoKey := *idem, false
	if key == "" {
		key, autoKey = newIdempotencyKey(), true
	}
	req := &agentmeshv1.SubmitTaskRequest{
		Title: *title, Input: text, Agent: *agent, RequiredSkills: skills,
		Priority: p, Metadata: meta, IdempotencyKey: key,
		ContinueFrom: taskstate.NormalizeTaskID(*cont),
	}
	if err := sched.apply(req); err != nil {
		return err
	}
	if err := thread.apply(req); err != nil {
		return err
	}
	if err := g.apply(req); err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	resp, err := c.tasks.SubmitTask(cctx, req)
	cancel()
	if err != nil {
		return err
	}
	task := resp.GetTask()
	if c.json() {
		if err := c.printJSON(resp, !*wait); err != nil {
			return err
		}
	} else {
		verb := "submitted"
		if !resp.GetCreated() && !autoKey {
			verb = "already submitted (same idempotency key)"
		}
		if p := task.GetPendingProposal(); p != nil && taskstate.ProposalPending(task) {
			// No agent fits: the task waits for a person to decide on the
			// agent the registry drafted.
			fmt.Fprintf(c.stdout, "task %s %s; no agent fits, so agent %s is proposed and the task waits for a person: amctl proposals show %s\n",
				task.GetId(), verb, p.GetAgent().GetName(), p.GetId())
		} else {
			fmt.Fprintf(c.stdout, "task %s %s to agent %s\n", task.GetId(), verb, task.GetAgent())
		}
	}
	if !*wait {
		return nil
	}
	end, err := c.follow(ctx, task.GetId(), 0)
	if err != nil {
		return err
	}
	return c.finish(task.GetId(), end, true)
}

func (c *cli) get(ctx context.Context, args []string) error {
	t, err := c.oneTask(ctx, "get", "Show a task.", args)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(t, true)
	}
	printTask(c.stdout, t)
	return nil
}

// oneTask parses a command that takes one task ID and no flags, and reads
// that task.
func (c *cli) oneTask(ctx context.Context, cmd, help string, args []string) (*agentmeshv1.Task, error) {
	fs := c.flags(cmd, "ID", help)
	pos, err := c.parse(fs, args)
	if err != nil {
		return nil, err
	}
	if err := exactly(cmd, pos, "ID"); err != nil {
		return nil, err
	}
	if err := c.connect(); err != nil {
		return nil, err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.tasks.GetTask(cctx, &agentmeshv1.GetTaskRequest{Id: pos[0]})
	if err != nil {
		return nil, taskErr(pos[0], err)
	}
	return resp.GetTask(), nil
}

func (c *cli) list(ctx context.Context, args []string) error {
	fs := c.flags("list", "[flags]", "List tasks, newest first.")
	var statuses stringList
	fs.Var(&statuses, "status", "only tasks in this status (repeat, or comma-separate)")
	agent := fs.String("agent", "", "only tasks of this agent")
	since := fs.String("since", "", "only tasks created within this long (30m, 2h, 7d)")
	limit := fs.Int("limit", 0, "at most this many tasks (server default 50, at most 1000)")
	token := fs.String("page-token", "", "continue from a previous listing")
	lf := c.listFlags(fs)
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("list", pos); err != nil {
		return err
	}
	req := &agentmeshv1.ListTasksRequest{Agent: *agent, PageToken: *token}
	if err := lf.apply(req); err != nil {
		return err
	}
	if req.Statuses, err = parseStatuses(statuses); err != nil {
		return usagef("--status: %v", err)
	}
	if *since != "" {
		d, err := parseSince(*since)
		if err != nil {
			return usagef("--since: %v", err)
		}
		req.CreatedAfter = timestamppb.New(time.Now().Add(-d))
	}
	if *limit < 0 || *limit > 1000 {
		return usagef("--limit: must be between 0 and 1000")
	}
	req.PageSize = int32(*limit)
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.tasks.ListTasks(cctx, req)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	if len(resp.GetTasks()) == 0 {
		fmt.Fprintln(c.stdout, "no tasks")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tAGENT\tPRIORITY\tCREATED\tTITLE")
	for _, t := range resp.GetTasks() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.GetId(), statusLine(t), t.GetAgent(),
			priorityName(t.GetPriority()), ago(t.GetCreatedAt()), clip(titleOf(t), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if tok := resp.GetNextPageToken(); tok != "" {
		fmt.Fprintf(c.stdout, "\nmore: amctl list --page-token %s\n", tok)
	}
	return nil
}

func (c *cli) cancel(ctx context.Context, args []string) error {
	fs := c.flags("cancel", "ID [--reason R]", "Cancel a task that has not finished.")
	reason := fs.String("reason", "", "why (recorded on the task)")
	pos, err := c.parseConnect(fs, args, "cancel", "ID")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.tasks.CancelTask(cctx, &agentmeshv1.CancelTaskRequest{Id: pos[0], Reason: *reason})
	if err != nil {
		return taskErr(pos[0], err)
	}
	if c.json() {
		return c.printJSON(resp.GetTask(), true)
	}
	fmt.Fprintf(c.stdout, "task %s cancelled\n", resp.GetTask().GetId())
	return nil
}

func (c *cli) watch(ctx context.Context, args []string) error {
	fs := c.flags("watch", "ID [--after SEQ]",
		"Follow a task's events until it ends (reconnecting if the stream breaks);\n"+
			"exit 1 if it failed or was cancelled. With -o json, one event per line.")
	after := fs.Int64("after", 0, "start after this event seq")
	fs.BoolVar(&c.tokens, "tokens", false, "print the model's output as it streams (live only: not replayed on reconnect)")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("watch", pos, "ID"); err != nil {
		return err
	}
	if *after < 0 {
		return usagef("--after: must not be negative")
	}
	if err := c.connect(); err != nil {
		return err
	}
	end, err := c.follow(ctx, pos[0], *after)
	if err != nil {
		return taskErr(pos[0], err)
	}
	return c.finish(pos[0], end, false)
}

func (c *cli) history(ctx context.Context, args []string) error {
	fs := c.flags("history", "ID [--after SEQ]", "Show a task's recorded events in order.")
	after := fs.Int64("after", 0, "only events after this seq")
	pos, err := c.parseConnect(fs, args, "history", "ID")
	if err != nil {
		return err
	}
	all := &agentmeshv1.GetTaskHistoryResponse{}
	cursor := *after
	for {
		cctx, cancel := c.call(ctx)
		resp, err := c.tasks.GetTaskHistory(cctx, &agentmeshv1.GetTaskHistoryRequest{Id: pos[0], AfterSeq: cursor, Limit: 1000})
		cancel()
		if err != nil {
			return taskErr(pos[0], err)
		}
		all.Events = append(all.Events, resp.GetEvents()...)
		if len(resp.GetEvents()) < 1000 {
			break
		}
		cursor = resp.GetEvents()[len(resp.GetEvents())-1].GetSeq()
	}
	if c.json() {
		return c.printJSON(all, true)
	}
	for _, ev := range all.GetEvents() {
		printEvent(c.stdout, ev)
	}
	return nil
}

// taskErr words NotFound for a task id the way a person expects.
func taskErr(id string, err error) error {
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("task %s not found", id)
	}
	return err
}

// ending is how a followed task ended.
type ending struct {
	status agentmeshv1.TaskStatus
	result string
	reason string
}

// Reconnection of a broken watch.
const (
	maxWatchRetries = 8
	firstBackoff    = 200 * time.Millisecond
	maxBackoff      = 5 * time.Second
)

// follow streams the task's events after `after`, printing each, and
// reconnects with the last seq seen when the stream breaks, so nothing is
// printed twice or missed. It returns how the task ended.
func (c *cli) follow(ctx context.Context, id string, after int64) (ending, error) {
	if c.timeoutSet && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	last := after
	failures := 0
	first := true
	backoff := firstBackoff
	for {
		err := c.watchOnce(ctx, id, &last, &failures)
		var end *ending
		if errors.As(err, &end) {
			return *end, nil
		}
		if errors.Is(err, io.EOF) {
			// The server ended the stream without a terminal event for us
			// (the cursor was already at the end): ask how the task ended.
			return c.ended(ctx, id)
		}
		if ctx.Err() != nil || !retryable(err) {
			return ending{}, err
		}
		if first && isConnError(status.Convert(err).Message()) {
			return ending{}, err // never connected: nothing to resume
		}
		first = false
		if failures++; failures > maxWatchRetries {
			return ending{}, err
		}
		fmt.Fprintf(c.stderr, "amctl: watch interrupted (%s); reconnecting after seq %d\n", c.describe(err), last)
		select {
		case <-ctx.Done():
			return ending{}, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (e *ending) Error() string { return "task ended" }

// watchOnce runs one WatchTask stream; it returns an *ending when the task
// ended, io.EOF when the stream ended without one, else the error.
func (c *cli) watchOnce(ctx context.Context, id string, last *int64, failures *int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: id, AfterSeq: *last})
	if err != nil {
		return err
	}
	for {
		r, err := stream.Recv()
		if err != nil {
			return err
		}
		ev := r.GetEvent()
		if ev.GetType() == agentmeshv1.EventType_EVENT_TYPE_TOKEN {
			// Streamed model output: seq 0, live only, never the cursor.
			if err := c.printToken(r); err != nil {
				return err
			}
			continue
		}
		if ev.GetSeq() <= *last {
			continue // already shown
		}
		c.endTokens()
		if c.json() {
			if err := c.printJSON(r, false); err != nil {
				return err
			}
		} else {
			printEvent(c.stdout, ev)
		}
		*last = ev.GetSeq()
		*failures = 0
		if ev.GetType() != agentmeshv1.EventType_EVENT_TYPE_STEP && taskstate.Terminal(r.GetStatus()) {
			return &ending{status: r.GetStatus(), result: ev.GetResult(), reason: ev.GetReason()}
		}
	}
}

// printToken prints a piece of streamed model output when --tokens asked
// for it: as is (or one JSON line per event with -o json).
func (c *cli) printToken(r *agentmeshv1.WatchTaskResponse) error {
	if !c.tokens {
		return nil
	}
	if c.json() {
		return c.printJSON(r, false)
	}
	tok := r.GetEvent().GetToken()
	if tok == "" {
		return nil
	}
	_, err := io.WriteString(c.stdout, tok)
	c.midLine = !strings.HasSuffix(tok, "\n")
	return err
}

// endTokens ends a line of streamed text before the next event.
func (c *cli) endTokens() {
	if c.midLine {
		fmt.Fprintln(c.stdout)
		c.midLine = false
	}
}

// retryable reports whether a broken watch is worth reopening.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted:
		return true
	}
	return false
}

// ended reads how a finished task ended.
func (c *cli) ended(ctx context.Context, id string) (ending, error) {
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.tasks.GetTask(cctx, &agentmeshv1.GetTaskRequest{Id: id})
	if err != nil {
		return ending{}, err
	}
	t := resp.GetTask()
	return ending{status: t.GetStatus(), result: t.GetResult(), reason: t.GetError()}, nil
}

// finish prints the answer of a completed task (when answer is set) or
// returns the error of one that failed or was cancelled.
func (c *cli) finish(id string, end ending, answer bool) error {
	switch end.status {
	case taskstate.Completed:
		if answer && !c.json() {
			fmt.Fprintf(c.stdout, "\n%s\n", strings.TrimRight(end.result, "\n"))
		}
		return nil
	case taskstate.Failed:
		return &taskEndedError{msg: fmt.Sprintf("task %s failed: %s", id, orNone(end.reason))}
	case taskstate.Cancelled:
		return &taskEndedError{msg: fmt.Sprintf("task %s was cancelled: %s", id, orNone(end.reason))}
	}
	return &taskEndedError{msg: fmt.Sprintf("task %s stopped in status %s", id, taskstate.Name(end.status))}
}

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return oneLine(s)
}

func titleOf(t *agentmeshv1.Task) string {
	if t.GetTitle() != "" {
		return t.GetTitle()
	}
	return oneLine(t.GetInput())
}

func ago(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	d := time.Since(ts.AsTime())
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s ago"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m ago"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h ago"
	}
	return ts.AsTime().Local().Format("2006-01-02")
}

// newIdempotencyKey returns a fresh random key for one submit.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "amctl-" + hex.EncodeToString(b[:])
}
