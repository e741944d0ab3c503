package main

import (
	"context"
	"fmt"
	"io"

	"github.com/palisade-sandbox/palisade/pkg/cli"
)

// command is one of the binary's commands; usage and the unknown-command
// message are made from this one table.
type command struct {
	cli.Command
	run func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

var commands = []command{
	{cli.Command{Name: "run", Synopsis: "run [flags] -- CMD [ARG...]", Summary: "create a sandbox from the resolved policy and run CMD in it;\n" +
		"--detach [-- CMD]: start CMD (or keep it up for exec), print NAME ID, return"},
		func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
			return runCmd(ctx, args, stdin, stdout, stderr, false)
		}},
	{cli.Command{Name: "exec", Synopsis: "exec [flags] NAME -- CMD", Summary: "run CMD inside the running sandbox NAME with its confinement\n" +
		"(--expect-id ID: exit 125, nothing run, if its id is not ID)"}, execCmd},
	{cli.Command{Name: "attach", Synopsis: "attach NAME", Summary: "follow a detached sandbox's main process: replay (1 MiB), output,\n" +
		"stdin lease; exits with the main process's status"},
		func(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
			return attachCmd(args, stdin, stdout, stderr)
		}},
	{cli.Command{Name: "delete", Synopsis: "delete [--expect-id ID] NAME", Summary: "stop and remove a sandbox (exit 3, nothing changed, if its id is not ID)"},
		func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
			return deleteCmd(args, stdout, stderr)
		}},
	{cli.Command{Name: "logs", Synopsis: "logs [--since DUR] [--follow] [--json] [--denied] [--proxy] NAME",
		Summary: "the sandbox's events, newest last; --denied: one DENY line per denial;\n--proxy: the egress proxy's own log"},
		func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
			return logsCmd(ctx, args, stdout, stderr)
		}},
	{cli.Command{Name: "spec", Synopsis: "spec [run flags] -- CMD", Summary: "print the OCI config.json run would use, without running"},
		func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
			return runCmd(ctx, args, stdin, stdout, stderr, true)
		}},
	{cli.Command{Name: "list", Synopsis: "list [--json]", Summary: "list sandboxes in the state directory"},
		func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
			return listCmd(args, stdout, stderr)
		}},
	{cli.Command{Name: "status", Synopsis: "status NAME [--json|--config]", Summary: "show one sandbox's labels, or its configuration as JSON"},
		func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
			return statusCmd(args, stdout, stderr)
		}},
	{cli.Command{Name: "gc", Synopsis: "gc [--apply] [--stale-after DUR] [--json]", Summary: "collect orphaned sandboxes (dry run unless --apply)"},
		func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
			return gcCmd(args, stdout, stderr)
		}},
	{cli.Command{Name: "preflight", Synopsis: "preflight [--json]", Summary: "probe the kernel features confinement needs"},
		func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
			return preflightCmd(args, stdout, stderr)
		}},
}

func table() []cli.Command {
	t := make([]cli.Command, len(commands))
	for i, c := range commands {
		t[i] = c.Command
	}
	return t
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "usage: sandbox-supervisor COMMAND [flags]\n       sandbox-supervisor --version\n\nCommands:\n")
	cli.PrintCommands(w, table())
	fmt.Fprint(w, usageTail)
}

const usageTail = `
Run 'sandbox-supervisor COMMAND --help' for a command's flags.

Examples:
  sudo sandbox-supervisor run -- sh -c 'id; cat /etc/shadow; echo done'
  sudo sandbox-supervisor run --policy /etc/mac/openshell-policy.yaml --name task-42 \
       --kind task --workdir /srv/work/task-42 --events /var/log/openshell-ocsf.task-42.log -- make test
  sudo sandbox-supervisor run --detach --name task-42 --workdir /srv/task-42
  sudo sandbox-supervisor exec task-42 -- 'make test'
  sudo sandbox-supervisor logs --proxy task-42
  sudo sandbox-supervisor delete task-42
  sudo sandbox-supervisor preflight --json
  sudo sandbox-supervisor gc            # what would be collected, and why
  sudo sandbox-supervisor gc --apply

Exit status:
  run, exec   the command's own; 128+N when it died of signal N;
              125 when the sandbox could not be created (run) or nothing
              could be run in it (exec: sandbox gone, its init gone,
              --expect-id mismatch); 126/127 when the command is not
              executable / not found
  attach      the main process's status as above; 2 when the sandbox
              has no main process (run --detach without a command)
  delete      0 deleted, 1 failed, 2 usage, 3 --expect-id mismatch
  others      0 ok, 1 check failed, 2 usage error
`
