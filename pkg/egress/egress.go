// Package egress widens one task's sandbox policy with the package
// registry hosts that task needs (seed 000, "Per-repo egress", ADR 0009
// §2a), without letting the repository widen its own sandbox.
//
// Derivation reads the untrusted working tree (.npmrc, package-lock.json,
// npm-shrinkwrap.json, yarn.lock, pnpm-lock.yaml, requirements*.txt,
// uv.lock, poetry.lock) and only proposes hosts. Classification grants a
// proposal in two trust tiers: derived_trusted_registry when the host
// EXACTLY matches the reviewed trusted-registry list, hub_declared when the
// task's top-level metadata.egress_contract.hosts (set through an
// authenticated hub credential) names a well-formed host. Everything else
// is refused and reported as a contract gap.
//
// Expansion appends new read-only, host-scoped entries (protocol rest,
// access read-only, port 443) to the base policy's network_policies. Base
// entries are never rewritten and filesystem, landlock and process are
// never touched; the result is checked for exactly that before it is
// returned. A base with an empty network_policies (the bundled fail-closed
// default) is never expanded. Any error yields the base policy unchanged.
// Every run produces one Decision, the sandbox_egress_decision event.
//
// The feature is off by default: the supervisor path expands only when
// Enabled (MAC_OPENSHELL_TASK_EGRESS=1).
package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// EnvTaskEgress turns per-task egress on for the supervisor path.
const EnvTaskEgress = "MAC_OPENSHELL_TASK_EGRESS"

// Enabled reports whether the supervisor should expand a task's policy:
// only when EnvTaskEgress is truthy (1, true, yes, on). Off by default,
// because enabling it is an operator act. `policy-sync expand` invoked
// explicitly does not consult it.
func Enabled(getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	return cli.Truthy(getenv(EnvTaskEgress))
}

// Binaries named by grants, by ecosystem. npm, npx, pnpm and yarn (v1) run
// as node; pip runs as python; uv is its own binary. They mirror the
// node_packages and python_packages entries of the operator template, and
// are system paths (under /usr and /opt) that a policy keeps read-only.
var (
	NPMBinaries    = []string{"/usr/bin/node", "/usr/local/bin/node"}
	PythonBinaries = []string{"/opt/mac-venv/bin/python*", "/usr/bin/python3*", "/usr/bin/uv", "/usr/local/bin/python3*", "/usr/local/bin/uv"}
)

// GrantPort is the only port a grant allows.
const GrantPort = 443

// MaxGrants bounds the hosts one expansion grants (per tier).
const MaxGrants = 256

// Entry keys of the appended network_policies entries (a numeric suffix
// is added if the base already uses one).
const (
	EntryTrustedNPM    = "task_egress_trusted_npm"
	EntryTrustedPython = "task_egress_trusted_python"
	EntryHubDeclared   = "task_egress_hub_declared"
)

// Grant is one host granted.
type Grant struct {
	Host   string `json:"host"`
	Tier   Tier   `json:"tier"`
	Source string `json:"source"` // repository file[:line], or the task metadata field
	Entry  string `json:"entry"`  // network_policies key it was appended to

	ecosystem string
}

// Refusal is one host (or reference) not granted.
type Refusal struct {
	Host   string `json:"host"` // "" when no host could be extracted
	Reason Reason `json:"reason"`
	Source string `json:"source"`
	Detail string `json:"detail,omitempty"`
}

// EventName and Schema identify the decision event.
const (
	EventName = "sandbox_egress_decision"
	Schema    = "palisade.sandbox_egress_decision.v1"
)

// Decision is the sandbox_egress_decision event: one per expansion
// attempt, whatever its outcome.
type Decision struct {
	Schema string    `json:"schema"`
	Event  string    `json:"event"`
	Time   time.Time `json:"time"`
	// BasePolicy is the base policy's file name (as given).
	BasePolicy string `json:"base_policy,omitempty"`
	// Repo is the repository directory searched.
	Repo string `json:"repo,omitempty"`
	// BasePolicySHA256 is the base policy's canonical checksum (pkg/policy;
	// empty when the base is not a valid policy).
	BasePolicySHA256 string `json:"base_policy_sha256,omitempty"`
	// ResultPolicySHA256 is the output's canonical checksum; equal to
	// BasePolicySHA256 when nothing was expanded.
	ResultPolicySHA256 string `json:"result_policy_sha256,omitempty"`
	// Expanded is true when the output differs from the base.
	Expanded bool `json:"expanded"`
	// TrustedRegistries is "builtin" or the file the list came from.
	TrustedRegistries string    `json:"trusted_registries"`
	Grants            []Grant   `json:"grants"`
	Refusals          []Refusal `json:"refusals"`
	// RefusalsOmitted counts refusals beyond the first MaxReported.
	RefusalsOmitted int `json:"refusals_omitted,omitempty"`
	// Files lists the repository files read.
	Files []string `json:"files"`
	// Skipped lists files not read (too large, symbolic links, limits).
	Skipped []Skip `json:"skipped,omitempty"`
	// Error is why the base was output unchanged, when it was for a
	// failure or refusal ("" on success, including "nothing to grant").
	Error string `json:"error,omitempty"`
}

