// Command finalizer-recover inspects and, on explicit approval, recovers a
// preserved task workspace whose unattended finalizer refused new files or
// was interrupted. It never runs the coding agent. See docs/finalizer.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/finalizer"
	"github.com/palisade-sandbox/palisade/pkg/termsafe"
)

const usage = `Usage:
  finalizer-recover inspect WORKSPACE [--remote URL] [--json]
  finalizer-recover [--stalled] WORKSPACE --evidence-id ID --remote URL
      [--approve-new-file PATH]... [--execute] [--json]
      [--gate-timeout 30m] [--record PATH] [--identity "Name <email>"]
      [--gate-sandbox PATH] [--gate-policy FILE | --unsandboxed-gates]

WORKSPACE holds mac-evidence.json, finalizer-progress.json and the
preserved repository (default WORKSPACE/repo).

inspect reads the workspace without changing anything and prints the plan:
preserved HEAD and prepared base, modified tracked files (would be
committed), new files (each needs --approve-new-file), evidence status, the
preserved test evidence that counts, and the mode (refused at new files, or
a stalled finalizer).

Without inspect, the same plan is checked against the request: the evidence
id must match, the evidence's remote_url must equal --remote exactly, every
new path must be approved exactly, and --stalled must be given exactly when
the finalizer was interrupted. Without --execute this is a dry run. With
--execute it commits the pending work with provenance trailers (in a
private mirror; the preserved checkout is not changed), fetches the
canonical branch from that URL, rebases onto it, reruns the contract and
verification commands from the evidence, pushes to the URL with
--force-with-lease=refs/heads/BRANCH:<fetched sha>, and writes the recovery
record (default WORKSPACE/finalizer-recovery.json).

--remote is the operator's word for where root pushes: the canonical remote
of this repository as your own records name it (the fleet configuration,
the task definition), never copied from the evidence or the plan, which the
agent wrote. A local remote (an absolute path or file:// URL) must also be
a bare repository outside every task workspace, below directories only root
can change, without worktrees/, commondir, alternates or symbolic links; the
push never checks a tree out there (receive.denyCurrentBranch=refuse).

Everything in WORKSPACE is the agent's and the tool usually runs as root:
git never runs in the workspace's .git (a private mirror holds copies of
its objects, index and HEAD), files are read without following symlinks
or blocking, and a symlink, FIFO, socket, device, hard link, commondir,
alternates or worktrees/ under .git (or in the working tree) is refused,
naming the path, before any git command runs. SIGTERM or SIGINT stops the
tool at any point.

The gate commands are repository code the agent wrote. They run in a
throwaway clone of the rebased commit, given to the sandbox user, inside
  sandbox-supervisor run --kind verify --workdir CLONE [--policy P] -- ARGV
(Landlock, seccomp, namespaces, the policy's unprivileged uid, no egress
under the bundled policy). This needs root. Without a usable
sandbox-supervisor the recovery is refused before anything runs; exit 125
from it refuses the recovery too. It never falls back to the host: only
--unsandboxed-gates runs the gates there, unconfined, with a warning, and
the record says "gates_sandboxed": false.

Flags:
  --json              machine output on stdout (inspect: the plan; otherwise
                      {"plan":…, "record":…|null, "executed":bool})
  --stalled           recover an interrupted finalizer
  --evidence-id ID    the original executor evidence id (required)
  --remote URL        the canonical remote recovery fetches from and pushes
                      to (required; optional for inspect); the evidence's
                      remote_url must equal it exactly
  --approve-new-file PATH
                      approve one new path, exactly as inspect lists it;
                      repeat for each
  --execute           do it (default: dry run)
  --gate-timeout D    timeout per gate command (default 30m)
  --record PATH       where to write the recovery record
  --identity "N <E>"  author/committer of the recovery commit and of rebased
                      commits (default "Palisade finalizer-recover
                      <finalizer-recover@palisade.invalid>")
  --gate-sandbox PATH sandbox-supervisor to run the gates in (default: the
                      one next to this executable, else on PATH)
  --gate-policy FILE  policy for the gate sandbox, passed as --policy
                      (default: the supervisor's own resolution:
                      MAC_OPENSHELL_POLICY, ~/.mac/openshell-policy.yaml,
                      the bundled default)
  --unsandboxed-gates run the gates ON THE HOST, unconfined, as this
                      process's user (explicit opt-in; warned and recorded)
  --log-format F      text or json logs on stderr

Exit status: 0 ok (recoverable / pushed), 1 refused or failed, 2 usage.

Examples:
  finalizer-recover inspect /srv/mac/tasks/task_b1828d67 --json
  finalizer-recover /srv/mac/tasks/task_b1828d67 --evidence-id ev_0001 \
      --remote git@git.example.com:org/app.git \
      --approve-new-file src/new.go --approve-new-file docs/added.md
  finalizer-recover /srv/mac/tasks/task_b1828d67 --evidence-id ev_0001 \
      --remote git@git.example.com:org/app.git \
      --approve-new-file src/new.go --approve-new-file docs/added.md --execute
  finalizer-recover --stalled /srv/mac/tasks/task_9f0e --evidence-id ev_0042 \
      --remote https://git.example.com/org/app.git --execute --json
  sudo finalizer-recover /srv/mac/tasks/task_b1828d67 --evidence-id ev_0001 \
      --remote /srv/git/app.git --approve-new-file src/new.go \
      --gate-sandbox /usr/local/bin/sandbox-supervisor \
      --gate-policy /etc/palisade/verify-policy.yaml --execute
  finalizer-recover /srv/mac/tasks/task_b1828d67 --evidence-id ev_0001 \
      --remote git@git.example.com:org/app.git \
      --approve-new-file src/new.go --unsandboxed-gates --execute
`

