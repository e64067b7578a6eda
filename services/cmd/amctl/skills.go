package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// amctl skills: the skill catalogue (SkillService).

func (c *cli) skillsCmd(ctx context.Context, args []string) error {
	return c.group(ctx, "skills", `Usage: amctl skills COMMAND [flags]

Skills are things agents can do: a description (task analysis reads it),
the tools they need, a prompt template and a configuration. An agent
offers skills of its org's catalogue or the shared one; a task of the
agent runs with their prompt templates and tools added.

Commands:
  create NAME [flags]   create a skill
  list                  list your org's skills and the shared ones
  get NAME              show a skill
  update NAME [flags]   change a skill (flags not given keep their value)
  delete NAME           delete a skill no agent offers

Run 'amctl skills COMMAND -h' for a command's flags.
`, args,
		subcommand{"create", c.skillCreate},
		subcommand{"list", c.skillList},
		subcommand{"get", c.skillGet},
		subcommand{"update", c.skillUpdate},
		subcommand{"delete", c.skillDelete},
	)
}

// skillFlags are the settings flags of create and update.
type skillFlags struct {
	fs          *flag.FlagSet
	description *string
	prompt      *string
	promptFile  *string
	tools       stringList
	clearTools  *bool
	config      metaFlag
	clearConfig *bool
}

func newSkillFlags(fs *flag.FlagSet) *skillFlags {
	f := &skillFlags{fs: fs, config: metaFlag{}}
	f.description = fs.String("description", "", "what the skill is for, in words (task analysis matches task inputs to it)")
	f.prompt = fs.String("prompt-template", "", "text added to the system prompt of agents offering the skill ({{skill}}, {{config.KEY}} are filled)")
	f.promptFile = fs.String("prompt-template-file", "", "read the prompt template from this file")
	fs.Var(&f.tools, "tool", "a tool the skill needs; agents offering it get it (repeat, or comma-separate)")
	f.clearTools = fs.Bool("clear-tools", false, "update: drop the required tools (then --tool adds)")
	fs.Var(f.config, "config", "a configuration entry key=value (repeat); update: key= removes the key")
	f.clearConfig = fs.Bool("clear-config", false, "update: drop the configuration (then --config adds)")
	return f
}

// apply sets the flags given on sk.
func (f *skillFlags) apply(sk *agentmeshv1.Skill) error {
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if given["description"] {
		sk.Description = *f.description
	}
	if given["prompt-template"] && given["prompt-template-file"] {
		return usagef("--prompt-template and --prompt-template-file: give one")
	}
	if given["prompt-template"] {
		sk.PromptTemplate = *f.prompt
	}
	if given["prompt-template-file"] {
		b, err := os.ReadFile(*f.promptFile)
		if err != nil {
			return usagef("--prompt-template-file: %v", err)
		}
		sk.PromptTemplate = string(b)
	}
	if *f.clearTools {
		sk.RequiredTools = nil
	}
	if given["tool"] {
		for _, t := range f.tools {
			if !containsStr(sk.RequiredTools, t) {
				sk.RequiredTools = append(sk.RequiredTools, t)
			}
		}
	}
	if *f.clearConfig {
		sk.Config = nil
	}
	for k, v := range f.config {
		if v == "" {
			delete(sk.Config, k)
			continue
		}
		if sk.Config == nil {
			sk.Config = map[string]string{}
		}
		sk.Config[k] = v
	}
	return nil
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func skillErr(name string, err error) error {
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("skill %s not found", name)
	}
	return err
}

func (c *cli) skillClient() agentmeshv1.SkillServiceClient {
	return agentmeshv1.NewSkillServiceClient(c.conn)
}

func (c *cli) skillCreate(ctx context.Context, args []string) error {
	fs := c.flags("skills create", "NAME [--description D] [--tool T ...] [--prompt-template TEXT] [--config k=v ...]", "Create a skill.")
	sf := newSkillFlags(fs.FlagSet)
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("skills create", pos, "NAME"); err != nil {
		return err
	}
	sk := &agentmeshv1.Skill{Name: pos[0]}
	if err := sf.apply(sk); err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.skillClient().CreateSkill(cctx, &agentmeshv1.CreateSkillRequest{Skill: sk})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp.GetSkill(), true)
	}
	fmt.Fprintf(c.stdout, "skill %s created (version %d)\n", resp.GetSkill().GetName(), resp.GetSkill().GetVersion())
	return nil
}

