package proposal

import (
	"cmp"
	"fmt"
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/palisade-sandbox/palisade/pkg/decision"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// MinWildcardNames is how many distinct names, each one label under the
// same parent, denied to the same binary on the same port, a proposal
// folds into one "*.parent" endpoint. Fewer are proposed one by one.
const MinWildcardNames = 3

// EntryPrefix starts the key of every network entry a proposal adds.
const EntryPrefix = "proposed_"

// Options tune Propose.
type Options struct {
	// BasePath names the base policy in the proposal.
	BasePath string
	// Ceiling, when set, checks every candidate policy (pkg/ceiling's
	// Check); CeilingRef records it in the proposal.
	Ceiling    func(*policy.Policy) error
	CeilingRef *Ref
	// MinWildcardNames overrides MinWildcardNames (0: the default; a
	// negative value never folds names into a pattern).
	MinWildcardNames int
}

// builder is the state of one Propose.
type builder struct {
	base    *policy.Policy
	eng     *decision.Engine
	opts    Options
	fs      map[string]*fsGrant    // by path
	nets    map[string][]*netGrant // by binary
	rules   map[ruleKey]*ruleGrant // by endpoint and request
	dnsWant map[dnsKey][]Denial    // policy DNS refusals, by sandbox and name
	out     *Proposal
}

type fsGrant struct {
	path    string
	write   bool
	answers []Denial
}

// netGrant is one endpoint for one binary: exact host (or, after
// folding, a pattern), ports, and the L7 settings copied from the
// endpoint that denied (none for a host no endpoint selected).
type netGrant struct {
	binary  string
	ep      *policy.Endpoint
	answers []Denial
}

type ruleKey struct {
	entry        string
	index        int
	method, path string
}

type ruleGrant struct {
	ruleKey
	answers []Denial
}

type dnsKey struct{ sandbox, name string }

// Propose builds the proposal for denials against base (valid and
// normalised). Denials are considered in Aggregator.Denials order; the
// result does not depend on the order given.
func Propose(base *policy.Policy, denials []Denial, opts Options) (*Proposal, error) {
	eng, err := decision.Compile(base, 0)
	if err != nil {
		return nil, fmt.Errorf("proposal: base policy: %w", err)
	}
	if opts.MinWildcardNames == 0 {
		opts.MinWildcardNames = MinWildcardNames
	}
	b := &builder{base: base, eng: eng, opts: opts, fs: map[string]*fsGrant{}, nets: map[string][]*netGrant{},
		rules: map[ruleKey]*ruleGrant{}, dnsWant: map[dnsKey][]Denial{},
		out: &Proposal{Kind: FormatKind, Base: Ref{Path: opts.BasePath, Checksum: base.Checksum()}, Ceiling: opts.CeilingRef,
			Patch: []Op{}, Unanswered: []Unanswered{}}}
	ds := slices.Clone(denials)
	slices.SortFunc(ds, compareDenials)
	for _, d := range ds {
		b.classify(d)
	}
	b.foldWildcards()
	if err := b.build(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(b.out.Unanswered, func(a, c Unanswered) int { return compareDenials(a.Denial, c.Denial) })
	return b.out, nil
}

func (b *builder) unanswered(d Denial, why string, args ...any) {
	b.out.Unanswered = append(b.out.Unanswered, Unanswered{Denial: d, Why: fmt.Sprintf(why, args...)})
}

func (b *builder) classify(d Denial) {
	switch d.Kind {
	case KindFilesystem:
		b.classifyFile(d)
	case KindNetwork:
		b.classifyNetwork(d)
	case KindHTTP:
		b.classifyHTTP(d)
	case KindDNS:
		k := dnsKey{d.Sandbox, d.Host}
		b.dnsWant[k] = append(b.dnsWant[k], d)
	case KindSSRF:
		b.unanswered(d, "the SSRF guard refused the address %s resolves to; a proposal never widens what an endpoint may reach (add allowed_ips by hand if the address is meant)", d.Host)
	case KindBypass:
		b.unanswered(d, "a direct connection that bypassed the proxy; the client must use the proxy (HTTP_PROXY) or a name of the policy (policy DNS)")
	default:
		b.unanswered(d, "not a kind of denial a proposal answers")
	}
}

// Landlock rights and what answers them: rights on a file are granted on
// that file; rights the kernel checks on a directory (and reports with
// the directory's path) are granted on that directory.
var (
	readRights  = map[string]bool{"fs.read_file": true, "fs.read_dir": true, "fs.execute": true}
	writeRights = map[string]bool{"fs.write_file": true, "fs.truncate": true, "fs.ioctl_dev": true,
		"fs.make_char": true, "fs.make_dir": true, "fs.make_reg": true, "fs.make_sock": true, "fs.make_fifo": true,
		"fs.make_block": true, "fs.make_sym": true, "fs.remove_dir": true, "fs.remove_file": true, "fs.refer": true}
)

func (b *builder) classifyFile(d Denial) {
	p := d.File
	if p == "" || !path.IsAbs(p) || path.Clean(p) != p {
		b.unanswered(d, "the denial names no absolute path")
		return
	}
	write := false
	for _, r := range d.Rights {
		switch {
		case writeRights[r]:
			write = true
		case readRights[r]:
		default:
			b.unanswered(d, "%s is not a filesystem right a policy path grants", r)
			return
		}
	}
	if len(d.Rights) == 0 {
		b.unanswered(d, "the denial names no Landlock right")
		return
	}
	if write && p == "/" {
		b.unanswered(d, `"/" is never read_write`)
		return
	}
	if covered(p, b.base.Filesystem.ReadWrite) || !write && covered(p, b.base.Filesystem.ReadOnly) {
		b.unanswered(d, "already allowed by the base policy (the run used another policy?)")
		return
	}
	g := b.fs[p]
	if g == nil {
		g = &fsGrant{path: p}
		b.fs[p] = g
	}
	g.write = g.write || write
	g.answers = append(g.answers, d)
}

// covered reports whether x is one of roots or lies beneath one.
func covered(x string, roots []string) bool {
	for _, r := range roots {
		if x == r || r == "/" || strings.HasPrefix(x, r+"/") {
			return true
		}
	}
	return false
}

// decisionReasons are the network denial reasons the policy decides
// (others come from attribution, identity or policy DNS mappings, and no
// policy change answers them).
var decisionReasons = map[string]bool{
	decision.ReasonNoMatchingEndpoint.String(): true,
	decision.ReasonPortNotAllowed.String():     true,
	decision.ReasonBinaryNotAllowed.String():   true,
	"wrong_port":                               true,
}

func (b *builder) classifyNetwork(d Denial) {
	if !decisionReasons[d.Reason] {
		b.unanswered(d, "denied for %s, which no policy change answers", d.Reason)
		return
	}
	bin, ok := b.binaryFor(d)
	if !ok {
		return
	}
	res := b.eng.Decide(decision.Request{Host: d.Host, Port: d.Port, Binary: d.Binary, Ancestors: d.Ancestors})
	if res.Allowed {
		b.unanswered(d, "already allowed by the base policy (the run used another policy?)")
		return
	}
	host := res.Host
	if host == "" {
		b.unanswered(d, "%q is not a host a policy can name", d.Host)
		return
	}
	ep := &policy.Endpoint{Host: host, Ports: []int{d.Port}}
	if d.Transport == "tcp" {
		ep.Protocol = policy.ProtocolTCP
	}
	if res.Endpoint != nil && res.Reason != decision.ReasonNoMatchingEndpoint {
		// Keep what the endpoint that selected the host holds the
		// traffic to: its protocol, TLS handling and L7 rules.
		copyBehaviour(ep, res.Endpoint)
	}
	b.nets[bin] = append(b.nets[bin], &netGrant{binary: bin, ep: ep, answers: []Denial{d}})
}

// binaryFor returns the binary a network grant names, or records why
// there is none.
func (b *builder) binaryFor(d Denial) (string, bool) {
	bin := d.Binary
	switch {
	case bin == "":
		b.unanswered(d, "the caller could not be attributed to a binary")
		return "", false
	case !path.IsAbs(bin) || path.Clean(bin) != bin || strings.HasSuffix(bin, " (deleted)") || strings.HasPrefix(bin, "/memfd:"):
		b.unanswered(d, "%q is not an executable file a policy can name", bin)
		return "", false
	case strings.ContainsAny(bin, `*?[\`):
		b.unanswered(d, "%q has glob characters; a binaries entry would match more than it", bin)
		return "", false
	}
	return bin, true
}

func copyBehaviour(dst, src *policy.Endpoint) {
	c := cloneEndpoint(src)
	dst.Protocol, dst.TLS, dst.Enforcement, dst.Access = c.Protocol, c.TLS, c.Enforcement, c.Access
	dst.Rules, dst.DenyRules, dst.WebSocket = c.Rules, c.DenyRules, c.WebSocket
	dst.MCP, dst.JSONRPC, dst.PersistedQueries, dst.GraphQLPersistedQueries = c.MCP, c.JSONRPC, c.PersistedQueries, c.GraphQLPersistedQueries
	dst.GraphQLMaxBodyBytes, dst.GraphQLMaxBatchSize = c.GraphQLMaxBodyBytes, c.GraphQLMaxBatchSize
	if dst.Protocol == policy.ProtocolTCP {
		dst.Enforcement = ""
	}
}

// ruleMethodRE is what an allow rule's method may be (pkg/policy).
var ruleMethodRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Z][A-Z0-9_-]{0,31}$`) })

func (b *builder) classifyHTTP(d Denial) {
	res := b.eng.Decide(decision.Request{Host: d.Host, Port: d.Port, Binary: d.Binary, Ancestors: d.Ancestors})
	if !res.Allowed || res.Endpoint == nil {
		b.unanswered(d, "the base policy refuses the connection itself (%s); run again once it is allowed to see the requests", res.Reason)
		return
	}
	ep := res.Endpoint
	if ok, _ := ep.CheckRequest(d.Method, d.Path, url.Values{}, ""); ok {
		b.unanswered(d, "already allowed by the base policy (the run used another policy, or the request's query decided it)")
		return
	}
	method := strings.ToUpper(d.Method)
	switch {
	case ep.BodyInspected():
		b.unanswered(d, "%s's endpoint is protocol %s, decided by request bodies; a proposal writes no rules for it (add the method or tool to its rules by hand)", res.Entry, ep.Protocol)
	case d.Reason == policy.L7DeniedByRule:
		b.unanswered(d, "a deny rule refuses it; a proposal never removes deny rules")
	case d.Reason == policy.L7AmbiguousPath || d.Reason == policy.L7InvalidRequest:
		b.unanswered(d, "the request path is refused whatever the rules say (%s)", d.Reason)
	case ep.Access != "":
		b.unanswered(d, "%s's endpoint uses access: %s; allowing %s %s means rewriting the preset as rules (a preset cannot be widened by one method and path)", res.Entry, ep.Access, method, d.Path)
	case len(ep.Rules) == 0:
		b.unanswered(d, "the endpoint has only deny rules, one of which refuses it")
	case !ruleMethodRE().MatchString(method):
		b.unanswered(d, "%q is not a method an allow rule can name", d.Method)
	case !strings.HasPrefix(d.Path, "/") || strings.ContainsAny(d.Path, "*?%# "):
		b.unanswered(d, "the path %q cannot be written as a rule matching only itself", d.Path)
	default:
		k := ruleKey{entry: res.Entry, index: res.EndpointIndex, method: method, path: d.Path}
		g := b.rules[k]
		if g == nil {
			g = &ruleGrant{ruleKey: k}
			b.rules[k] = g
		}
		g.answers = append(g.answers, d)
	}
}

// foldWildcards replaces, per binary and port, MinWildcardNames or more
// exact hosts of no-endpoint denials that are one label under the same
// parent by one "*.parent" endpoint (the exact ones stay behind it, used
// when the ceiling refuses the pattern).
func (b *builder) foldWildcards() {
	n := b.opts.MinWildcardNames
	if n < 0 {
		return
	}
	for bin, gs := range b.nets {
		groups := map[string][]*netGrant{}
		for _, g := range gs {
			if parent, ok := wildcardParent(g); ok {
				k := fmt.Sprintf("%s:%d:%s", parent, g.ep.Ports[0], g.ep.Protocol)
				groups[k] = append(groups[k], g)
			}
		}
		for _, k := range sortedKeys(groups) {
			members := groups[k]
			names := map[string]bool{}
			for _, g := range members {
				names[g.ep.Host] = true
			}
			if len(names) < n {
				continue
			}
			_, parent, _ := strings.Cut(members[0].ep.Host, ".")
			w := &netGrant{binary: bin, ep: &policy.Endpoint{Host: "*." + parent, Ports: slices.Clone(members[0].ep.Ports), Protocol: members[0].ep.Protocol}}
			for _, g := range members {
				w.answers = append(w.answers, g.answers...)
			}
			b.nets[bin] = append(b.nets[bin], w)
		}
	}
}

// wildcardParent returns the parent of an exact-host grant that a
// "*.parent" pattern could stand for: no L7 settings copied, a DNS name
// of at least three labels (a pattern needs two literal labels after
// the wildcard).
func wildcardParent(g *netGrant) (string, bool) {
	e := g.ep
	if e.Access != "" || len(e.Rules) > 0 || e.Protocol == policy.ProtocolTCP || e.TLS != "" || strings.Contains(e.Host, "*") {
		return "", false
	}
	if hp, err := policy.CompileHostPattern(e.Host); err != nil || hp.IsIP() {
		return "", false
	}
	_, parent, ok := strings.Cut(e.Host, ".")
	if !ok || !strings.Contains(parent, ".") {
		return "", false
	}
	return parent, true
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func cmpEndpoint(a, b *policy.Endpoint) int {
	return cmp.Or(cmp.Compare(a.Host, b.Host), slices.Compare(a.Ports, b.Ports), cmp.Compare(a.Protocol, b.Protocol))
}
