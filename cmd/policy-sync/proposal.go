package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policysync"
	"github.com/palisade-sandbox/palisade/pkg/proposal"
)

// maxEventLine bounds one event line read by propose; longer lines are
// skipped (no producer writes them).
const maxEventLine = 1 << 20

var proposeCmd = &command{
	name:    "propose",
	summary: "turn a run's denials into the smallest policy change that allows them",
	usage: `propose --events FILE|- [--since DUR] [--sandbox NAME] [--policy FILE] [--ceiling FILE] [-o OUT] [--event-log FILE]

Reads OCSF events (the supervisor's --events file, the egress proxy's, or
"-" for stdin), folds their denials by sandbox, binary and destination or
path (network: CONNECT, forwarded and native TCP; L7: method and path;
policy DNS refusals; Landlock filesystem denials), decides each again
against the base policy (--policy, else the resolved policy, as resolve
shows), and prints a proposal: patch operations, each with the denials it
answers (count, first and last seen), and the denials no operation
answers, with why. Apply it with apply-proposal.

A proposal is minimal (docs/policy.md, "Proposals"): exact hosts, ports,
paths and rules; a host pattern *.parent only for 3 or more names one
label under the same parent; never a binary under a writable path; a
filesystem grant on the denied file, or for rights on a directory on that
directory, never above; L7 rules only added to endpoints with rules
(presets and deny rules are never rewritten); nothing beyond the host's
ceiling (--ceiling). The same events and base give the same bytes.

An OCSF Device Config State Change (Policy Proposal, generated) goes to
stderr as one JSON line and to --event-log when given.

Exit status: 0 proposal written (possibly empty), 1 error, 2 usage error.`,
	examples: `  sudo policy-sync propose --events /var/log/palisade/events.jsonl --sandbox task-42 > proposal.yaml
  sandbox-supervisor logs --json task-42 | policy-sync propose --events - --since 1h --policy ./policy.yaml
  policy-sync propose --events events.jsonl --policy policy.yaml --ceiling /etc/palisade/ceiling.yaml -o proposal.yaml
`,
	flags: func(fs *flag.FlagSet) func(context.Context, *app, []string) error {
		events := fs.String("events", "", "OCSF events to read (JSONL file, or - for stdin) (required)")
		since := fs.Duration("since", 0, "only denials last seen within DUR (e.g. 30m)")
		sandbox := fs.String("sandbox", "", "only this sandbox's denials (its name)")
		pol := fs.String("policy", "", "base policy (default: the resolved policy, as resolve)")
		out := fs.String("o", "", "write the proposal to this file (atomically, mode 0600) instead of stdout")
		eventLog := fs.String("event-log", "", "also append the Policy Proposal event to this file or /dev/fd/N")
		ceilingPath := ceilingFlag(fs)
		return func(_ context.Context, a *app, args []string) error {
			if len(args) != 0 {
				return cli.Usagef("propose: unexpected arguments %q", args)
			}
			if *events == "" {
				return cli.Usagef("propose: --events is required")
			}
			if *since < 0 {
				return cli.Usagef("propose: --since %v: must not be negative", *since)
			}
			agg := &proposal.Aggregator{Filter: proposal.Filter{Sandbox: *sandbox}}
			if *since > 0 {
				agg.Filter.Since = time.Now().Add(-*since)
			}
			return runPropose(a, agg, proposeArgs{events: *events, policy: *pol, out: *out, eventLog: *eventLog, ceiling: *ceilingPath, sandbox: *sandbox})
		}
	},
}

type proposeArgs struct {
	events, policy, out, eventLog, ceiling, sandbox string
}

