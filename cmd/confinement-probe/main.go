// Command confinement-probe proves, from inside a throwaway sandbox, that
// the filesystem, egress, privilege, seccomp, user-namespace and
// raw-socket boundaries hold. It prints one JSON object per check and
// then CONFINEMENT_PROBE_OK only when every check passed, else
// CONFINEMENT_PROBE_FAILED (exit 1); with --log the same lines are
// appended to that file (bootstrap names seed 000's
// live-confinement-probe.log), and without it nothing is written.
//
// `confinement-probe route` is the in-sandbox route proof's classifier: it
// runs a coding CLI's probe command and emits the
// mac.coding_agent.verification.v1 record with its failure_class.
//
// The binary also serves as helper children of its own checks: started
// with the hidden first argument probe.HelperCommand it runs that helper
// and nothing else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/probe"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == probe.HelperCommand {
		os.Exit(probe.RunHelper(os.Args[2]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cli.Exit("confinement-probe", run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr), os.Stderr)
}

// DefaultLog is seed 000's probe log, relative to $HOME: bootstrap and
// the systemd unit name it with --log; the probe writes no log unless
// told where.
const DefaultLog = ".mac/openshell/live-confinement-probe.log"

const usage = `usage: confinement-probe [flags]
       confinement-probe --inside [target flags]
       confinement-probe route --cli NAME --sentinel S [--timeout DUR] -- CMD [ARG...]

Without --inside: starts a throwaway sandbox (kind probe) through
sandbox-supervisor (next to this binary, or --supervisor-bin) with the
policy a real sandbox would get (--policy, else $MAC_OPENSHELL_POLICY, else
~/.mac/openshell-policy.yaml, else the bundled fail-closed default), runs
the checks inside it and prints one JSON object per check
({"check","group","expected","observed","ok"}), then CONFINEMENT_PROBE_OK
when every check passed, else CONFINEMENT_PROBE_FAILED and exit 1. With
--log the same lines are appended to that file (created 0600); without
it nothing is written anywhere. Seed 000's bootstrap reads
~/.mac/openshell/live-confinement-probe.log, so bootstrap and the systemd
unit pass that path. A policy without network entries gets
one canary entry (a reserved name for a binary that does not exist) so
the fence and proxy exist and their denials can be proven.

--inside runs the checks in this process, inside a sandbox that already
exists.

Groups: filesystem, egress, privilege, seccomp, user-namespace, raw-socket.
Must run as root (it creates a sandbox).

Flags:
`

const examples = `
Examples:
  sudo confinement-probe
  sudo confinement-probe --policy /etc/mac/openshell-policy.yaml --json
  sudo confinement-probe --log ~/.mac/openshell/live-confinement-probe.log
  sudo sandbox-supervisor run -- ./confinement-probe --inside
  confinement-probe route --cli opencode --sentinel PALISADE-7f3a -- \
      sandbox-supervisor run --kind probe -- opencode run "echo PALISADE-7f3a"

Exit status: 0 every check passed, 1 a check failed (or the sandbox could
not be created), 2 usage error.
`

type flags struct {
	policy, supervisor, stateDir, logPath, logFormat string
	// logFile is --log /dev/fd/N, taken before this process opens a
	// descriptor of its own (a later N could be one of its own).
	logFile      *os.File
	inside, json bool
	timeout      time.Duration
	targets      probe.Targets
	protected    string
}

// flagSet declares the probe's flags into f; its usage goes to w.
func flagSet(f *flags, w io.Writer) *flag.FlagSet {
	def := probe.DefaultTargets()
	fs := flag.NewFlagSet("confinement-probe", flag.ContinueOnError)
	fs.SetOutput(cli.FlagOutput(w))
	fs.Usage = func() {
		fmt.Fprint(w, usage)
		cli.PrintFlags(w, fs)
		fmt.Fprint(w, examples)
	}
	fs.StringVar(&f.policy, "policy", "", "policy file (overrides MAC_OPENSHELL_POLICY)")
	fs.StringVar(&f.supervisor, "supervisor-bin", "", "sandbox-supervisor binary (default: next to this binary)")
	fs.StringVar(&f.stateDir, "state-dir", "", "sandbox-supervisor --state-dir (default: its own)")
	fs.StringVar(&f.logPath, "log", "", "append the check lines and the verdict to this file, or /dev/fd/N (default: no log; bootstrap and the systemd unit pass ~/"+DefaultLog+")")
	fs.StringVar(&f.logFormat, "log-format", "text", "stderr log format: text or json")
	fs.BoolVar(&f.json, "json", false, "print one summary JSON object instead of the check lines")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "bound on the whole sandbox run")
	fs.BoolVar(&f.inside, "inside", false, "run the checks in this process (inside an existing sandbox)")
	fs.StringVar(&f.protected, "protected", strings.Join(def.Protected, ","), "--inside: comma list of directories outside the policy")
	fs.StringVar(&f.targets.WritableOutside, "writable-outside", def.WritableOutside, "--inside: a world-writable directory outside the policy (\"\": none)")
	fs.StringVar(&f.targets.ReadOnly, "read-only-path", def.ReadOnly, "--inside: a directory the policy grants read-only")
	fs.StringVar(&f.targets.Writable, "writable", "", "--inside: a directory the policy grants read-write (default: the working directory)")
	return fs
}

