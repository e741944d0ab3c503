package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/fence"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/state"
)

func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(cli.FlagOutput(stderr))
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		cli.PrintFlags(stderr, fs)
	}
	return fs
}

// logFlags adds --log-format and --log-level to an admin command (the
// systemd units pass them to every command) and returns the logger
// builder to call after parsing.
func logFlags(fs *flag.FlagSet, stderr io.Writer) func() (*slog.Logger, error) {
	format := fs.String("log-format", "text", "stderr log format: text or json")
	level := fs.String("log-level", "info", "stderr log level: debug, info, warn or error")
	return func() (*slog.Logger, error) {
		var l slog.Level
		if err := l.UnmarshalText([]byte(*level)); err != nil {
			return nil, cli.Usagef("--log-level %q: want debug, info, warn or error", *level)
		}
		return cli.NewLogger(*format, stderr, l)
	}
}

// openStoreAsRoot opens the state root for cmd, which needs root.
func openStoreAsRoot(cmd, dir string) (*state.Store, error) {
	if err := requireRoot(cmd); err != nil {
		return nil, cli.Failf("%v", err)
	}
	return state.Open(dir)
}

// parseInterspersed parses flags before, between or after the positional
// arguments and returns those, with parseFlags's exit codes.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	pos, err := cli.ParseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, cli.Quiet(cli.ExitOK)
		}
		return nil, cli.Quiet(cli.ExitUsage)
	}
	return pos, nil
}

// parseName parses cmd's flags around exactly one sandbox NAME.
func parseName(fs *flag.FlagSet, cmd string, args []string) (string, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		fs.Usage()
		return "", cli.Usagef("%s: want exactly one sandbox NAME", cmd)
	}
	if err := state.ValidateName(pos[0]); err != nil {
		return "", cli.Usagef("%s: %v", cmd, err)
	}
	return pos[0], nil
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := cli.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cli.Quiet(cli.ExitOK)
		}
		return cli.Quiet(cli.ExitUsage)
	}
	return nil
}

const listUsage = `usage: sandbox-supervisor list [--json] [--state-dir DIR]

Lists the sandboxes recorded in the state directory.

Examples:
  sudo sandbox-supervisor list
  sudo sandbox-supervisor list --json | jq -r 'select(.kind=="task") | .name'

Flags:
`

func listCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("list", listUsage, stderr)
	asJSON := fs.Bool("json", false, "one JSON object per sandbox per line")
	dir := fs.String("state-dir", state.DefaultRoot, "state root")
	logger := logFlags(fs, stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return cli.Usagef("list: unexpected argument %q", fs.Arg(0))
	}
	if _, err := logger(); err != nil {
		return err
	}
	if err := requireRoot("list"); err != nil {
		return cli.Failf("%v", err)
	}
	store, err := state.Open(*dir)
	if err != nil {
		return err
	}
	ents, err := store.List()
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, e := range ents {
			if e.Err != nil {
				enc.Encode(map[string]string{"name": e.Name, "error": e.Err.Error()})
				continue
			}
			enc.Encode(store.Observed(e.Labels))
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSTATUS\tOWNER\tCREATED\tKEEP\tPOLICY")
	for _, e := range ents {
		if e.Err != nil {
			fmt.Fprintf(tw, "%s\t?\tunreadable\t\t\t\t%v\n", e.Name, e.Err)
			continue
		}
		l := store.Observed(e.Labels)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%.12s\n", l.Name, l.Kind, l.Status, l.Owner, l.Created.Format(time.RFC3339), l.Keep, l.PolicySHA256)
	}
	return tw.Flush()
}

