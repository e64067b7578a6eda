package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func (c *cli) agentsCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "agents", `Usage: amctl agents COMMAND [flags]

Commands:
  create NAME [flags]     create an agent (or --file agent.json)
  list [--skill S]        list agents
  get NAME [--version N]  show an agent (or an earlier version of it)
  versions NAME           list an agent's versions, newest first
  update NAME [flags]     change an agent's settings (flags not given keep their value)
  delete NAME             delete an agent
  match SKILL...          rank the agents for these skills, with each score's breakdown

Run 'amctl agents COMMAND -h' for a command's flags.
`, args,
		subcommand{"create", c.agentCreate},
		subcommand{"list", c.agentList},
		subcommand{"get", c.agentGet},
		subcommand{"update", c.agentUpdate},
		subcommand{"delete", c.agentDelete},
		subcommand{"match", c.agentMatch},
		subcommand{"versions", c.agentVersions},
	)
}

// agentFlags are the settings flags of create and update.
type agentFlags struct {
	fs          *flag.FlagSet
	file        *string
	description *string
	model       *string
	baseURL     *string
	prompt      *string
	temperature *string
	maxTokens   *int
	tools       stringList
	skills      stringList
	maxConc     *int
	routingPrio *int
	maxSteps    *int
	retries     *int
	queueTO     *time.Duration
	mem         *agentMemoryFlags // memory.go
}

func newAgentFlags(fs *flag.FlagSet) *agentFlags {
	f := &agentFlags{fs: fs}
	f.file = fs.String("file", "", "read the agent from this protojson file (- for stdin); flags given override it")
	f.description = fs.String("description", "", "what the agent is for")
	f.model = fs.String("model", "", "model name (empty: the executor's default)")
	f.baseURL = fs.String("base-url", "", "OpenAI-compatible base URL (empty: the executor's default)")
	f.prompt = fs.String("system-prompt", "", "the agent's system prompt")
	f.temperature = fs.String("temperature", "", "sampling temperature (empty: the provider's default)")
	f.maxTokens = fs.Int("max-tokens", 0, "maximum completion tokens per turn (0: the provider's default)")
	fs.Var(&f.tools, "tool", "a tool the agent may use (repeat, or comma-separate)")
	fs.Var(&f.skills, "skill", "a skill the agent offers (repeat, or comma-separate)")
	f.maxConc = fs.Int("max-concurrency", 0, "tasks that may run at once across the cluster (0: no limit)")
	f.routingPrio = fs.Int("routing-priority", 0, "rank among agents of equal ability in matching, 1-100 (0: unset, scored as 50)")
	f.maxSteps = fs.Int("max-steps", 0, "maximum agent steps per task (0: the executor's default)")
	f.retries = fs.Int("retries", 0, "retry a task's transient failures up to N times (default 3; 0: never)")
	f.queueTO = fs.Duration("queue-timeout", 0, "fail a task queued longer than this, e.g. 10m (0: no limit)")
	f.mem = addAgentMemoryFlags(fs)
	return f
}

// apply sets on a the settings whose flags were given.
func (f *agentFlags) apply(a *agentmeshv1.Agent) error {
	var err error
	f.fs.Visit(func(fl *flag.Flag) {
		if err != nil {
			return
		}
		if a.Model == nil && (fl.Name == "model" || fl.Name == "base-url" || fl.Name == "temperature" || fl.Name == "max-tokens") {
			a.Model = &agentmeshv1.ModelSettings{}
		}
		switch fl.Name {
		case "description":
			a.Description = *f.description
		case "model":
			a.Model.Model = *f.model
		case "base-url":
			a.Model.BaseUrl = *f.baseURL
		case "system-prompt":
			a.SystemPrompt = *f.prompt
		case "temperature":
			if *f.temperature == "" {
				a.Model.Temperature = nil
				return
			}
			v, perr := strconv.ParseFloat(*f.temperature, 32)
			if perr != nil || math.IsNaN(v) || v < 0 || v > 2 {
				err = usagef("--temperature: want a number between 0 and 2, got %q", *f.temperature)
				return
			}
			t := float32(v)
			a.Model.Temperature = &t
		case "max-tokens":
			a.Model.MaxTokens = int32(*f.maxTokens)
		case "tool":
			a.Tools = append([]string(nil), f.tools...)
		case "skill":
			a.Skills = append([]string(nil), f.skills...)
		case "max-concurrency":
			a.MaxConcurrency = int32(*f.maxConc)
		case "routing-priority":
			a.RoutingPriority = int32(*f.routingPrio)
		case "max-steps":
			a.MaxSteps = int32(*f.maxSteps)
		case "retries":
			if *f.retries < 0 || *f.retries >= taskstate.MaxRetryAttempts {
				err = usagef("--retries: %d is out of range (0 to %d)", *f.retries, taskstate.MaxRetryAttempts-1)
				return
			}
			if a.RetryPolicy == nil {
				a.RetryPolicy = &agentmeshv1.RetryPolicy{}
			}
			a.RetryPolicy.MaxAttempts = int32(*f.retries) + 1
		case "queue-timeout":
			if d := *f.queueTO; d != 0 && (d < taskstate.MinQueueTimeout || d > taskstate.MaxQueueTimeout) {
				err = usagef("--queue-timeout: %s is out of range (%s to %s; 0 = no limit)", d, taskstate.MinQueueTimeout, taskstate.MaxQueueTimeout)
				return
			}
			a.QueueTimeout = durationpb.New(*f.queueTO)
		default:
			err = f.mem.apply(fl.Name, a)
		}
	})
	if err != nil {
		return err
	}
	if *f.routingPrio < 0 || *f.routingPrio > 100 {
		return usagef("--routing-priority: must be between 0 and 100")
	}
	if *f.maxConc < 0 || *f.maxSteps < 0 || *f.maxTokens < 0 {
		return usagef("--max-concurrency, --max-steps and --max-tokens must not be negative")
	}
	return nil
}

