// Command palisade-init is the sandbox's init: PID 1 of every sandbox's
// namespaces. sandbox-supervisor opens it from beside its own binary
// before it creates anything, checks that root owns it and nobody else
// can write it, and starts it through that descriptor; the init then
// takes its configuration on the control socket, applies the mounts,
// confines its spawning thread (Landlock, seccomp, the verified drop),
// starts the command, reaps, forwards signals and reports the command's
// status (package sandbox, RunInit).
//
// It is a binary of its own so that its start, on the critical path of
// every sandbox start, runs none of the package initialisation the
// supervisor needs and the init does not (policy YAML, DNS, HTTP): it
// links package sandbox and what that needs, a third of the
// supervisor's size. Run by hand it only prints its help.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
)

const usage = `Usage:
  palisade-init --version

palisade-init is the in-sandbox init. sandbox-supervisor starts it, from
the directory of its own binary (make install puts both there), as PID 1
of each sandbox it creates, with the control socket on descriptor 3 and
the hidden argument ` + sandbox.InitCommand + `. It is not run by hand.
sandbox-supervisor refuses to create a sandbox when it is missing, not a
regular file, not owned by root, or writable by group or others (so no
sandbox user can replace it), naming the path.

Exit status: the sandboxed command's status when started by the
supervisor (125 when the sandbox could not be set up); 0 for --version
and --help; 2 for anything else.

Examples:
  palisade-init --version
  ls -l "$(dirname "$(command -v sandbox-supervisor)")/palisade-init"
`

func main() {
	args := os.Args[1:]
	if len(args) == 1 && args[0] == sandbox.InitCommand {
		sandbox.RunInit() // never returns
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case cli.IsVersion(args):
		if err := cli.PrintVersion(stdout, "palisade-init"); err != nil {
			return 1
		}
		return 0
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprint(stderr, "palisade-init: the sandbox's init, started by sandbox-supervisor only\n\n"+usage)
	return 2
}
