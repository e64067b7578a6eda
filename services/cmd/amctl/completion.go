package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// groupCommands are the commands of each command group (agents create,
// …); a test checks them against the groups' own lists.
var groupCommands = map[string][]string{
	"agents":    {"create", "list", "get", "update", "delete", "match", "versions"},
	"skills":    {"create", "list", "get", "update", "delete"},
	"approvals": {"list", "approve", "reject"},
	"proposals": {"list", "show", "approve", "reject"},
	"taps":      {"create"},
	"state":     {"get", "set", "delete", "list"},
	"memories":  {"list", "get", "delete", "prune"},
	"threads":   {"list", "get", "delete"},
}

// shells are the shells `amctl completion` writes for.
var shells = []string{"bash", "zsh", "fish"}

// compCmd is one command as completion knows it: its flags (from its own
// flag set) and, for a group, its commands.
type compCmd struct {
	name, summary string
	flags         []string
	subs          []compCmd
}

// completion prints the completion script of a shell.
func (c *cli) completion(ctx context.Context, args []string) error {
	fs := c.flags("completion", "bash|zsh|fish", `Print a completion script for a shell: commands, their commands and flags,
-o's formats and --context's names. Load it with:
  bash:  source <(amctl completion bash)      (or save it in /etc/bash_completion.d/amctl)
  zsh:   source <(amctl completion zsh)       (after compinit)
  fish:  amctl completion fish > ~/.config/fish/completions/amctl.fish`)
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("completion", pos, "SHELL"); err != nil {
		return err
	}
	cmds := completionSpec(ctx)
	switch pos[0] {
	case "bash":
		writeBash(c.stdout, cmds)
	case "zsh":
		fmt.Fprint(c.stdout, "#compdef amctl\n# zsh completion for amctl (amctl completion zsh): the bash one, through bashcompinit.\nautoload -U +X bashcompinit && bashcompinit\n")
		writeBash(c.stdout, cmds)
	case "fish":
		writeFish(c.stdout, cmds)
	default:
		return usagef("completion: unknown shell %q (want %s)", pos[0], strings.Join(shells, ", "))
	}
	return nil
}

// flagLine is a flag in flag.PrintDefaults' output.
var flagLine = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9-]*)`)

// flagsOf runs `amctl ARGS -h` in process (it connects nowhere) and
// returns the flags its help lists (-o, --server, ...).
func flagsOf(ctx context.Context, args ...string) []string {
	var out bytes.Buffer
	run(ctx, append(args, "-h"), &out, io.Discard)
	var flags []string
	for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
		if len(m[1]) == 1 {
			flags = append(flags, "-"+m[1]) // -o
			continue
		}
		flags = append(flags, "--"+m[1])
	}
	sort.Strings(flags)
	return flags
}

// completionSpec lists every command with its flags and commands.
func completionSpec(ctx context.Context) []compCmd {
	var cmds []compCmd
	for _, cmd := range commands() {
		cc := compCmd{name: cmd.name, summary: cmd.summary}
		if subs, ok := groupCommands[cmd.name]; ok {
			for _, s := range subs {
				cc.subs = append(cc.subs, compCmd{name: s, flags: flagsOf(ctx, cmd.name, s)})
			}
		} else if cmd.run != nil {
			cc.flags = flagsOf(ctx, cmd.name)
		}
		cmds = append(cmds, cc)
	}
	return cmds
}

func names(cmds []compCmd) string {
	var n []string
	for _, c := range cmds {
		n = append(n, c.name)
	}
	return strings.Join(n, " ")
}

// writeBash writes a bash completion function: the command (and a group's
// command) is the first word that names one; flags after a dash; -o and
// --context complete their values.
func writeBash(w io.Writer, cmds []compCmd) {
	fmt.Fprintf(w, `# bash completion for amctl (amctl completion bash)