const statusUsage = `usage: sandbox-supervisor status NAME [--json | --config] [--state-dir DIR]

Shows one sandbox's labels. Exit status 1 when it does not exist.
While it runs, each inspected endpoint of its network policy follows
with the last result the egress proxy observed for it (seed 004's tool
server connection status): policy_denied, credential_unavailable,
tls_or_network_failure, upstream_rejected (HTTP 400 or more),
http_response_received, or no_observed_exchange; with --json under
"endpoints". Each change is also an event (logs: "Endpoint Status").
--config prints the sandbox's full configuration instead, as JSON: the OCI
spec, the Landlock rules, whether seccomp is on and the filter's
instruction count (from init.conf in its state directory).

Examples:
  sudo sandbox-supervisor status task-42
  sudo sandbox-supervisor status task-42 --json | jq .policy_sha256
  sudo sandbox-supervisor status task-42 --config | jq .spec.mounts

Flags:
`

func statusCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusUsage, stderr)
	asJSON := fs.Bool("json", false, "print the labels as one JSON object")
	config := fs.Bool("config", false, "print the sandbox's configuration (spec, Landlock, seccomp) as JSON")
	dir := fs.String("state-dir", state.DefaultRoot, "state root")
	logger := logFlags(fs, stderr)
	// Accept the name before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if fs.NArg() != 0 || name == "" {
		fs.Usage()
		return cli.Usagef("status: want exactly one sandbox NAME")
	}
	if err := state.ValidateName(name); err != nil {
		return cli.Usagef("status: %v", err)
	}
	if *asJSON && *config {
		return cli.Usagef("status: --json and --config are mutually exclusive")
	}
	if _, err := logger(); err != nil {
		return err
	}
	store, err := openStoreAsRoot("status", *dir)
	if err != nil {
		return err
	}
	l, err := store.Get(name)
	if err != nil {
		return cli.Failf("status: %v", err)
	}
	l = store.Observed(l)
	if *config {
		sdir, err := store.Dir(name)
		if err != nil {
			return cli.Failf("status: %v", err)
		}
		p := filepath.Join(sdir, sandbox.ConfigFile)
		b, err := os.ReadFile(p)
		if err != nil {
			return cli.Failf("status: %s has no configuration yet: %v", name, err)
		}
		cfg, err := sandbox.DecodeConfig(b)
		if err != nil {
			return cli.Failf("status: %s: %v", p, err)
		}
		out := struct {
			*sandbox.InitConfig
			SeccompInstructions int `json:"seccomp_instructions"`
		}{cfg, len(cfg.SeccompFilter)}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	var eps []endpointStatus
	if l.Status == state.StatusRunning {
		if sdir, err := store.Dir(name); err == nil {
			if eps, err = proxyEndpoints(sdir); err != nil {
				fmt.Fprintf(stderr, "status: %v\n", err)
			}
		}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			state.Labels
			Endpoints []endpointStatus `json:"endpoints,omitempty"`
		}{l, eps})
	}
	fmt.Fprintf(stdout, "name:          %s\nid:            %s\nkind:          %s\nstatus:        %s\nowner:         %s\ncreated:       %s\nkeep:          %v\ncreator pid:   %d\nagent id:      %s\npolicy sha256: %s (%s)\ncgroup:        %s\n",
		l.Name, l.ID, l.Kind, l.Status, l.Owner, l.Created.Format(time.RFC3339), l.Keep, l.CreatorPID, l.AgentID, l.PolicySHA256, l.PolicySource, cgroupPath(l.Cgroup))
	if l.ExitCode != nil {
		fmt.Fprintf(stdout, "exit code:     %d\n", *l.ExitCode)
	}
	if l.Outcome != "" {
		fmt.Fprintf(stdout, "outcome:       %s (%s)\n", l.Outcome, l.Reason)
	}
	printEndpoints(stdout, eps)
	return nil
}

