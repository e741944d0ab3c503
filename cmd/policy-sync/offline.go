package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/binaries"
	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/policies"
)

// checkResult is check's JSON output (one object on stdout).
type checkResult struct {
	File     string               `json:"file"`
	Valid    bool                 `json:"valid"`
	Checksum string               `json:"checksum,omitempty"`
	Policy   *policy.Policy       `json:"policy,omitempty"`
	Problems []*policy.FieldError `json:"problems,omitempty"`
	Error    string               `json:"error,omitempty"`
	// Warnings say what listed binaries really are on this host
	// (binaries.Notes); they never make a policy invalid.
	Warnings []binaries.Note `json:"warnings,omitempty"`
}

var checkCmd = &command{
	name:    "check",
	summary: "validate a policy file; print its checksum and normalised form",
	usage: `check FILE [--json] [--workdir DIR]

Validates FILE ("-" reads stdin) against the OpenShell policy schema v1 as
Palisade enforces it. A valid policy prints its checksum (hex sha256 of the
canonical form) and the normalised policy, and exits 0. An invalid one
lists every problem with its field path and line, and exits 1.
--workdir also checks that no allowed binary lies under that working
directory when include_workdir is true. A policy not within the host's
policy ceiling (--ceiling; docs/policy.md, "Ceiling") is invalid here:
each excess is listed as a problem.

A valid policy's binaries are also looked up on this host, because the
proxy matches the file the kernel runs: a listed "#!" script (or a link
to one) never connects itself, its interpreter does; a link is seen as
its target; a listed general interpreter (python, node, sh, ...) passes
its access to any code it runs (each a "warning:" line on stderr); a
listed path may not exist here (a "note:" line). In --json all are in
"warnings". None makes the policy invalid.

--credentials checks the policy against a credentials file
(docs/credentials.md): every credential_binding must name a provider of
it that lists no endpoints, and no endpoint a credential is bound to may
be admitted without inspection (its placeholders could not be resolved
there).`,
	examples: `  policy-sync check /etc/mac/openshell-policy.yaml
  policy-sync check --json ~/.mac/openshell-policy.yaml | jq .checksum
  policy-sync check policy.yaml --workdir /home/hermes/work
  policy-sync check --ceiling /etc/palisade/ceiling.yaml task-policy.yaml
  sudo policy-sync check --credentials /etc/palisade/credentials.yaml agent-policy.yaml
`,
	flags: func(fs *flag.FlagSet) func(context.Context, *app, []string) error {
		asJSON := fs.Bool("json", false, "print one JSON object instead of text")
		workdir := fs.String("workdir", "", "also check binaries against this working directory (include_workdir)")
		ceilingPath := ceilingFlag(fs)
		credsPath := fs.String("credentials", "", "also check the policy against this credentials file (root's, mode 0600)")
		return func(_ context.Context, a *app, args []string) error {
			if len(args) != 1 {
				return cli.Usagef("check: want exactly one FILE, got %d arguments", len(args))
			}
			file := args[0]
			res := checkResult{File: file}
			p, err := loadForCheck(a, file)
			if err == nil && *workdir != "" {
				err = p.CheckWorkdir(*workdir)
			}
			if err == nil {
				err = a.ceilingCheck(*ceilingPath, p)
			}
			if err == nil && *credsPath != "" {
				err = checkCredentials(*credsPath, p)
			}
			var cerrs credentials.Errors
			if err != nil {
				if errs, ok := policy.AsErrors(err); ok {
					res.Problems = errs.List()
				} else if errors.As(err, &cerrs) && !strings.HasPrefix(err.Error(), "--credentials") {
					res.Problems = cerrs
				} else if xs, ok := ceilingProblems(err); ok {
					res.Problems = xs
				} else {
					res.Error = err.Error()
				}
			} else {
				res.Valid = true
				res.Checksum = p.Checksum()
				res.Policy = p
				res.Warnings = binaries.Notes(p, binaries.Options{})
			}
			if *asJSON {
				if err := cli.WriteJSON(a.stdout, res); err != nil {
					return err
				}
			} else {
				printCheck(a.stdout, res, p)
				for _, n := range res.Warnings {
					kind := "warning"
					if !n.Actionable() {
						kind = "note"
					}
					fmt.Fprintf(a.stderr, "%s: %s\n", kind, n)
				}
			}
			switch {
			case res.Valid:
				return nil
			case res.Error != "" && !*asJSON:
				return cli.Failf("check: %s", res.Error)
			default:
				return cli.Quiet(cli.ExitFailed)
			}
		}
	},
}

// checkCredentials checks p against the credentials file at path
// (credentials.CheckPolicy). The file's env sources need not be set
// here: only its providers and endpoints matter.
func checkCredentials(path string, p *policy.Policy) error {
	f, err := credentials.LoadFile(path)
	if err != nil {
		return fmt.Errorf("--credentials: %w", err)
	}
	return credentials.CheckPolicy(p, f)
}

func loadForCheck(a *app, file string) (*policy.Policy, error) {
	if file != "-" {
		return policy.LoadFile(file)
	}
	data, err := io.ReadAll(io.LimitReader(a.stdin, policy.MaxPolicySize+1))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	return policy.Parse(data)
}

func printCheck(w io.Writer, res checkResult, p *policy.Policy) {
	switch {
	case res.Valid:
		fmt.Fprintf(w, "# %s: valid\n# checksum: %s\n", res.File, res.Checksum)
		w.Write(p.YAML())
	case len(res.Problems) > 0:
		n := len(res.Problems)
		fmt.Fprintf(w, "%s: invalid, %d problem%s:\n", res.File, n, map[bool]string{true: "", false: "s"}[n == 1])
		for _, fe := range res.Problems {
			fmt.Fprintf(w, "  %s\n", fe.Error())
		}
	}
}

