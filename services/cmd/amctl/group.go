package main

import (
	"context"
	"fmt"
	"strings"
)

// subcommand is one command of a command group (amctl agents create, …).
type subcommand struct {
	name string
	run  func(context.Context, []string) error
}

// group runs the command of a group (agents, skills, approvals, proposals)
// that args name. usage is printed to stdout for -h, --help or help, and to
// stderr, with a usage error, when no command is given; an unknown command
// is a usage error naming the group's commands.
func (c *cli) group(ctx context.Context, name, usage string, args []string, cmds ...subcommand) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		out := c.stdout
		if len(args) == 0 {
			out = c.stderr
		}
		fmt.Fprint(out, usage)
		if len(args) == 0 {
			return usagef("%s: a command is required", name)
		}
		return errHelp
	}
	names := make([]string, len(cmds))
	for i, cmd := range cmds {
		if cmd.name == args[0] {
			return cmd.run(ctx, args[1:])
		}
		names[i] = cmd.name
	}
	want := names[len(names)-1]
	if len(names) > 1 {
		want = strings.Join(names[:len(names)-1], ", ") + " or " + want
	}
	return usagef("%s: unknown command %q (want %s)", name, args[0], want)
}
