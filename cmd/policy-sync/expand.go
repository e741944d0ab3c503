package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/egress"
	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

var expandCmd = &command{
	name:    "expand",
	summary: "widen one task's policy with its package registries (per-task egress)",
	usage: `expand --base P --repo DIR [--task-metadata F] [--trusted-registries F] [-o OUT] [--events FILE]

Derives candidate registry hosts from the repository working tree DIR
(.npmrc, package-lock.json, npm-shrinkwrap.json, yarn.lock, pnpm-lock.yaml,
requirements*.txt, uv.lock, poetry.lock) and grants them in two tiers:
derived_trusted_registry when the host exactly matches the trusted registry
list (built in: registry.npmjs.org, registry.yarnpkg.com, pypi.org,
files.pythonhosted.org; --trusted-registries F, one host per line,
REPLACES it), and hub_declared for well-formed hosts in the task document's
top-level metadata.egress_contract.hosts (--task-metadata, JSON). Every
other host is refused and reported as a contract gap.

Grants are appended to the base policy P as new network_policies entries
(task_egress_*): protocol rest, access read-only, port 443, host-scoped,
for the package managers' binaries. Base entries, filesystem_policy,
landlock and process are never changed. A base with empty
network_policies (the bundled fail-closed default) is never expanded. An
expansion beyond the host's policy ceiling (--ceiling) is dropped, and a
base beyond it is an error. On any error the output is the base policy,
byte for byte.

The result goes to stdout, or to OUT atomically with mode 0600. Every run
prints one sandbox_egress_decision JSON event (grants, refusals, checksums)
as one line on stderr, and appends it to --events FILE when given.

The supervisor expands only when MAC_OPENSHELL_TASK_EGRESS=1; this command,
invoked explicitly, always runs.

Exit status: 0 output written (expanded, or nothing to grant); 1 error or
refused base (the output, if any, is the base unchanged); 2 usage error.`,
	examples: `  policy-sync expand --base ~/.mac/openshell-policy.yaml --repo /work/task-123 -o /run/task-123/policy.yaml
  policy-sync expand --base /etc/mac/openshell-policy.yaml --repo . --task-metadata task.json \
      --events /var/log/palisade/egress-decisions.jsonl > task-policy.yaml
  policy-sync expand --base fleet.yaml --repo . --trusted-registries /etc/mac/trusted-registries.txt \
      -o task.yaml 2> >(grep sandbox_egress_decision | jq .refusals)
`,
	flags: func(fs *flag.FlagSet) func(context.Context, *app, []string) error {
		base := fs.String("base", "", "base policy file (required)")
		repo := fs.String("repo", "", "repository working tree to derive hosts from (required; untrusted)")
		meta := fs.String("task-metadata", "", "task document (JSON) whose metadata.egress_contract.hosts the hub declared")
		trusted := fs.String("trusted-registries", "", "file of trusted registry hosts, one per line; replaces the built-in list")
		out := fs.String("o", "", "write the policy to this file (atomically, mode 0600) instead of stdout")
		events := fs.String("events", "", "append the sandbox_egress_decision event to this file (JSONL; never through a symlink) or to an inherited /dev/fd/N")
		ceilingPath := ceilingFlag(fs)
		return func(_ context.Context, a *app, args []string) error {
			if len(args) != 0 {
				return cli.Usagef("expand: unexpected arguments %q", args)
			}
			if *base == "" {
				return cli.Usagef("expand: --base is required")
			}
			if *repo == "" {
				return cli.Usagef("expand: --repo is required")
			}
			return runExpand(a, expandArgs{base: *base, repo: *repo, meta: *meta, trusted: *trusted, out: *out, events: *events, ceiling: *ceilingPath})
		}
	},
}

type expandArgs struct {
	base, repo, meta, trusted, out, events, ceiling string
}

func runExpand(a *app, x expandArgs) error {
	var eventsFile *ocsf.Writer
	if x.events != "" {
		// A file (appended, never through a symlink) or /dev/fd/N; not
		// "-": stdout carries the policy.
		if x.events == "-" {
			return cli.Usagef("expand: --events -: stdout carries the policy; name a file or /dev/fd/N")
		}
		w, err := ocsf.OpenDest(x.events, nil)
		if err != nil {
			return cli.Failf("expand: --events: %v", err)
		}
		defer w.Close()
		eventsFile = w
	}
	baseText, err := readCapped(x.base, policy.MaxPolicySize)
	if err != nil {
		// No base, no output: report and fail.
		emitDecision(a, eventsFile, egress.Unchanged(nil, x.base, x.repo, x.trusted, fmt.Errorf("base policy: %w", err), time.Now()))
		return cli.Failf("expand: --base: %v", err)
	}
	opts := egress.Options{Base: baseText, BasePath: x.base, Repo: x.repo, TrustedSource: x.trusted, Ceiling: a.ceilingChecker(x.ceiling)}
	var pre error
	if x.meta != "" {
		if opts.TaskMetadata, err = readCapped(x.meta, egress.MaxTaskMetadataSize); err != nil {
			pre = fmt.Errorf("--task-metadata: %w", err)
		}
	}
	if x.trusted != "" && pre == nil {
		data, err := readCapped(x.trusted, 1<<20)
		if err == nil {
			opts.Trusted, err = egress.ParseTrustedRegistries(data)
		}
		if err != nil {
			pre = fmt.Errorf("--trusted-registries: %w", err)
		} else if opts.Trusted == nil {
			opts.Trusted = []string{} // an empty file trusts nothing
		}
	}
	result, d := baseText, (*egress.Decision)(nil)
	if pre != nil {
		d = egress.Unchanged(baseText, x.base, x.repo, x.trusted, pre, time.Now())
	} else {
		result, d = egress.Expand(opts)
	}
	if werr := writeOutput(a, x.out, result); werr != nil {
		if !d.Expanded {
			emitDecision(a, eventsFile, d)
			return cli.Failf("expand: -o: %v", werr)
		}
		// The expanded text could not be written; fall back to the base.
		d = egress.Unchanged(baseText, x.base, x.repo, x.trusted, fmt.Errorf("writing %s: %w", x.out, werr), time.Now())
		if err := writeOutput(a, x.out, baseText); err != nil {
			emitDecision(a, eventsFile, d)
			return cli.Failf("expand: -o: %v", err)
		}
	}
	if err := emitDecision(a, eventsFile, d); err != nil {
		return cli.Failf("expand: --events: %v", err)
	}
	if d.Error != "" {
		a.log.Error("policy not expanded; the output is the base policy unchanged", "error", d.Error)
		return cli.Quiet(cli.ExitFailed)
	}
	a.log.Info("per-task egress", "expanded", d.Expanded, "grants", len(d.Grants), "refusals", len(d.Refusals)+d.RefusalsOmitted,
		"result_policy_sha256", d.ResultPolicySHA256)
	return nil
}

func writeOutput(a *app, out string, data []byte) error {
	if out == "" {
		_, err := a.stdout.Write(data)
		return err
	}
	return fsutil.WriteFileAtomic(out, data, 0o600)
}

// emitDecision writes the event as one line on stderr and appends it to
// the events file (one write, so concurrent appenders do not interleave).
func emitDecision(a *app, events *ocsf.Writer, d *egress.Decision) error {
	line := d.JSON()
	a.stderr.Write(line)
	if events == nil {
		return nil
	}
	return events.WriteLine(bytes.TrimSuffix(line, []byte("\n")))
}

// readCapped reads a regular file of at most limit bytes.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}
