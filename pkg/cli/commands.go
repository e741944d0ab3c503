package cli

import (
	"fmt"
	"io"
	"strings"
)

// Command is one subcommand of a binary that has several: its name, its
// synopsis (the name and its arguments) and a summary for --help. A
// binary keeps one table of them, and its --help and its unknown-command
// message are both made from it, so neither can forget a command.
type Command struct {
	Name     string
	Synopsis string // e.g. "exec [flags] NAME -- CMD"; Name when empty
	Summary  string // may hold several lines
}

// CommandNames is the names in table order, comma-separated.
func CommandNames(cmds []Command) string {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// UnknownCommand is the usage error for a command name that is not in
// cmds, listing them all.
func UnknownCommand(prog, name string, cmds []Command) error {
	return Usagef("unknown command %q; commands: %s (see %s --help)", name, CommandNames(cmds), prog)
}

// PrintCommands writes the table as --help shows it: the synopsis, and
// the summary beside it (or below it, when the synopsis is long).
func PrintCommands(w io.Writer, cmds []Command) {
	const col = 30
	for _, c := range cmds {
		syn := c.Synopsis
		if syn == "" {
			syn = c.Name
		}
		lines := strings.Split(c.Summary, "\n")
		if len(syn) < col {
			fmt.Fprintf(w, "  %-*s%s\n", col, syn, lines[0])
			lines = lines[1:]
		} else {
			fmt.Fprintf(w, "  %s\n", syn)
		}
		for _, l := range lines {
			fmt.Fprintf(w, "  %*s%s\n", col, "", l)
		}
	}
}