// readAgentFile reads an Agent in protojson.
func readAgentFile(path string) (*agentmeshv1.Agent, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usagef("--file: %v", err)
	}
	a := &agentmeshv1.Agent{}
	if err := protojson.Unmarshal(data, a); err != nil {
		return nil, usagef("--file %s: not an agent in JSON: %v", path, err)
	}
	return a, nil
}

// nameArg reconciles NAME with the name in a file.
func nameArg(cmd string, pos []string, a *agentmeshv1.Agent) error {
	switch {
	case len(pos) > 1:
		return usagef("%s: want NAME, got %d arguments", cmd, len(pos))
	case len(pos) == 1 && a.GetName() != "" && a.GetName() != pos[0]:
		return usagef("%s: NAME %q differs from the name %q in --file", cmd, pos[0], a.GetName())
	case len(pos) == 1:
		a.Name = pos[0]
	case a.GetName() == "":
		return usagef("%s: NAME is required", cmd)
	}
	return nil
}

func (c *cli) agentCreate(ctx context.Context, args []string) error {
	fs := c.flags("agents create", "NAME [flags] | --file agent.json", "Create an agent.")
	af := newAgentFlags(fs.FlagSet)
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	a := &agentmeshv1.Agent{}
	if *af.file != "" {
		if a, err = readAgentFile(*af.file); err != nil {
			return err
		}
	}
	if err := nameArg("agents create", pos, a); err != nil {
		return err
	}
	if err := af.apply(a); err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.agents.CreateAgent(cctx, &agentmeshv1.CreateAgentRequest{Agent: a})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp.GetAgent(), true)
	}
	fmt.Fprintf(c.stdout, "agent %s created (version %d)\n", resp.GetAgent().GetName(), resp.GetAgent().GetVersion())
	return nil
}

func (c *cli) agentUpdate(ctx context.Context, args []string) error {
	fs := c.flags("agents update", "NAME [flags] | --file agent.json",
		"Change an agent. Without --file, the settings whose flags are given change and the rest\n"+
			"stay (the update applies only if nobody changed the agent meanwhile). With --file, the\n"+
			"file replaces the agent.")
	af := newAgentFlags(fs.FlagSet)
	expected := fs.Int64("expected-version", 0, "apply only if the stored version equals this")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	var a *agentmeshv1.Agent
	if *af.file != "" {
		if a, err = readAgentFile(*af.file); err != nil {
			return err
		}
		if err := nameArg("agents update", pos, a); err != nil {
			return err
		}
	} else {
		if err := exactly("agents update", pos, "NAME"); err != nil {
			return err
		}
		cctx, cancel := c.call(ctx)
		got, err := c.agents.GetAgent(cctx, &agentmeshv1.GetAgentRequest{Name: pos[0]})
		cancel()
		if err != nil {
			return agentErr(pos[0], err)
		}
		a = proto.Clone(got.GetAgent()).(*agentmeshv1.Agent)
		if *expected == 0 {
			*expected = a.GetVersion()
		}
	}
	if err := af.apply(a); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.agents.UpdateAgent(cctx, &agentmeshv1.UpdateAgentRequest{Agent: a, ExpectedVersion: *expected})
	if err != nil {
		return agentErr(a.GetName(), err)
	}
	if c.json() {
		return c.printJSON(resp.GetAgent(), true)
	}
	fmt.Fprintf(c.stdout, "agent %s updated (version %d)\n", resp.GetAgent().GetName(), resp.GetAgent().GetVersion())
	return nil
}