func parse(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flagSet(f, stderr)
	if err := cli.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, cli.Quiet(cli.ExitOK)
		}
		return nil, cli.Quiet(cli.ExitUsage)
	}
	if fs.NArg() > 0 {
		return nil, cli.Usagef("unexpected argument %q (route takes its command after --)", fs.Arg(0))
	}
	if f.protected != "" {
		f.targets.Protected = strings.Split(f.protected, ",")
	}
	if f.timeout <= 0 {
		return nil, cli.Usagef("--timeout %s: must be positive", f.timeout)
	}
	if fd, ok := ocsf.FDDest(f.logPath); ok {
		lf, err := ocsf.InheritedFile(f.logPath, fd)
		if err != nil {
			return nil, cli.Usagef("--log: %v", err)
		}
		f.logFile = lf
	}
	return f, nil
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if cli.IsVersion(args) {
		return cli.PrintVersion(stdout, "confinement-probe")
	}
	if len(args) > 0 && args[0] == "route" {
		return routeCmd(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") && len(args) == 1 {
		flagSet(&flags{}, stdout).Usage()
		return nil
	}
	f, err := parse(args, stderr)
	if err != nil {
		return err
	}
	logger, err := cli.NewLogger(f.logFormat, stderr, 0)
	if err != nil {
		return err
	}
	var v probe.Verdict
	var info *probe.Launched
	if f.inside {
		v = probe.Evaluate(probe.Catalog(), probe.Run(f.targets), "")
	} else {
		var l probe.Launched
		v, l, err = probe.Launch(ctx, probe.LaunchOptions{
			Policy: f.policy, Supervisor: f.supervisor, StateDir: f.stateDir,
			Timeout: f.timeout, Stderr: stderr, LogFormat: f.logFormat,
		})
		if err != nil {
			// Nothing ran: still leave the failed verdict in the log, so it
			// never ends with an earlier run's OK.
			v = probe.Evaluate(probe.Catalog(), nil, err.Error())
			if lerr := appendLog(f.logPath, f.logFile, v, nil); lerr != nil {
				logger.Error("probe log", "path", f.logPath, "err", lerr)
			}
			return cli.Failf("%s: %v", probe.FailedLine, err)
		}
		info = &l
		logger.Info("probe sandbox finished", "sandbox", l.Sandbox, "policy_source", l.PolicySource,
			"policy", l.PolicyPath, "policy_sha256", l.PolicySHA256, "canary_network_entry", l.Canary)
	}
	if err := appendLog(f.logPath, f.logFile, v, info); err != nil {
		// The log is what bootstrap trusts: failing to write it is a failure.
		v.Write(stdout)
		return cli.Failf("probe log %s: %v", f.logPath, err)
	}
	if f.json {
		if err := cli.WriteJSON(stdout, summary{Verdict: v, Launched: info}); err != nil {
			return err
		}
	} else if err := v.Write(stdout); err != nil {
		return err
	}
	if !v.OK {
		for _, name := range v.Failed {
			logger.Error("check failed", "check", name)
		}
		return cli.Quiet(cli.ExitFailed)
	}
	return nil
}

type summary struct {
	probe.Verdict
	Launched *probe.Launched `json:"sandbox,omitempty"`
}

// appendLog appends a header object, the check lines and the verdict to
// path (created 0600 in a 0700 directory), or to claimed, the inherited
// /dev/fd/N (a pipe, socket or regular file the caller opened); "" writes
// nothing.
func appendLog(path string, claimed *os.File, v probe.Verdict, info *probe.Launched) error {
	if path == "" {
		return nil
	}
	fh := claimed
	if fh == nil {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		fh = f
	}
	hdr := struct {
		Run      string          `json:"probe_run"`
		Launched *probe.Launched `json:"sandbox,omitempty"`
	}{time.Now().UTC().Format(time.RFC3339), info}
	if err := cli.WriteJSON(fh, hdr); err != nil {
		fh.Close()
		return err
	}
	if err := v.Write(fh); err != nil {
		fh.Close()
		return err
	}
	if fi, err := fh.Stat(); err == nil && fi.Mode().IsRegular() {
		// Only a file can be synced (a pipe or socket says EINVAL).
		if err := fh.Sync(); err != nil {
			fh.Close()
			return err
		}
	}
	return fh.Close()
}