func (c *cli) skillUpdate(ctx context.Context, args []string) error {
	fs := c.flags("skills update", "NAME [flags]",
		"Change a skill: the settings whose flags are given change and the rest stay (the update\n"+
			"applies only if nobody changed the skill meanwhile). Agents offering it take the new\n"+
			"settings for tasks accepted from then on.")
	sf := newSkillFlags(fs.FlagSet)
	expected := fs.Int64("expected-version", 0, "apply only if the stored version equals this")
	pos, err := c.parseConnect(fs, args, "skills update", "NAME")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	got, err := c.skillClient().GetSkill(cctx, &agentmeshv1.GetSkillRequest{Name: pos[0]})
	cancel()
	if err != nil {
		return skillErr(pos[0], err)
	}
	sk := proto.Clone(got.GetSkill()).(*agentmeshv1.Skill)
	if *expected == 0 {
		*expected = sk.GetVersion()
	}
	if err := sf.apply(sk); err != nil {
		return err
	}
	cctx, cancel = c.call(ctx)
	defer cancel()
	resp, err := c.skillClient().UpdateSkill(cctx, &agentmeshv1.UpdateSkillRequest{Skill: sk, ExpectedVersion: *expected})
	if err != nil {
		return skillErr(sk.GetName(), err)
	}
	if c.json() {
		return c.printJSON(resp.GetSkill(), true)
	}
	fmt.Fprintf(c.stdout, "skill %s updated (version %d)\n", resp.GetSkill().GetName(), resp.GetSkill().GetVersion())
	return nil
}

func (c *cli) skillGet(ctx context.Context, args []string) error {
	fs := c.flags("skills get", "NAME", "Show a skill: your org's of that name, else the shared one.")
	pos, err := c.parseConnect(fs, args, "skills get", "NAME")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.skillClient().GetSkill(cctx, &agentmeshv1.GetSkillRequest{Name: pos[0]})
	if err != nil {
		return skillErr(pos[0], err)
	}
	if c.json() {
		return c.printJSON(resp.GetSkill(), true)
	}
	sk := resp.GetSkill()
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 1, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("name", sk.GetName())
	owner := sk.GetOrg()
	if owner == "" {
		owner = "shared"
	}
	row("owner", owner)
	row("description", sk.GetDescription())
	row("required tools", dash(strings.Join(sk.GetRequiredTools(), ", ")))
	for _, k := range sortedKeys(sk.GetConfig()) {
		row("config "+k, sk.GetConfig()[k])
	}
	row("version", fmt.Sprint(sk.GetVersion()))
	row("created", when(sk.GetCreatedAt()))
	row("updated", when(sk.GetUpdatedAt()))
	_ = tw.Flush()
	block(c.stdout, "prompt template", sk.GetPromptTemplate())
	return nil
}

func (c *cli) skillList(ctx context.Context, args []string) error {
	fs := c.flags("skills list", "", "List your org's skills and the shared ones, by name.")
	limit := fs.Int("limit", 0, "at most this many skills")
	token := fs.String("page-token", "", "continue from a previous listing")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("skills list", pos); err != nil {
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
	resp, err := c.skillClient().ListSkills(cctx, &agentmeshv1.ListSkillsRequest{PageSize: int32(*limit), PageToken: *token})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp, true)
	}
	if len(resp.GetSkills()) == 0 {
		fmt.Fprintln(c.stdout, "no skills")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOWNER\tREQUIRED TOOLS\tVERSION\tDESCRIPTION")
	for _, sk := range resp.GetSkills() {
		owner := sk.GetOrg()
		if owner == "" {
			owner = "shared"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", sk.GetName(), owner, dash(strings.Join(sk.GetRequiredTools(), ",")), sk.GetVersion(), oneLineOf(sk.GetDescription(), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if tok := resp.GetNextPageToken(); tok != "" {
		fmt.Fprintf(c.stdout, "\nmore: amctl skills list --page-token %s\n", tok)
	}
	return nil
}

func (c *cli) skillDelete(ctx context.Context, args []string) error {
	fs := c.flags("skills delete", "NAME", "Delete a skill no agent offers.")
	pos, err := c.parseConnect(fs, args, "skills delete", "NAME")
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	if _, err := c.skillClient().DeleteSkill(cctx, &agentmeshv1.DeleteSkillRequest{Name: pos[0]}); err != nil {
		return skillErr(pos[0], err)
	}
	fmt.Fprintf(c.stdout, "skill %s deleted\n", pos[0])
	return nil
}

// oneLineOf shortens s to n runes on one line.
func oneLineOf(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return dash(s)
}
