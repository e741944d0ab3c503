// Command policy-sync resolves, checks and renders Palisade sandbox
// policies (OpenShell policy schema version 1), converges a worker on the
// policy its hub assigns, and expands one task's policy with the package
// registries it needs. check validates a file, resolve shows which policy
// a sandbox would use and why, render fills an operator template (all in
// pkg/policy); once and watch pull the hub assignment and install it
// (pkg/policysync); expand derives per-task egress (pkg/egress).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/palisade-sandbox/palisade/pkg/cli"
)

const prog = "policy-sync"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	cli.Exit(prog, err, os.Stderr)
}

// app is what every subcommand gets: its streams, the environment and a
// logger for human messages (stderr).
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	log            *slog.Logger
}

// command is one subcommand. To add one (once, watch, expand, ...), write
// it in its own file and append it to commands.
type command struct {
	name    string
	summary string
	// usage is the full help text: synopsis, flags are appended, then examples.
	usage    string
	examples string
	// flags declares the subcommand's flags on fs and returns the runner,
	// which receives the positional arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, a *app, args []string) error
}

var commands = []*command{checkCmd, resolveCmd, renderCmd, onceCmd, watchCmd, expandCmd, proposeCmd, applyProposalCmd}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if cli.IsVersion(args) {
		return cli.PrintVersion(stdout, prog)
	}
	global := flag.NewFlagSet(prog, flag.ContinueOnError)
	global.SetOutput(io.Discard)
	logFormat := global.String("log-format", "text", "human log format on stderr: text or json")
	if err := cli.ParseFlags(global, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			mainUsage(stdout, global)
			return nil
		}
		mainUsage(stderr, global)
		return cli.Usagef("%v", err)
	}
	logger, err := cli.NewLogger(*logFormat, stderr, slog.LevelInfo)
	if err != nil {
		return err
	}
	rest := global.Args()
	if len(rest) == 0 {
		mainUsage(stderr, global)
		return cli.Usagef("missing command")
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		if len(rest) == 0 {
			mainUsage(stdout, global)
			return nil
		}
		name, rest = rest[0], []string{"--help"}
	}
	c := findCommand(name)
	if c == nil {
		names := make([]string, len(commands))
		for i, c := range commands {
			names[i] = c.name
		}
		return cli.Usagef("unknown command %q; commands: %s (see %s --help)", name, strings.Join(names, ", "), prog)
	}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv, log: logger}
	fs := flag.NewFlagSet(prog+" "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runner := c.flags(fs)
	pos, err := cli.ParseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			commandUsage(stdout, c, fs)
			return nil
		}
		commandUsage(stderr, c, fs)
		return cli.Usagef("%s: %v", c.name, err)
	}
	return runner(ctx, a, pos)
}

func mainUsage(w io.Writer, global *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s [--log-format text|json] <command> [arguments]\n\n", prog)
	fmt.Fprintf(w, "Resolve, check, render, sync (from the hub), expand and propose Palisade sandbox\npolicies (OpenShell policy schema v1).\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nGlobal flags:\n")
	cli.PrintFlags(w, global)
	fmt.Fprintf(w, "\nExamples:\n")
	fmt.Fprintf(w, "  %s check /etc/mac/openshell-policy.yaml\n", prog)
	fmt.Fprintf(w, "  %s resolve --json\n", prog)
	fmt.Fprintf(w, "  %s render --set AGENT_USER=hermes --set MAC_HUB_HOST=hub.example.internal \\\n      --set MAC_HUB_PORT=8080 --set MODEL_GATEWAY_HOST=models.example.com -o ~/.mac/openshell-policy.yaml\n", prog)
	fmt.Fprintf(w, "  %s once --hub https://hub.example.internal:8080 --agent-id worker-1 --token-file /etc/mac/agent.token\n", prog)
	fmt.Fprintf(w, "  %s expand --base ~/.mac/openshell-policy.yaml --repo . --task-metadata task.json -o task-policy.yaml\n", prog)
	fmt.Fprintf(w, "  %s propose --events /var/log/palisade/events.jsonl --sandbox task-42 -o proposal.yaml\n", prog)
	fmt.Fprintf(w, "  %s apply-proposal proposal.yaml --approve\n", prog)
	fmt.Fprintf(w, "\nRun '%s help <command>' for a command's flags and examples.\n", prog)
	fmt.Fprintf(w, "Exit status: 0 ok, 1 invalid policy or failure (once: failed safe), 2 usage error.\n")
}

func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s %s\n\n", prog, strings.TrimSpace(c.usage))
	fmt.Fprintf(w, "Flags:\n")
	cli.PrintFlags(w, fs)
	fmt.Fprintf(w, "\nExamples:\n%s", c.examples)
}