// MaxReported bounds the refusals listed in one Decision.
const MaxReported = 256

// JSON returns the decision as one line of JSON with a trailing newline.
func (d *Decision) JSON() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		// Plain strings, slices and a time: cannot fail.
		panic("egress: encode decision: " + err.Error())
	}
	return b.Bytes()
}

// Declared is what a task's metadata declares.
type Declared struct {
	Hosts    []DeclaredHost
	Refusals []Refusal // entries that are not strings, runtime-metadata hosts
}

// DeclaredHost is one metadata.egress_contract.hosts entry.
type DeclaredHost struct {
	Value  string
	Source string
}

// MaxTaskMetadataSize bounds the task metadata document.
const MaxTaskMetadataSize = 1 << 20

const (
	declaredField = "task-metadata:metadata.egress_contract.hosts"
	runtimeField  = "task-metadata:metadata.runtime.egress_contract.hosts"
)

// ParseTaskMetadata reads the task document (JSON, as the hub returns a
// task: an object whose "metadata" member holds "egress_contract":
// {"hosts": [...]}). Only the top-level metadata.egress_contract.hosts is
// trusted; hosts under metadata.runtime.egress_contract are reported as
// refused (the worker writes metadata.runtime, so it carries only
// repository trust). A document that is not a JSON object, or whose hosts
// member is not a list, is an error; a list element that is not a string
// is refused individually.
func ParseTaskMetadata(data []byte) (*Declared, error) {
	if len(data) > MaxTaskMetadataSize {
		return nil, fmt.Errorf("task metadata: larger than %d bytes", MaxTaskMetadataSize)
	}
	type contract struct {
		Hosts json.RawMessage `json:"hosts"`
	}
	var doc struct {
		Metadata *struct {
			EgressContract *contract `json:"egress_contract"`
			Runtime        *struct {
				EgressContract *contract `json:"egress_contract"`
			} `json:"runtime"`
		} `json:"metadata"`
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("task metadata: want a JSON object (the task document)")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("task metadata: %w", err)
	}
	if dec.More() {
		return nil, errors.New("task metadata: data after the JSON object")
	}
	out := &Declared{}
	if doc.Metadata == nil {
		return out, nil
	}
	list := func(c *contract, field string) ([]json.RawMessage, error) {
		if c == nil || len(c.Hosts) == 0 || string(c.Hosts) == "null" {
			return nil, nil
		}
		var raw []json.RawMessage
		if err := json.Unmarshal(c.Hosts, &raw); err != nil {
			return nil, fmt.Errorf("task metadata: %s: want a list of host names", strings.TrimPrefix(field, "task-metadata:"))
		}
		return raw, nil
	}
	hosts, err := list(doc.Metadata.EgressContract, declaredField)
	if err != nil {
		return nil, err
	}
	for i, r := range hosts {
		src := fmt.Sprintf("%s[%d]", declaredField, i)
		var s string
		if json.Unmarshal(r, &s) != nil {
			out.Refusals = append(out.Refusals, Refusal{Reason: ReasonMalformedHost, Source: src, Detail: "not a string"})
			continue
		}
		out.Hosts = append(out.Hosts, DeclaredHost{Value: s, Source: src})
	}
	if rt := doc.Metadata.Runtime; rt != nil {
		rhosts, err := list(rt.EgressContract, runtimeField)
		if err != nil {
			return nil, err
		}
		for i, r := range rhosts {
			var s string
			json.Unmarshal(r, &s)
			out.Refusals = append(out.Refusals, Refusal{
				Host: reportable(s), Reason: ReasonRuntimeMetadata, Source: fmt.Sprintf("%s[%d]", runtimeField, i),
				Detail: "metadata.runtime is worker-written and carries only repository trust; the hub declares hosts in top-level metadata.egress_contract.hosts",
			})
		}
	}
	return out, nil
}