func runPropose(a *app, agg *proposal.Aggregator, x proposeArgs) error {
	r, err := policy.Resolve(policy.ResolveOptions{Flag: x.policy, Getenv: a.getenv})
	if err != nil {
		return cli.WithCode(cli.ExitFailed, err)
	}
	c, err := ceiling.Find(x.ceiling, a.getenv)
	if err != nil {
		return cli.Failf("propose: %v", err)
	}
	if err := readEvents(a, x.events, agg); err != nil {
		return cli.Failf("propose: --events %s: %v", x.events, err)
	}
	denials := agg.Denials()
	opts := proposal.Options{BasePath: r.Path}
	if c != nil {
		opts.Ceiling = c.Check
		opts.CeilingRef = &proposal.Ref{Path: c.Path, Checksum: c.Checksum}
	}
	p, err := proposal.Propose(r.Policy, denials, opts)
	if err != nil {
		return cli.Failf("propose: %v", err)
	}
	if err := writeOutput(a, x.out, p.Marshal()); err != nil {
		return cli.Failf("propose: -o: %v", err)
	}
	groups, n := p.Answered()
	info := ocsf.ProposalInfo{Stage: ocsf.ProposalGenerated, Base: baseRef(r.Path, r.Policy, string(r.Source)), ResultSHA256: p.Result,
		File: x.out, Operations: len(p.Patch), Answered: n, Unanswered: len(p.Unanswered)}
	ev := proposalSource(x.sandbox, denials).PolicyProposal(info, nil)
	if err := emitProposalEvent(a, x.eventLog, ev); err != nil {
		return cli.Failf("propose: --event-log: %v", err)
	}
	a.log.Info("policy proposal", "base", r.Path, "events", agg.Events(), "operations", len(p.Patch), "answered_groups", groups, "unanswered_groups", len(p.Unanswered))
	return nil
}

// readEvents feeds every line of the events file (or stdin) to agg.
func readEvents(a *app, name string, agg *proposal.Aggregator) error {
	var in io.Reader = a.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			// Longer than any event: skip to the end of the line.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			continue
		case err != nil && !errors.Is(err, io.EOF):
			return err
		}
		if len(bytes.TrimSpace(line)) > 0 && len(line) <= maxEventLine {
			agg.Add(line)
		}
		if err != nil {
			return nil
		}
	}
}

// proposalSource is the OCSF source of proposal events: the sandbox the
// denials came from when there is one.
func proposalSource(sandbox string, ds []proposal.Denial) *ocsf.Source {
	if sandbox == "" {
		for i, d := range ds {
			if i > 0 && d.Sandbox != sandbox {
				sandbox = ""
				break
			}
			sandbox = d.Sandbox
		}
	}
	if sandbox == "" {
		sandbox = "host"
	}
	return ocsf.NewSource(sandbox, prog, cli.ReadBuildInfo(prog).Version)
}

func baseRef(path string, p *policy.Policy, source string) ocsf.PolicyRef {
	name := "bundled default"
	if path != "" {
		name = filepath.Base(path)
	}
	return ocsf.PolicyRef{Name: name, Path: path, SHA256: p.Checksum(), Version: "1", Source: source}
}

// emitProposalEvent writes the event as one JSON line on stderr and
// appends it to eventLog when given.
func emitProposalEvent(a *app, eventLog string, ev ocsf.Event) error {
	line, err := ocsf.Marshal(ev)
	if err != nil {
		return err
	}
	a.stderr.Write(append(line, '\n'))
	if eventLog == "" {
		return nil
	}
	if eventLog == "-" {
		return errors.New("- would mix the event into stdout; name a file or /dev/fd/N")
	}
	w, err := ocsf.OpenDest(eventLog, nil)
	if err != nil {
		return err
	}
	defer w.Close()
	return w.WriteLine(line)
}