_amctl() {
  local cur prev cmd="" sub="" words="" i
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  case "$prev" in
    -o) COMPREPLY=($(compgen -W "table json" -- "$cur")); return;;
    -context|--context) COMPREPLY=($(compgen -W "$(amctl contexts --names 2>/dev/null)" -- "$cur")); return;;
    completion) COMPREPLY=($(compgen -W "%s" -- "$cur")); return;;
  esac
  for ((i=1; i<COMP_CWORD; i++)); do
    if [[ -z "$cmd" ]]; then
      case "${COMP_WORDS[i]}" in %s) cmd="${COMP_WORDS[i]}";; esac
    elif [[ -z "$sub" ]]; then
      case "$cmd ${COMP_WORDS[i]}" in %s) sub="${COMP_WORDS[i]}";; esac
    fi
  done
  case "$cmd/$sub" in
`, strings.Join(shells, " "), strings.ReplaceAll(names(cmds), " ", "|"), bashGroupPatterns(cmds))
	fmt.Fprintf(w, "    /) words=\"%s\";;\n", names(cmds))
	for _, c := range cmds {
		if len(c.subs) > 0 {
			fmt.Fprintf(w, "    %s/) words=\"%s\";;\n", c.name, names(c.subs))
			for _, s := range c.subs {
				fmt.Fprintf(w, "    %s/%s) words=\"%s\";;\n", c.name, s.name, strings.Join(s.flags, " "))
			}
			continue
		}
		fmt.Fprintf(w, "    %s/) words=\"%s\";;\n", c.name, strings.Join(c.flags, " "))
	}
	_, _ = io.WriteString(w, `  esac
  if [[ "$cur" == -* ]]; then
    words="$(printf '%s\n' $words | grep -- '^-')"
    [[ -z "$cmd" ]] && words="--context --server --api-key --tls --ca --cert --key --timeout -o"
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _amctl amctl
`)
}

// bashGroupPatterns is the case pattern of "group command" pairs.
func bashGroupPatterns(cmds []compCmd) string {
	var p []string
	for _, c := range cmds {
		for _, s := range c.subs {
			p = append(p, `"`+c.name+" "+s.name+`"`)
		}
	}
	return strings.Join(p, "|")
}

// writeFish writes fish completions: commands with their summaries, a
// group's commands, and each command's flags.
func writeFish(w io.Writer, cmds []compCmd) {
	fmt.Fprintf(w, "# fish completion for amctl (amctl completion fish)\ncomplete -c amctl -f\n")
	fmt.Fprintf(w, "complete -c amctl -s o -x -a 'table json' -d 'output format'\n")
	fmt.Fprintf(w, "complete -c amctl -l context -x -a '(amctl contexts --names 2>/dev/null)' -d 'context of the config file'\n")
	all := names(cmds)
	for _, c := range cmds {
		fmt.Fprintf(w, "complete -c amctl -n 'not __fish_seen_subcommand_from %s' -a %s -d %s\n", all, c.name, fishQuote(c.summary))
		if c.name == "completion" {
			fmt.Fprintf(w, "complete -c amctl -n '__fish_seen_subcommand_from completion' -a '%s'\n", strings.Join(shells, " "))
		}
		if len(c.subs) > 0 {
			subs := names(c.subs)
			fmt.Fprintf(w, "complete -c amctl -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -a '%s'\n", c.name, subs, subs)
			for _, s := range c.subs {
				writeFishFlags(w, fmt.Sprintf("__fish_seen_subcommand_from %s; and __fish_seen_subcommand_from %s", c.name, s.name), s.flags)
			}
			continue
		}
		writeFishFlags(w, "__fish_seen_subcommand_from "+c.name, c.flags)
	}
}

func writeFishFlags(w io.Writer, cond string, flags []string) {
	for _, f := range flags {
		name := strings.TrimLeft(f, "-")
		if len(name) == 1 {
			fmt.Fprintf(w, "complete -c amctl -n '%s' -s %s\n", cond, name)
			continue
		}
		fmt.Fprintf(w, "complete -c amctl -n '%s' -l %s\n", cond, name)
	}
}

func fishQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
