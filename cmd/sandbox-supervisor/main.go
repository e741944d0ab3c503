// Command sandbox-supervisor creates a named sandbox from the resolved
// policy and runs one command in it: namespaces, cgroup limits, private
// mounts, Landlock, seccomp and a verified privilege drop. It reaps,
// forwards signals, relays a PTY or pipes, reports the command's exit
// status, and emits OCSF events. `list`, `status`, `gc`, `preflight` and
// `spec` inspect and maintain sandboxes.
//
// The in-sandbox init is a binary of its own, palisade-init, which run
// finds beside this one (sandbox.DefaultInitExe) and refuses to start
// unless root owns it and nobody else can write it.
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGPIPE)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	sandbox.RestoreTerminals()
	cli.Exit("sandbox-supervisor", err, os.Stderr)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return cli.Quiet(cli.ExitUsage)
	}
	switch {
	case cli.IsVersion(args):
		return cli.PrintVersion(stdout, "sandbox-supervisor")
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		printUsage(stdout)
		return nil
	}
	for _, c := range commands {
		if c.Name == args[0] {
			return c.run(ctx, args[1:], stdin, stdout, stderr)
		}
	}
	return cli.UnknownCommand("sandbox-supervisor", args[0], table())
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