// Classification is the outcome of classifying a repository's proposals
// and a task's declarations.
type Classification struct {
	Grants   []Grant
	Refusals []Refusal
	// byEcosystem maps an ecosystem (which binaries the entry names) to
	// its granted hosts, in grant order.
	byEcosystem map[string][]string
}

// Classify applies the two trust tiers. trusted is the reviewed list
// (exact host names). A derived host is granted only on exact membership
// in trusted; a declared host only when CheckHost accepts it. A derived
// host that the hub also declares is not a gap; any other derived host is
// refused as a contract gap. Grants are unique per (host, tier, ecosystem).
func Classify(cands []Candidate, decl *Declared, trusted []string) *Classification {
	c := &Classification{byEcosystem: map[string][]string{}}
	trustedSet := map[string]bool{}
	for _, h := range trusted {
		trustedSet[h] = true
	}
	type gkey struct {
		host string
		eco  string
	}
	granted := map[gkey]bool{}
	grant := func(host string, tier Tier, eco, source string) {
		k := gkey{host, eco}
		if granted[k] {
			return
		}
		if len(c.byEcosystem[eco]) >= MaxGrants {
			c.Refusals = append(c.Refusals, Refusal{Host: host, Reason: ReasonLimit, Source: source, Detail: fmt.Sprintf("at most %d hosts are granted per tier", MaxGrants)})
			return
		}
		granted[k] = true
		c.byEcosystem[eco] = append(c.byEcosystem[eco], host)
		c.Grants = append(c.Grants, Grant{Host: host, Tier: tier, Source: source, ecosystem: eco})
	}

	declaredOK := map[string]bool{}
	if decl != nil {
		for _, d := range decl.Hosts {
			h, why, detail := CheckHost(d.Value)
			if why != "" {
				c.Refusals = append(c.Refusals, Refusal{Host: reportable(d.Value), Reason: why, Source: d.Source, Detail: detail})
				continue
			}
			declaredOK[h] = true
			grant(h, TierHubDeclared, ecosystemAny, d.Source)
		}
		c.Refusals = append(c.Refusals, decl.Refusals...)
	}
	gap := map[gkey]bool{}
	for _, cand := range cands {
		switch {
		case cand.Reason != "":
			c.Refusals = append(c.Refusals, Refusal{Host: cand.Host, Reason: cand.Reason, Source: cand.Source(), Detail: cand.Detail})
		case trustedSet[cand.Host]:
			grant(cand.Host, TierDerivedTrustedRegistry, cand.ecosystem, cand.Source())
		case declaredOK[cand.Host]:
			// Covered by the hub's contract: granted under hub_declared.
		default:
			k := gkey{cand.Host, cand.File}
			if gap[k] {
				continue
			}
			gap[k] = true
			c.Refusals = append(c.Refusals, Refusal{Host: cand.Host, Reason: ReasonContractGap, Source: cand.Source(),
				Detail: "derived from the repository and not on the trusted registry list; the task's egress contract does not declare it"})
		}
	}
	return c
}

// Options are the inputs of Expand.
type Options struct {
	// Base is the base policy's text; BasePath names it in the decision.
	Base     []byte
	BasePath string
	// Repo is the repository working tree.
	Repo string
	// TaskMetadata is the task document (nil: none).
	TaskMetadata []byte
	// Trusted is the trusted-registry list; nil means
	// DefaultTrustedRegistries. An empty non-nil list trusts nothing.
	// TrustedSource names where it came from ("" means "builtin").
	Trusted       []string
	TrustedSource string
	// Limits bound derivation; zero fields take DefaultLimits.
	Limits Limits
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Ceiling, when set, checks a policy against the host's ceiling
	// (pkg/ceiling): a base it refuses is an error, and an expansion it
	// refuses is dropped (the base is kept and the error reported).
	Ceiling func(*policy.Policy) error
}

// Unchanged is the decision for a run that failed before Expand could
// start (an unreadable input file, say): nothing expanded, err reported,
// the base's checksum filled in when base (which may be nil) is a valid
// policy.
func Unchanged(base []byte, basePath, repo, trustedSource string, err error, now time.Time) *Decision {
	d := newDecision(basePath, repo, trustedSource, now)
	if p, perr := policy.Parse(base); base != nil && perr == nil {
		d.BasePolicySHA256 = p.Checksum()
		d.ResultPolicySHA256 = d.BasePolicySHA256
	}
	d.Error = err.Error()
	return d
}