var applyProposalCmd = &command{
	name:    "apply-proposal",
	summary: "install a reviewed proposal's policy (only with --approve, only within the ceiling)",
	usage: `apply-proposal FILE --approve [--policy FILE] [--ceiling FILE] [--event-log FILE]
       apply-proposal FILE --dry-run [--policy FILE] [--ceiling FILE]

Replays the proposal FILE (from propose) on the policy a new sandbox would
use (--policy, else $MAC_OPENSHELL_POLICY, else ~/.mac/openshell-policy.yaml;
with only the bundled default in force, the result goes to
~/.mac/openshell-policy.yaml), and installs the result the way the hub
install does (write-then-rename, mode 0600, ~/.mac created 0700), as
normalised YAML (comments are not kept). Refused, with nothing written:
a policy whose canonical checksum is not the proposal's base (it changed
since the proposal was made: propose again), a patch whose result is not
the recorded result_checksum (the proposal was edited), a result that is
not a valid policy, and one beyond the host's ceiling (--ceiling).
Running sandboxes keep their policy; their egress proxies reload it.

--dry-run makes every check and prints the resulting policy on stdout
without writing. An OCSF Device Config State Change (Policy Proposal,
approved or refused) goes to stderr and to --event-log when given.

Exit status: 0 installed (or the dry run passed), 1 refused or failed,
2 usage error (neither --approve nor --dry-run).`,
	examples: `  policy-sync propose --events events.jsonl --sandbox task-42 -o proposal.yaml
  less proposal.yaml
  policy-sync apply-proposal proposal.yaml --dry-run | diff ~/.mac/openshell-policy.yaml -
  policy-sync apply-proposal proposal.yaml --approve --event-log /var/log/palisade/events.jsonl
`,
	flags: func(fs *flag.FlagSet) func(context.Context, *app, []string) error {
		approve := fs.Bool("approve", false, "install the result (the operator reviewed the proposal)")
		dryRun := fs.Bool("dry-run", false, "check everything and print the result without installing it")
		pol := fs.String("policy", "", "the policy to change (default: the resolved policy)")
		eventLog := fs.String("event-log", "", "also append the Policy Proposal event to this file or /dev/fd/N")
		ceilingPath := ceilingFlag(fs)
		return func(_ context.Context, a *app, args []string) error {
			if len(args) != 1 {
				return cli.Usagef("apply-proposal: want exactly one proposal FILE, got %d arguments", len(args))
			}
			if *approve == *dryRun {
				return cli.Usagef("apply-proposal: give --approve (install) or --dry-run (check only), not both or neither")
			}
			return runApply(a, applyArgs{file: args[0], policy: *pol, eventLog: *eventLog, ceiling: *ceilingPath, dryRun: *dryRun})
		}
	},
}

type applyArgs struct {
	file, policy, eventLog, ceiling string
	dryRun                          bool
}

func runApply(a *app, x applyArgs) error {
	r, err := policy.Resolve(policy.ResolveOptions{Flag: x.policy, Getenv: a.getenv})
	if err != nil {
		return cli.WithCode(cli.ExitFailed, err)
	}
	target := r.Path
	if r.Source == policy.SourceBundled {
		home := a.getenv("HOME")
		if home == "" {
			return cli.Failf("apply-proposal: only the bundled default is in force and HOME is unset: nowhere to install (give --policy)")
		}
		target = filepath.Join(home, policy.HomePolicyPath)
	}
	info := ocsf.ProposalInfo{Stage: ocsf.ProposalRefused, Base: baseRef(target, r.Policy, string(r.Source)), File: x.file}
	src := ocsf.NewSource("host", prog, cli.ReadBuildInfo(prog).Version)
	refuse := func(err error) error {
		if !x.dryRun {
			if eerr := emitProposalEvent(a, x.eventLog, src.PolicyProposal(info, err)); eerr != nil {
				a.log.Error("proposal event not written", "error", eerr)
			}
		}
		return cli.Failf("apply-proposal: %s: %v", x.file, err)
	}
	data, err := readCapped(x.file, proposal.MaxSize)
	if err != nil {
		return refuse(err)
	}
	p, err := proposal.Parse(data)
	if err != nil {
		return refuse(err)
	}
	src = proposalSource("", answeredDenials(p))
	g, n := p.Answered()
	info.ResultSHA256, info.Operations, info.Answered, info.Unanswered = p.Result, len(p.Patch), n, len(p.Unanswered)
	out, err := p.Apply(r.Policy)
	if err != nil {
		return refuse(err)
	}
	if err := a.ceilingCheck(x.ceiling, out); err != nil {
		return refuse(err)
	}
	text := out.YAML()
	if x.dryRun {
		_, err := a.stdout.Write(text)
		return err
	}
	if err := policysync.Install(target, text); err != nil {
		return refuse(err)
	}
	info.Stage = ocsf.ProposalApproved
	if err := emitProposalEvent(a, x.eventLog, src.PolicyProposal(info, nil)); err != nil {
		return cli.Failf("apply-proposal: installed %s, but the event was not written: %v", target, err)
	}
	a.log.Info("policy proposal approved", "policy", target, "sha256", out.Checksum(), "was", r.Policy.Checksum(), "operations", len(p.Patch), "answered_groups", g)
	return nil
}

func answeredDenials(p *proposal.Proposal) []proposal.Denial {
	var out []proposal.Denial
	for _, op := range p.Patch {
		out = append(out, op.Answers...)
	}
	return out
}