func main() {
	// SIGTERM or SIGINT cancels ctx, which kills a running git or gate
	// (every command runs under exec.CommandContext) and stops the
	// recovery; nothing reads the workspace in a way that can block. A
	// second signal terminates at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	cli.Exit("finalizer-recover", safeError(err), os.Stderr)
}

// safeError keeps err's exit status but escapes its message for the
// terminal: it can quote names and argv the agent chose (they are quoted
// already; this is the last line of defence).
func safeError(err error) error {
	var e *cli.Error
	if err == nil || (errors.As(err, &e) && e.Silent) {
		return err
	}
	return cli.WithCode(cli.Code(err), errors.New(termsafe.String(err.Error())))
}

// writeJSON is machine output: one JSON document on stdout, with every
// control, line-separator or bidi rune inside its strings escaped (the
// value is the same), since the plan quotes names the agent chose.
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	_, err := w.Write(termsafe.JSON(b.Bytes()))
	return err
}

// baseEnv is the environment handed to git and the gates; tests replace it.
var baseEnv = finalizer.DefaultEnv

var identityRE = regexp.MustCompile(`^([^<>\n]*[^<>\s])\s*<([^<>\s]+@[^<>\s]+)>$`)

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if cli.IsVersion(args) {
		return cli.PrintVersion(stdout, "finalizer-recover")
	}
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprint(stdout, usage)
		return nil
	}
	inspect := len(args) > 0 && args[0] == "inspect"
	if inspect {
		args = args[1:]
	}
	fs := flag.NewFlagSet("finalizer-recover", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "")
	logFormat := fs.String("log-format", "text", "")
	remote := fs.String("remote", "", "")
	var (
		stalled, execute, unsandboxed *bool
		evidenceID, record            *string
		identity                      *string
		gateSandbox, gatePolicy       *string
		gateTimeout                   *time.Duration
		approve                       []string
	)
	if !inspect {
		stalled = fs.Bool("stalled", false, "")
		execute = fs.Bool("execute", false, "")
		evidenceID = fs.String("evidence-id", "", "")
		record = fs.String("record", "", "")
		identity = fs.String("identity", "", "")
		gateTimeout = fs.Duration("gate-timeout", 30*time.Minute, "")
		gateSandbox = fs.String("gate-sandbox", "", "")
		gatePolicy = fs.String("gate-policy", "", "")
		unsandboxed = fs.Bool("unsandboxed-gates", false, "")
		fs.Func("approve-new-file", "", func(s string) error { approve = append(approve, s); return nil })
	}
	pos, err := cli.ParseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if err != nil {
		return cli.Usagef("%v; see finalizer-recover --help", err)
	}
	log, err := cli.NewLogger(*logFormat, stderr, slog.LevelInfo)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return cli.Usagef("want exactly one WORKSPACE argument, got %d; see finalizer-recover --help", len(pos))
	}
	ws := pos[0]
	opts := finalizer.Options{Env: baseEnv(), Remote: *remote}

	if inspect {
		plan, err := finalizer.Inspect(ctx, ws, opts)
		if err != nil {
			return cli.WithCode(cli.ExitFailed, err)
		}
		if err := printPlan(stdout, plan, *asJSON); err != nil {
			return err
		}
		if !plan.Recoverable {
			return cli.Failf("not recoverable: %s", strings.Join(plan.Refusals, "; "))
		}
		return nil
	}

	if *evidenceID == "" {
		return cli.Usagef("--evidence-id is required (the original executor evidence id; inspect shows it)")
	}
	if *remote == "" {
		return cli.Usagef("--remote URL is required: the canonical remote of this repository, as your own records name it (not copied from the evidence); recovery fetches from and pushes to it only, and only when the evidence's remote_url equals it")
	}
	if *gateTimeout <= 0 {
		return cli.Usagef("--gate-timeout %s: want a positive duration", *gateTimeout)
	}
	if *identity != "" {
		m := identityRE.FindStringSubmatch(*identity)
		if m == nil {
			return cli.Usagef("--identity %q: want \"Name <email>\"", *identity)
		}
		opts.Identity = finalizer.Identity{Name: m[1], Email: m[2]}
	}
	if *unsandboxed && (*gateSandbox != "" || *gatePolicy != "") {
		return cli.Usagef("--unsandboxed-gates cannot be combined with --gate-sandbox or --gate-policy")
	}
	opts.EvidenceID, opts.Stalled, opts.Approve = *evidenceID, *stalled, approve
	opts.Execute, opts.GateTimeout, opts.RecordPath = *execute, *gateTimeout, *record
	opts.GateSandbox, opts.GatePolicy, opts.UnsandboxedGates = *gateSandbox, *gatePolicy, *unsandboxed
	if *unsandboxed {
		log.Warn("--unsandboxed-gates: the contract and verification commands (repository code) run ON THE HOST, unconfined, as this process's user; the recovery record will say gates_sandboxed=false",
			"uid", os.Geteuid())
	}

	if *execute {
		log.Info("recovering workspace", "workspace", ws, "evidence_id", *evidenceID, "stalled", *stalled)
	}
	plan, rec, err := finalizer.Recover(ctx, ws, opts, stderr)
	if plan == nil {
		return cli.WithCode(cli.ExitFailed, err)
	}
	if *asJSON {
		out := struct {
			Plan     *finalizer.Plan   `json:"plan"`
			Record   *finalizer.Record `json:"record"`
			Executed bool              `json:"executed"`
		}{plan, rec, rec != nil}
		if jerr := writeJSON(stdout, out); jerr != nil {
			return jerr
		}
	} else if rec == nil {
		if perr := plan.WriteText(stdout); perr != nil {
			return perr
		}
	}
	var refused *finalizer.RefusedError
	switch {
	case errors.As(err, &refused):
		return cli.WithCode(cli.ExitFailed, err)
	case err != nil:
		if rec != nil {
			log.Error("recovery failed; nothing was pushed unless the record says so", "step", rec.FailedStep, "record", recordLocation(plan, opts))
		}
		return cli.WithCode(cli.ExitFailed, err)
	case rec == nil:
		log.Info("dry run: the plan is acceptable; add --execute to carry it out")
		return nil
	}
	log.Info("recovered", "pushed_commit", rec.PushedCommit, "remote", rec.Remote, "branch", rec.CanonicalBranch, "record", recordLocation(plan, opts))
	if !*asJSON {
		fmt.Fprintf(stdout, "pushed %s to %s/%s\n", rec.PushedCommit, rec.Remote, rec.CanonicalBranch)
	}
	return nil
}

func recordLocation(p *finalizer.Plan, opts finalizer.Options) string {
	if opts.RecordPath != "" {
		return opts.RecordPath
	}
	return p.Workspace + "/" + finalizer.RecordFile
}

func printPlan(w io.Writer, p *finalizer.Plan, asJSON bool) error {
	if asJSON {
		return writeJSON(w, p)
	}
	return p.WriteText(w)
}