func newDecision(basePath, repo, trustedSource string, now time.Time) *Decision {
	d := &Decision{
		Schema: Schema, Event: EventName, Time: now.UTC(),
		BasePolicy: basePath, Repo: repo, TrustedRegistries: "builtin",
		Grants: []Grant{}, Refusals: []Refusal{}, Files: []string{},
	}
	if trustedSource != "" {
		d.TrustedRegistries = trustedSource
	}
	return d
}

// Expand derives, classifies and, when something is granted, returns the
// base policy with the grants appended. On any error, on a base with an
// empty network_policies, and when nothing is granted, it returns the base
// text unchanged (the same bytes); Decision.Error says why for the first
// two. The output is a valid policy whenever the base is.
func Expand(opts Options) ([]byte, *Decision) {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	d := newDecision(opts.BasePath, opts.Repo, opts.TrustedSource, now())
	out := opts.Base
	fail := func(err error) ([]byte, *Decision) {
		d.Error = err.Error()
		d.Expanded = false
		d.ResultPolicySHA256 = d.BasePolicySHA256
		d.Grants = []Grant{}
		return out, d
	}

	base, err := policy.Parse(opts.Base)
	if err != nil {
		return fail(fmt.Errorf("base policy: %w", err))
	}
	d.BasePolicySHA256 = base.Checksum()
	d.ResultPolicySHA256 = d.BasePolicySHA256
	if opts.Ceiling != nil {
		if err := opts.Ceiling(base); err != nil {
			return fail(fmt.Errorf("base policy: %w", err))
		}
	}
	if len(base.NetworkPolicies) == 0 {
		return fail(errors.New("base policy has an empty network_policies (the fail-closed default); it is never expanded: expansion needs an operator policy that already declares egress"))
	}
	trusted := DefaultTrustedRegistries
	if opts.Trusted != nil {
		if trusted, err = checkTrusted(opts.Trusted); err != nil {
			return fail(err)
		}
	}
	decl := &Declared{}
	if opts.TaskMetadata != nil {
		if decl, err = ParseTaskMetadata(opts.TaskMetadata); err != nil {
			return fail(err)
		}
	}
	der, err := Derive(opts.Repo, opts.Limits)
	if err != nil {
		return fail(err)
	}
	d.Files = append(d.Files, der.Files...)
	d.Skipped = der.Skipped
	cl := Classify(der.Candidates, decl, trusted)
	d.Refusals = cl.Refusals
	defer d.trimRefusals()
	if len(cl.Grants) == 0 {
		return out, d
	}

	expanded, grants, noBinary := appendGrants(base, cl)
	d.Refusals = append(d.Refusals, noBinary...)
	if len(grants) == 0 {
		return out, d
	}
	text := render(expanded, base, opts.BasePath)
	result, err := Verify(base, text)
	if err != nil {
		return fail(fmt.Errorf("expanded policy failed its check (base kept): %w", err))
	}
	if opts.Ceiling != nil {
		if err := opts.Ceiling(result); err != nil {
			return fail(fmt.Errorf("expanded policy refused (base kept): %w", err))
		}
	}
	d.Grants = grants
	d.Expanded = true
	d.ResultPolicySHA256 = result.Checksum()
	return text, d
}

// trimRefusals keeps the first MaxReported refusals and counts the rest.
func (d *Decision) trimRefusals() {
	if len(d.Refusals) > MaxReported {
		d.RefusalsOmitted += len(d.Refusals) - MaxReported
		d.Refusals = d.Refusals[:MaxReported]
	}
}

// appendGrants adds one entry per ecosystem with grants to a copy of base.
// A binary the base's filesystem policy would reject (under a read_write
// path, or matching the working directory) is left out; an entry left
// without binaries is not added and its hosts are refused.
func appendGrants(base *policy.Policy, cl *Classification) (*policy.Policy, []Grant, []Refusal) {
	p := base.Clone()
	var grants []Grant
	var refusals []Refusal
	for _, eco := range []string{ecosystemNPM, ecosystemPython, ecosystemAny} {
		hosts := cl.byEcosystem[eco]
		if len(hosts) == 0 {
			continue
		}
		var want []string
		var key string
		switch eco {
		case ecosystemNPM:
			want, key = NPMBinaries, EntryTrustedNPM
		case ecosystemPython:
			want, key = PythonBinaries, EntryTrustedPython
		default:
			want, key = append(slices.Clone(NPMBinaries), PythonBinaries...), EntryHubDeclared
		}
		bins := safeBinaries(base, want)
		if len(bins) == 0 {
			for _, g := range cl.Grants {
				if g.ecosystem == eco {
					refusals = append(refusals, Refusal{Host: g.Host, Reason: ReasonNoBinary, Source: g.Source,
						Detail: "every package manager binary lies under a writable path of the base policy"})
				}
			}
			continue
		}
		key = freeKey(p, key)
		np := &policy.NetworkPolicy{Name: key}
		for _, h := range hosts {
			np.Endpoints = append(np.Endpoints, &policy.Endpoint{
				Host: h, Ports: []int{GrantPort}, Protocol: policy.ProtocolREST,
				Enforcement: policy.EnforcementEnforce, Access: policy.AccessReadOnly,
			})
		}
		for _, b := range bins {
			np.Binaries = append(np.Binaries, policy.Binary{Path: b})
		}
		p.NetworkPolicies[key] = np
		for _, g := range cl.Grants {
			if g.ecosystem == eco {
				g.Entry = key
				grants = append(grants, g)
			}
		}
	}
	return p, grants, refusals
}