const gcUsage = `usage: sandbox-supervisor gc [--apply] [--stale-after DUR] [--include-kept NAME]... [--json] [--state-dir DIR]

Finds orphaned sandboxes (seed "sandbox-gc"): a sandbox is collected only
when it is older than the stale age, its creator process is dead, and it
is not marked keep. Every sandbox is listed with the reason it would be,
or was, collected or kept. Without --apply nothing is changed; --apply
kills what is left of it, removes its cgroup and network state, then its
state directory. Network fences that no sandbox state names any more
(the state directory is gone) are collected too, but only once their
network namespace is gone: such a row says "fence".

The stale age defaults to MAC_OPENSHELL_STALE_AFTER_SECONDS or 86400 s;
--stale-after 0s means "any age". --include-kept NAME (repeatable)
collects a sandbox kept with --keep, whatever its age; it is refused
while its creator or its init (its processes) still run.

Examples:
  sudo sandbox-supervisor gc
  sudo sandbox-supervisor gc --apply
  sudo sandbox-supervisor gc --stale-after 1h --json
  sudo sandbox-supervisor gc --apply --include-kept task-42

Flags:
`

func gcCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gc", gcUsage, stderr)
	apply := fs.Bool("apply", false, "collect (default: dry run)")
	asJSON := fs.Bool("json", false, "one JSON object per sandbox per line")
	staleFlag := fs.Duration("stale-after", 0, "minimum age; 0s: any age (default: MAC_OPENSHELL_STALE_AFTER_SECONDS or 24h)")
	var includeKept multiFlag
	fs.Var(&includeKept, "include-kept", "collect this kept sandbox too, whatever its age (repeatable; refused while its processes run)")
	dir := fs.String("state-dir", state.DefaultRoot, "state root")
	logger := logFlags(fs, stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return cli.Usagef("gc: unexpected argument %q", fs.Arg(0))
	}
	log, err := logger()
	if err != nil {
		return err
	}
	for _, n := range includeKept {
		if err := state.ValidateName(n); err != nil {
			return cli.Usagef("--include-kept: %v", err)
		}
	}
	stale, err := state.StaleAfterFromEnv(os.Getenv)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	staleSet := false
	fs.Visit(func(f *flag.Flag) { staleSet = staleSet || f.Name == "stale-after" })
	if staleSet {
		if *staleFlag < 0 {
			return cli.Usagef("--stale-after %s: must not be negative", *staleFlag)
		}
		stale = *staleFlag
	}
	if err := requireRoot("gc"); err != nil {
		return cli.Failf("%v", err)
	}
	store, err := state.Open(*dir)
	if err != nil {
		return err
	}
	plan, err := store.Plan(time.Now(), stale, includeKept...)
	if err != nil {
		return cli.Failf("gc: %v", err)
	}
	enc := json.NewEncoder(stdout)
	type row struct {
		Name    string `json:"name"`
		Collect bool   `json:"collect"`
		Reason  string `json:"reason"`
		Removed *bool  `json:"removed,omitempty"`
		Error   string `json:"error,omitempty"`
		Fence   bool   `json:"fence,omitempty"`
	}
	// Fences no sandbox state names: their state directory is gone (a
	// crash between the two removals, or a removed state root). Only
	// those whose network namespace is gone are listed and collected.
	owned := map[string]bool{}
	for _, d := range plan.Decisions {
		owned[d.Name] = true
	}
	fences := func(apply bool) error {
		names, err := fence.Config{}.CollectOrphans(context.Background(), func(n string) bool { return owned[n] }, apply)
		verb := "collect fence"
		if apply {
			verb = "removed fence"
		}
		for _, n := range names {
			if *asJSON {
				removed := apply
				r := row{Name: n, Collect: true, Reason: orphanFenceReason, Fence: true}
				if apply {
					r.Removed = &removed
				}
				enc.Encode(r)
			} else {
				fmt.Fprintf(stdout, "%s %s: %s\n", verb, n, orphanFenceReason)
			}
		}
		return err
	}
	if !*apply {
		for _, d := range plan.Decisions {
			verb := "keep   "
			if d.Collect {
				verb = "collect"
			}
			if *asJSON {
				enc.Encode(row{Name: d.Name, Collect: d.Collect, Reason: d.Reason})
			} else {
				fmt.Fprintf(stdout, "%s %s: %s\n", verb, d.Name, d.Reason)
			}
		}
		if err := fences(false); err != nil {
			log.Warn("gc: fences", "err", err)
		}
		if !*asJSON {
			fmt.Fprintln(stdout, "dry run: nothing changed; add --apply to collect")
		}
		return nil
	}
	outs, err := store.Apply(plan, sandbox.Collect)
	err = errors.Join(err, fences(true))
	for _, d := range plan.Decisions {
		if d.Collect {
			continue
		}
		if *asJSON {
			enc.Encode(row{Name: d.Name, Reason: d.Reason})
		} else {
			fmt.Fprintf(stdout, "keep    %s: %s\n", d.Name, d.Reason)
		}
	}
	for _, o := range outs {
		removed := o.Removed
		r := row{Name: o.Name, Collect: true, Reason: o.Reason, Removed: &removed}
		if o.Err != nil {
			r.Error = o.Err.Error()
		}
		if *asJSON {
			enc.Encode(r)
		} else if o.Err != nil {
			fmt.Fprintf(stdout, "failed  %s: %v\n", o.Name, o.Err)
		} else if o.Removed {
			fmt.Fprintf(stdout, "removed %s: %s\n", o.Name, o.Reason)
		} else {
			fmt.Fprintf(stdout, "keep    %s: %s\n", o.Name, o.Reason)
		}
	}
	if err != nil {
		log.Error("gc: some sandboxes were not collected; a later gc retries", "err", err)
		return cli.Failf("gc: %v", err)
	}
	return nil
}