// resolveResult is resolve's JSON output.
type resolveResult struct {
	Source   policy.Source `json:"source"`
	Path     string        `json:"path"`
	Reason   string        `json:"reason"`
	Checksum string        `json:"checksum"`
}

var resolveCmd = &command{
	name:    "resolve",
	summary: "show which policy a sandbox would use, and why",
	usage: `resolve [--policy FILE] [--json]

Applies the resolution order: --policy, then $MAC_OPENSHELL_POLICY (which
must exist), then ~/.mac/openshell-policy.yaml, then the bundled
fail-closed default. Prints the source, the file, the reason it won and
the policy checksum. A missing explicit file or an invalid policy at the
winning source is an error (exit 1): resolution never falls back to a
weaker source. So is a policy not within the host's policy ceiling
(--ceiling; docs/policy.md, "Ceiling"): the message names its first excess.`,
	examples: `  policy-sync resolve
  MAC_OPENSHELL_POLICY=/etc/mac/openshell-policy.yaml policy-sync resolve --json
  policy-sync resolve --policy ./candidate.yaml
`,
	flags: func(fs *flag.FlagSet) func(context.Context, *app, []string) error {
		flagPath := fs.String("policy", "", "explicit policy file (as the supervisor's --policy)")
		asJSON := fs.Bool("json", false, "print one JSON object instead of text")
		ceilingPath := ceilingFlag(fs)
		return func(_ context.Context, a *app, args []string) error {
			if len(args) != 0 {
				return cli.Usagef("resolve: unexpected arguments %q", args)
			}
			r, err := policy.Resolve(policy.ResolveOptions{Flag: *flagPath, Getenv: a.getenv})
			if err != nil {
				return cli.WithCode(cli.ExitFailed, err)
			}
			if err := a.ceilingCheck(*ceilingPath, r.Policy); err != nil {
				return cli.Failf("resolve: %s policy %s: %v", r.Source, r.Path, err)
			}
			res := resolveResult{Source: r.Source, Path: r.Path, Reason: r.Reason, Checksum: r.Policy.Checksum()}
			if *asJSON {
				return cli.WriteJSON(a.stdout, res)
			}
			fmt.Fprintf(a.stdout, "source:   %s\npath:     %s\nchecksum: %s\nreason:   %s\n", res.Source, res.Path, res.Checksum, res.Reason)
			return nil
		}
	},
}

// setFlag collects repeated --set KEY=VALUE flags.
type setFlag []string

func (s *setFlag) String() string     { return strings.Join(*s, ",") }
func (s *setFlag) Set(v string) error { *s = append(*s, v); return nil }

var renderCmd = &command{
	name:    "render",
	summary: "fill an operator template's __PLACEHOLDER__ tokens",
	usage: `render [--template FILE] --set KEY=VALUE... [-o OUT]

Replaces each __KEY__ token in the template with VALUE (--set
MAC_HUB_HOST=hub.example.com fills __MAC_HUB_HOST__). Refuses a key the
template does not contain, a token left without a value, a value that
could alter the YAML structure, and a result that is not a valid policy.
Without --template the bundled mac-hermes-policy.yaml is used. The result
goes to stdout, or to OUT written atomically with mode 0600. A result not
within the host's policy ceiling (--ceiling) is refused and not written.`,
	examples: `  policy-sync render --set AGENT_USER=hermes --set MAC_HUB_HOST=hub.example.internal \
      --set MAC_HUB_PORT=8080 --set MODEL_GATEWAY_HOST=models.example.com \
      -o ~/.mac/openshell-policy.yaml
  policy-sync render --template fleet-template.yaml --set MAC_HUB_HOST=10.0.0.5 > policy.yaml
`,
	flags: func(fs *flag.FlagSet) func(context.Context, *app, []string) error {
		tmplPath := fs.String("template", "", "template file (default: the bundled "+policies.MacHermesTemplateFile+")")
		out := fs.String("o", "", "write the rendered policy to this file (atomically, mode 0600) instead of stdout")
		ceilingPath := ceilingFlag(fs)
		var sets setFlag
		fs.Var(&sets, "set", "KEY=VALUE filling __KEY__ (repeatable)")
		return func(_ context.Context, a *app, args []string) error {
			if len(args) != 0 {
				return cli.Usagef("render: unexpected arguments %q", args)
			}
			if len(sets) == 0 {
				return cli.Usagef("render: at least one --set KEY=VALUE is required")
			}
			values, err := policy.ParseSetFlags(sets)
			if err != nil {
				return cli.Usagef("render: %v", err)
			}
			tmpl, source := policies.MacHermesTemplate, "bundled:"+policies.MacHermesTemplateFile
			if *tmplPath != "" {
				if tmpl, err = os.ReadFile(*tmplPath); err != nil {
					return cli.Failf("render: template: %v", err)
				}
				source = *tmplPath
			}
			rendered, err := policy.Render(tmpl, values)
			if err != nil {
				return cli.WithCode(cli.ExitFailed, err)
			}
			p, err := policy.Parse(rendered)
			if err != nil { // Render already validated; belt and braces
				return cli.WithCode(cli.ExitFailed, err)
			}
			if err := a.ceilingCheck(*ceilingPath, p); err != nil {
				return cli.Failf("render: %v", err)
			}
			if *out == "" {
				_, err := a.stdout.Write(rendered)
				return err
			}
			if err := fsutil.WriteFileAtomic(*out, rendered, 0o600); err != nil {
				return cli.Failf("render: %v", err)
			}
			a.log.Info("rendered policy", "template", source, "output", *out, "checksum", p.Checksum())
			return nil
		}
	},
}