func freeKey(p *policy.Policy, key string) string {
	if _, taken := p.NetworkPolicies[key]; !taken {
		return key
	}
	for i := 2; ; i++ {
		k := fmt.Sprintf("%s_%d", key, i)
		if _, taken := p.NetworkPolicies[k]; !taken {
			return k
		}
	}
}

// safeBinaries keeps the binaries the base's filesystem policy accepts,
// asking pkg/policy itself: a one-entry policy with base's filesystem
// policy and that binary must validate.
func safeBinaries(base *policy.Policy, want []string) []string {
	var ok []string
	for _, b := range want {
		probe := &policy.Policy{
			Version: base.Version, Filesystem: base.Filesystem, Landlock: base.Landlock, Process: base.Process,
			NetworkPolicies: map[string]*policy.NetworkPolicy{"probe": {
				Name:      "probe",
				Endpoints: []*policy.Endpoint{{Host: "probe.example.com", Ports: []int{GrantPort}, Protocol: policy.ProtocolREST, Access: policy.AccessReadOnly, Enforcement: policy.EnforcementEnforce}},
				Binaries:  []policy.Binary{{Path: b}},
			}},
		}
		if _, err := policy.Parse(probe.Canonical()); err == nil {
			ok = append(ok, b)
		}
	}
	return ok
}

// render returns the expanded policy's text: a comment naming the base,
// then the normalised YAML.
func render(p, base *policy.Policy, basePath string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Per-task egress expansion generated by policy-sync expand.\n")
	if basePath != "" {
		fmt.Fprintf(&b, "# Base policy: %s\n", reportable(basePath))
	}
	fmt.Fprintf(&b, "# Base checksum: %s. Base entries are unchanged; task_egress_* entries were appended (read-only, port %d).\n", base.Checksum(), GrantPort)
	b.Write(p.YAML())
	return b.Bytes()
}

// Verify checks that text is a valid policy that differs from base only by
// appended network_policies entries, each of them grant-shaped: every
// endpoint an exact DNS host on port 443, protocol rest, access read-only,
// enforcement enforce, with no rules, deny rules, allowed_ips or tls
// override. It returns the parsed result.
func Verify(base *policy.Policy, text []byte) (*policy.Policy, error) {
	got, err := policy.Parse(text)
	if err != nil {
		return nil, err
	}
	if !jsonEqual(base.Version, got.Version) || !jsonEqual(base.Filesystem, got.Filesystem) ||
		!jsonEqual(base.Landlock, got.Landlock) || !jsonEqual(base.Process, got.Process) {
		return nil, errors.New("static sections (version, filesystem_policy, landlock, process) changed")
	}
	for key, np := range base.NetworkPolicies {
		if !jsonEqual(np, got.NetworkPolicies[key]) {
			return nil, fmt.Errorf("base entry %q changed", key)
		}
	}
	for key, np := range got.NetworkPolicies {
		if _, inBase := base.NetworkPolicies[key]; inBase {
			continue
		}
		for i, e := range np.Endpoints {
			h, why, _ := CheckHost(e.Host)
			if why != "" || h != e.Host || len(e.Ports) != 1 || e.Ports[0] != GrantPort ||
				e.Protocol != policy.ProtocolREST || e.Access != policy.AccessReadOnly ||
				e.Enforcement != policy.EnforcementEnforce || len(e.Rules) != 0 ||
				len(e.DenyRules) != 0 || len(e.AllowedIPs) != 0 || e.TLS != "" {
				return nil, fmt.Errorf("appended entry %q endpoint %d is not a read-only host-scoped grant", key, i)
			}
		}
	}
	return got, nil
}

func jsonEqual(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