// orphanFenceReason is gc's reason for a fence no sandbox state names.
const orphanFenceReason = "no sandbox state names it and its network namespace is gone (host table, veth and address record)"

const preflightUsage = `usage: sandbox-supervisor preflight [--json]

Probes every kernel feature the sandbox uses and prints one typed result
per feature, naming the minimum kernel, then the Landlock ABI, rights and
scopes a sandbox gets and whether its refused file accesses can be
reported (audit: enabled while sandboxes run, read-only under an audit
daemon, or unavailable — never a reason to refuse a sandbox). Exit
status 1 when a confinement feature is missing.

Examples:
  sudo sandbox-supervisor preflight
  sudo sandbox-supervisor preflight --json | jq -c '.features[] | select(.ok|not)'

Flags:
`

func preflightCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("preflight", preflightUsage, stderr)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return cli.Usagef("preflight: unexpected argument %q", fs.Arg(0))
	}
	pf := sandbox.RunPreflight(probe)
	var missing []string
	for _, r := range pf.Results {
		if !r.OK && r.Confinement {
			missing = append(missing, r.Name)
		}
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(pf); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FEATURE\tSTATUS\tMIN KERNEL\tDETAIL")
		for _, r := range pf.Results {
			st := "ok"
			if !r.OK {
				st = "MISSING"
				if !r.Confinement {
					st = "missing (optional)"
				}
			}
			detail := r.Detail
			if r.Name == "landlock" && r.OK {
				detail = fmt.Sprintf("ABI %d", pf.LandlockABI)
				if l := pf.Landlock; l != nil && l.Logging != "" {
					detail += ", denials logged (" + l.Logging + ")"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, st, r.MinKernel, detail)
		}
		tw.Flush()
		if l := pf.Landlock; l != nil {
			fmt.Fprintf(stdout, "\nlandlock ABI %d in force:\n  rights: %s\n  scopes: %s\n", l.ABI, strings.Trim(l.Handled, "{}"), strings.Trim(l.Scopes, "{}"))
		}
		fmt.Fprintf(stdout, "filesystem denial events: %s\n", pf.Audit)
	}
	if len(missing) > 0 {
		return cli.Failf("preflight: missing confinement features: %s", strings.Join(missing, ", "))
	}
	return nil
}

// cgroupPath is how the docs name a sandbox's cgroup: palisade/<name>.
func cgroupPath(name string) string {
	if name == "" {
		return ""
	}
	return cgroup.ParentName + "/" + name
}
