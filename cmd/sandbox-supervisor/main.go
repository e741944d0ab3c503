// Command sandbox-supervisor creates a named sandbox from the resolved
// policy and runs one command in it: namespaces, cgroup limits, private
// mounts, Landlock, seccomp and a verified privilege drop. It reaps,
// forwards signals, relays a PTY or pipes, reports the command's exit
// status, and emits OCSF events. `list`, `status`, `gc`, `preflight` and
// `spec` inspect and maintain sandboxes.
//
// The binary also serves as the in-sandbox init: when started with the
// hidden first argument sandbox.InitCommand it runs sandbox.RunInit and
// nothing else.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
)

// mainStart is when main began (for --log-level debug start-up timing).
var mainStart time.Time

func main() {
	mainStart = time.Now()
	// The init stage is dispatched before anything else is parsed.
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		sandbox.RunInit()
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGPIPE)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	sandbox.RestoreTerminals()
	cli.Exit("sandbox-supervisor", err, os.Stderr)
}

const usage = `usage: sandbox-supervisor COMMAND [flags]

Commands:
  run [flags] -- CMD [ARG...]   create a sandbox from the resolved policy and run CMD in it
  run --detach [flags] [-- CMD] create the sandbox, start CMD (or keep it up for exec), print NAME ID, return
  exec [flags] NAME -- CMD      run CMD inside the running sandbox NAME with its confinement
                                (--expect-id ID: exit 3, nothing run, if its id is not ID)
  delete [--expect-id ID] NAME  stop and remove a sandbox (exit 3, nothing changed, if its id is not ID)
  attach NAME                   follow a detached sandbox's main process: replay (1 MiB), output, stdin lease
  logs [--since DUR] [--follow] [--json] [--denied] NAME
                                the sandbox's events, newest last; --denied: one DENY line per denial
  spec [run flags] -- CMD       print the OCI config.json run would use, without running
  list [--json]                 list sandboxes in the state directory
  status NAME [--json|--config] show one sandbox's labels, or its configuration as JSON
  gc [--apply] [--stale-after DUR] [--json]
                                collect orphaned sandboxes (dry run unless --apply)
  preflight [--json]            probe the kernel features confinement needs

Run 'sandbox-supervisor COMMAND --help' for a command's flags.

Examples:
  sudo sandbox-supervisor run -- sh -c 'id; cat /etc/shadow; echo done'
  sudo sandbox-supervisor run --policy /etc/mac/openshell-policy.yaml --name task-42 \
       --kind task --workdir /srv/work/task-42 --events /var/log/openshell-ocsf.task-42.log -- make test
  sudo sandbox-supervisor run --detach --name task-42 --workdir /srv/task-42
  sudo sandbox-supervisor exec task-42 -- 'make test'
  sudo sandbox-supervisor delete task-42
  sudo sandbox-supervisor preflight --json
  sudo sandbox-supervisor gc            # what would be collected, and why
  sudo sandbox-supervisor gc --apply

Exit status of run: the command's own; 128+N when it died of signal N;
125 when the sandbox could not be created; 126/127 when the command is not
executable / not found. Other commands: 0 ok, 1 check failed, 2 usage.
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.Quiet(cli.ExitUsage)
	}
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stdin, stdout, stderr, false)
	case "spec":
		return runCmd(ctx, args[1:], stdin, stdout, stderr, true)
	case "exec":
		return execCmd(ctx, args[1:], stdin, stdout, stderr)
	case "delete":
		return deleteCmd(args[1:], stdout, stderr)
	case "attach":
		return attachCmd(args[1:], stdin, stdout, stderr)
	case "logs":
		return logsCmd(ctx, args[1:], stdout, stderr)
	case "list":
		return listCmd(args[1:], stdout, stderr)
	case "status":
		return statusCmd(args[1:], stdout, stderr)
	case "gc":
		return gcCmd(args[1:], stdout, stderr)
	case "preflight":
		return preflightCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return cli.Usagef("unknown command %q; commands: run, spec, list, status, gc, preflight (see sandbox-supervisor --help)", args[0])
}

// requireRoot stops a command that needs root before it touches anything
// (the state directory, the operator's home policy): as another user the
// first error would be a permission denied deep inside.
func requireRoot(cmd string) error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("sandbox-supervisor %s needs root (running as uid %d): run it with sudo", cmd, uid)
	}
	return nil
}