func (c *cli) agentGet(ctx context.Context, args []string) error {
	fs := c.flags("agents get", "NAME [--version N]", "Show an agent, or an earlier version of it.")
	version := fs.Int64("version", 0, "this version of the agent (0 = the latest)")
	pos, err := c.parseConnect(fs, args, "agents get", "NAME")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	if *version < 0 {
		return usagef("--version: must not be negative")
	}
	resp, err := c.agents.GetAgent(cctx, &agentmeshv1.GetAgentRequest{Name: pos[0], Version: *version})
	if err != nil {
		if *version > 0 && status.Code(err) == codes.NotFound {
			return fmt.Errorf("agent %s has no version %d (amctl agents versions %s)", pos[0], *version, pos[0])
		}
		return agentErr(pos[0], err)
	}
	if c.json() {
		return c.printJSON(resp.GetAgent(), true)
	}
	printAgent(c.stdout, resp.GetAgent())
	return nil
}

// agentVersions lists an agent's stored versions, newest first.
func (c *cli) agentVersions(ctx context.Context, args []string) error {
	fs := c.flags("agents versions", "NAME", "List an agent's versions, newest first (amctl agents get NAME --version N shows one).")
	limit := fs.Int("limit", 0, "at most this many versions")
	token := fs.String("page-token", "", "continue from a previous listing")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("agents versions", pos, "NAME"); err != nil {
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
	resp, err := c.agents.ListAgentVersions(cctx, &agentmeshv1.ListAgentVersionsRequest{Name: pos[0], PageSize: int32(*limit), PageToken: *token})
	if err != nil {
		return agentErr(pos[0], err)
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION	UPDATED	MODEL	SKILLS	TOOLS")
	for _, a := range resp.GetVersions() {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", a.GetVersion(), when(a.GetUpdatedAt()), modelOf(a), dash(strings.Join(a.GetSkills(), ",")), dash(strings.Join(a.GetTools(), ",")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if tok := resp.GetNextPageToken(); tok != "" {
		fmt.Fprintf(c.stdout, "\nmore: amctl agents versions %s --page-token %s\n", pos[0], tok)
	}
	return nil
}

func (c *cli) agentList(ctx context.Context, args []string) error {
	fs := c.flags("agents list", "[--skill S]", "List agents.")
	skill := fs.String("skill", "", "only agents offering this skill")
	limit := fs.Int("limit", 0, "at most this many agents")
	token := fs.String("page-token", "", "continue from a previous listing")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("agents list", pos); err != nil {
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
	resp, err := c.agents.ListAgents(cctx, &agentmeshv1.ListAgentsRequest{Skill: *skill, PageSize: int32(*limit), PageToken: *token})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	if len(resp.GetAgents()) == 0 {
		fmt.Fprintln(c.stdout, "no agents")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOWNER\tMODEL\tSKILLS\tTOOLS\tMAX CONCURRENCY\tVERSION")
	for _, a := range resp.GetAgents() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", a.GetName(), ownerOf(a), modelOf(a), dash(strings.Join(a.GetSkills(), ",")),
			dash(strings.Join(a.GetTools(), ",")), limitOf(a.GetMaxConcurrency()), a.GetVersion())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if tok := resp.GetNextPageToken(); tok != "" {
		fmt.Fprintf(c.stdout, "\nmore: amctl agents list --page-token %s\n", tok)
	}
	return nil
}

func (c *cli) agentDelete(ctx context.Context, args []string) error {
	fs := c.flags("agents delete", "NAME", "Delete an agent. Tasks already accepted keep running.")
	pos, err := c.parseConnect(fs, args, "agents delete", "NAME")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	if _, err := c.agents.DeleteAgent(cctx, &agentmeshv1.DeleteAgentRequest{Name: pos[0]}); err != nil {
		return agentErr(pos[0], err)
	}
	if !c.json() {
		fmt.Fprintf(c.stdout, "agent %s deleted\n", pos[0])
	} else {
		fmt.Fprintln(c.stdout, "{}")
	}
	return nil
}

func agentErr(name string, err error) error {
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("agent %s not found", name)
	}
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ownerOf prints who owns an agent: its org, or "shared" (read-only for
// orgs, managed with a platform key).
func ownerOf(a *agentmeshv1.Agent) string {
	if a.GetOrg() == "" {
		return "shared"
	}
	return a.GetOrg()
}
