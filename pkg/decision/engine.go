package decision

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
)

// MaxAncestors is how many of Request.Ancestors are consulted.
const MaxAncestors = 64

// Request is one connection attempt to decide.
type Request struct {
	// Host is the destination as the client named it (CONNECT authority or
	// URL host, without port): a DNS name or an IP literal in any spelling.
	Host string
	// Port is the destination port.
	Port int
	// Binary is the calling process's executable (absolute path, as read
	// from /proc/<pid>/exe); empty if attribution failed.
	Binary string
	// Ancestors are the executables of the caller's parent, grandparent,
	// ... nearest first; only the first MaxAncestors count.
	Ancestors []string
}

// Result is the outcome of Decide. Its slices and Endpoint point into the
// Engine and must not be modified.
type Result struct {
	// Allowed is true when an entry allows the request.
	Allowed bool
	// Reason is ReasonNone when allowed, otherwise the most specific reason
	// among the entries that selected the host.
	Reason Reason
	// Host is the canonical host (see CanonicalHost); empty if invalid.
	Host string
	// Entry is the key of the network_policies entry that allowed the
	// request, or, for port_not_allowed and binary_* denials, of the entry
	// behind the reason; EntryName is its display name.
	Entry     string
	EntryName string
	// Endpoint is the matched endpoint (nil for no_matching_endpoint) and
	// EndpointIndex its index in the entry's endpoints. The proxy applies
	// its L7 rules, tls and protocol settings.
	Endpoint      *policy.Endpoint
	EndpointIndex int
	// MatchedBinary is the path (Binary or an ancestor) that matched the
	// entry's binaries.
	MatchedBinary string
	// Audit is true when the endpoint's enforcement is "audit": L7
	// violations on this connection are logged, not blocked. It never
	// turns an L4 denial into an allow.
	Audit bool
	// ExactHost, AllowedIPs and OnlyAllowedIPs describe what the endpoint
	// lets the connection reach (see Scope).
	ExactHost      bool
	AllowedIPs     []netip.Prefix
	OnlyAllowedIPs bool
	// Generation is the Engine's policy generation.
	Generation int64
}

// Scope is the SSRF scope the proxy hands to ssrf.Dialer.DialScope for an
// allowed request: private addresses for exact hosts or inside
// allowed_ips, and only allowed_ips for hostless endpoints.
func (r Result) Scope() ssrf.Scope {
	return ssrf.Scope{ExactHost: r.ExactHost, AllowedIPs: r.AllowedIPs, OnlyAllowedIPs: r.OnlyAllowedIPs}
}

// Stats counts what an Engine holds.
type Stats struct {
	Entries, Endpoints                       int
	ExactHosts, IPHosts, Wildcards, Hostless int
}

// Engine is one compiled policy generation. It is immutable and safe for
// concurrent use.
type Engine struct {
	generation int64
	checksum   string
	stats      Stats

	exact map[string][]*candidate     // exact DNS names
	ips   map[netip.Addr][]*candidate // IP literal hosts (unmapped)
	intra map[string]*intraIndex      // a*b.suffix, keyed by suffix
	one   map[string][]*candidate     // *.suffix
	multi map[string][]*candidate     // **.suffix
	// hostless holds endpoints with allowed_ips and no host, by port.
	hostless map[int][]*candidate
	// rank is every candidate's order by (entry key, endpoint index),
	// built by the first Precedence call.
	rankOnce sync.Once
	rank     map[endpointRef]uint64

	ordinal int // compile-time counter for candidate.order
}

type endpointRef struct {
	entry string
	index int
}

type entry struct {
	key, name string
	literal   map[string]struct{} // binaries without glob characters
	globs     []binaryGlob
}

// binaryGlob is a binaries[] glob with the literal parts every match must
// have, so policy.MatchBinary runs only on paths that can match.
type binaryGlob struct {
	pattern string
	dir     string // literal leading components ("/opt/team"), or ""
	base    string // literal last component, or "" when it is a glob
}

func newBinaryGlob(pattern string) binaryGlob {
	g := binaryGlob{pattern: pattern}
	comps := strings.Split(strings.Trim(pattern, "/"), "/")
	for _, c := range comps {
		if strings.ContainsAny(c, globMeta) || c == "**" {
			break
		}
		g.dir += "/" + c
	}
	if last := comps[len(comps)-1]; !strings.ContainsAny(last, globMeta) && last != "**" {
		g.base = last
	}
	return g
}

const globMeta = `*?[\`

// mayMatch reports whether exe (absolute, clean) has the glob's literal
// parts; it is a necessary condition for policy.MatchBinary.
func (g *binaryGlob) mayMatch(exe string) bool {
	if g.dir != "" && exe != g.dir && !(strings.HasPrefix(exe, g.dir) && len(exe) > len(g.dir) && exe[len(g.dir)] == '/') {
		return false
	}
	return g.base == "" || exe[strings.LastIndexByte(exe, '/')+1:] == g.base
}

// candidate is one endpoint of one entry. Buckets list candidates by entry
// key, then endpoint index, so decisions are deterministic.
type candidate struct {
	entry     *entry
	ep        *policy.Endpoint
	index     int
	pat       *policy.HostPattern // nil for hostless endpoints
	exactHost bool
	allowed   []netip.Prefix
	audit     bool
	// order ranks candidates: lower is more specific (tier, then suffix
	// depth for "**", then entry key and endpoint index).
	order uint64
	// verify is set when the index alone does not decide the host match
	// (intra-label patterns): HostPattern.Match decides.
	verify bool
}

// Specificity tiers (see Decide).
const (
	tierExact = iota
	tierIntra
	tierOne
	tierMulti
	tierHostless
)

func makeOrder(tier, suffixLabels, ordinal int) uint64 {
	depth := 0
	if tier == tierMulti {
		depth = 255 - min(suffixLabels, 255)
	}
	return uint64(tier)<<48 | uint64(depth)<<32 | uint64(ordinal)
}

// intraIndex holds the intra-label patterns ("a*b.suffix") sharing one
// suffix, keyed by the literal text after their last '*' (tail) or, for
// patterns ending in '*', before their first '*' (head).
type intraIndex struct {
	byTail   map[string][]*candidate
	tailLens []int
	byHead   map[string][]*candidate
	headLens []int
	rest     []*candidate // "*x*" patterns: neither head nor tail
}

func (ix *intraIndex) add(c *candidate, label string) {
	head := label[:strings.IndexByte(label, '*')]
	tail := label[strings.LastIndexByte(label, '*')+1:]
	switch {
	case tail != "":
		if ix.byTail == nil {
			ix.byTail = map[string][]*candidate{}
		}
		ix.byTail[tail] = append(ix.byTail[tail], c)
		if !slices.Contains(ix.tailLens, len(tail)) {
			ix.tailLens = append(ix.tailLens, len(tail))
		}
	case head != "":
		if ix.byHead == nil {
			ix.byHead = map[string][]*candidate{}
		}
		ix.byHead[head] = append(ix.byHead[head], c)
		if !slices.Contains(ix.headLens, len(head)) {
			ix.headLens = append(ix.headLens, len(head))
		}
	default:
		ix.rest = append(ix.rest, c)
	}
}

// each calls fn for every pattern that may select a host whose first label
// is label.
func (ix *intraIndex) each(label string, fn func(*candidate)) {
	for _, n := range ix.tailLens {
		if n <= len(label) {
			for _, c := range ix.byTail[label[len(label)-n:]] {
				fn(c)
			}
		}
	}
	for _, n := range ix.headLens {
		if n <= len(label) {
			for _, c := range ix.byHead[label[:n]] {
				fn(c)
			}
		}
	}
	for _, c := range ix.rest {
		fn(c)
	}
}

// Compile builds the Engine for one generation of p. It works on a copy:
// later changes to p do not affect the Engine. Endpoints and binaries that
// cannot be compiled are errors naming the field; a Policy from
// policy.Parse or policy.LoadFile always compiles.
func Compile(p *policy.Policy, generation int64) (*Engine, error) {
	if p == nil {
		return nil, errors.New("decision: nil policy")
	}
	p = p.Clone()
	e := &Engine{
		generation: generation,
		checksum:   p.Checksum(),
		exact:      map[string][]*candidate{},
		ips:        map[netip.Addr][]*candidate{},
		intra:      map[string]*intraIndex{},
		one:        map[string][]*candidate{},
		multi:      map[string][]*candidate{},
		hostless:   map[int][]*candidate{},
	}
	keys := make([]string, 0, len(p.NetworkPolicies))
	for k := range p.NetworkPolicies {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if err := e.addEntry(key, p.NetworkPolicies[key]); err != nil {
			return nil, fmt.Errorf("decision: %w", err)
		}
	}
	return e, nil
}

// fillRanks records every candidate's order for Precedence.
func (e *Engine) fillRanks() {
	e.rank = map[endpointRef]uint64{}
	add := func(cs []*candidate) {
		for _, c := range cs {
			e.rank[endpointRef{c.entry.key, c.index}] = c.order
		}
	}
	for _, m := range []map[string][]*candidate{e.exact, e.one, e.multi} {
		for _, cs := range m {
			add(cs)
		}
	}
	for _, cs := range e.ips {
		add(cs)
	}
	for _, cs := range e.hostless {
		add(cs)
	}
	for _, ix := range e.intra {
		for _, cs := range ix.byTail {
			add(cs)
		}
		for _, cs := range ix.byHead {
			add(cs)
		}
		add(ix.rest)
	}
}

func fieldPath(key string) string {
	if strings.ContainsAny(key, `."`) {
		return fmt.Sprintf("network_policies.%q", key)
	}
	return "network_policies." + key
}

func (e *Engine) addEntry(key string, np *policy.NetworkPolicy) error {
	fp := fieldPath(key)
	if np == nil {
		return fmt.Errorf("%s: entry is null", fp)
	}
	ent := &entry{key: key, name: np.Name, literal: map[string]struct{}{}}
	if ent.name == "" {
		ent.name = key
	}
	for i, b := range np.Binaries {
		if !strings.HasPrefix(b.Path, "/") {
			return fmt.Errorf("%s.binaries[%d].path: must be an absolute path", fp, i)
		}
		if strings.ContainsAny(b.Path, globMeta) {
			ent.globs = append(ent.globs, newBinaryGlob(b.Path))
		} else {
			ent.literal[path.Clean(b.Path)] = struct{}{}
		}
	}
	e.stats.Entries++
	for i, ep := range np.Endpoints {
		e.ordinal++
		ip := fmt.Sprintf("%s.endpoints[%d]", fp, i)
		if ep == nil {
			return fmt.Errorf("%s: endpoint is null", ip)
		}
		if len(ep.Ports) == 0 {
			return fmt.Errorf("%s.ports: no ports", ip)
		}
		for _, port := range ep.Ports {
			if port < 1 || port > 65535 {
				return fmt.Errorf("%s.ports: %d is outside 1-65535", ip, port)
			}
		}
		c := &candidate{entry: ent, ep: ep, index: i, audit: ep.Enforcement == policy.EnforcementAudit, order: makeOrder(tierExact, 0, e.ordinal)}
		for j, s := range ep.AllowedIPs {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				return fmt.Errorf("%s.allowed_ips[%d]: %q is not a CIDR prefix", ip, j, s)
			}
			c.allowed = append(c.allowed, pfx.Masked())
		}
		e.stats.Endpoints++
		if ep.Host == "" {
			if len(c.allowed) == 0 {
				return fmt.Errorf("%s.host: an endpoint needs a host or allowed_ips", ip)
			}
			c.order = makeOrder(tierHostless, 0, e.ordinal)
			for _, port := range ep.Ports {
				e.hostless[port] = append(e.hostless[port], c)
			}
			e.stats.Hostless++
			continue
		}
		hp, err := policy.CompileHostPattern(ep.Host)
		if err != nil {
			return fmt.Errorf("%s.host: %q: %w", ip, ep.Host, err)
		}
		c.pat = hp
		src := hp.String()
		switch {
		case hp.IsIP():
			a, err := netip.ParseAddr(src)
			if err != nil {
				return fmt.Errorf("%s.host: %q: %w", ip, ep.Host, err)
			}
			c.exactHost = true
			e.ips[a.Unmap()] = append(e.ips[a.Unmap()], c)
			e.stats.IPHosts++
		case !hp.IsWildcard():
			c.exactHost = true
			e.exact[src] = append(e.exact[src], c)
			e.stats.ExactHosts++
		default:
			first, suffix, _ := strings.Cut(src, ".")
			switch {
			case first == "*":
				c.order = makeOrder(tierOne, 0, e.ordinal)
				e.one[suffix] = append(e.one[suffix], c)
			case first == "**":
				c.order = makeOrder(tierMulti, strings.Count(suffix, ".")+1, e.ordinal)
				e.multi[suffix] = append(e.multi[suffix], c)
			default:
				c.order = makeOrder(tierIntra, 0, e.ordinal)
				c.verify = true
				ix := e.intra[suffix]
				if ix == nil {
					ix = &intraIndex{}
					e.intra[suffix] = ix
				}
				ix.add(c, first)
			}
			e.stats.Wildcards++
		}
	}
	return nil
}

// Generation returns the generation given to Compile.
func (e *Engine) Generation() int64 { return e.generation }

// Checksum returns the compiled policy's checksum (policy.Policy.Checksum).
func (e *Engine) Checksum() string { return e.checksum }

// Precedence returns the rank Decide gives the endpoint at index of the
// entry key: when several endpoints would allow a request, the one with
// the lowest rank decides it (its L7 rules, tls and protocol apply). ok
// is false when the policy has no such endpoint. The ceiling prover uses
// it to know which endpoints can take a request from another.
func (e *Engine) Precedence(entry string, index int) (rank uint64, ok bool) {
	e.rankOnce.Do(e.fillRanks)
	rank, ok = e.rank[endpointRef{entry, index}]
	return rank, ok
}

// Stats returns what the Engine holds.
func (e *Engine) Stats() Stats { return e.stats }

// Decide decides one request. An entry allows it when one of the entry's
// endpoints selects the host and the port, and the calling binary or one
// of its first MaxAncestors ancestors matches one of the entry's binaries.
//
// Hosts: a DNS name is selected by an exact endpoint host, a wildcard
// pattern (policy.HostPattern) or a hostless endpoint (allowed_ips only;
// the dial is then restricted to allowed_ips, see Result.Scope). An IP
// literal is selected only by an endpoint whose host is that address or a
// hostless endpoint whose allowed_ips contain it — never by a name or
// wildcard. When several endpoints allow, the most specific wins: exact
// host or IP, then intra-label pattern, one-label "*", "**" (longer suffix
// first), hostless; ties go to the smallest entry key, then endpoint index.
// An IPv4-mapped literal ("::ffff:192.0.2.1") selects the IPv4 endpoint,
// as policy.HostPattern defines; the SSRF guard still refuses to dial it.
//
// A hostless endpoint selects only by port: it never yields
// port_not_allowed. Enforcement "audit" only marks the Result (see Audit).
//
// The index is exact for exact, IP, "*" and "**" hosts; intra-label
// candidates are confirmed with policy.HostPattern.Match. Decide never
// resolves names and allocates nothing for names whose binaries are
// literal paths.
func (e *Engine) Decide(req Request) Result {
	res := Result{Generation: e.generation, Reason: ReasonInvalidHost}
	host, addr, err := canonicalHost(req.Host)
	if err != nil {
		return res
	}
	res.Host = host
	if req.Port < 1 || req.Port > 65535 {
		res.Reason = ReasonInvalidPort
		return res
	}
	d := decider{host: host, port: req.Port, binary: req.Binary, ancestors: req.Ancestors, reason: ReasonNoMatchingEndpoint}
	if len(d.ancestors) > MaxAncestors {
		d.ancestors = d.ancestors[:MaxAncestors]
	}
	if addr.IsValid() {
		u := addr.Unmap()
		d.list(e.ips[u])
		if d.win == nil {
			for _, c := range e.hostless[req.Port] {
				if containsAddr(c.allowed, u) {
					d.consider(c)
				}
			}
		}
	} else {
		d.list(e.exact[host])
		if i := strings.IndexByte(host, '.'); i >= 0 && d.win == nil {
			suffix := host[i+1:]
			if ix := e.intra[suffix]; ix != nil {
				ix.each(host[:i], d.consider)
			}
			if d.win == nil {
				d.list(e.one[suffix])
			}
			for s := suffix; d.win == nil; {
				d.list(e.multi[s])
				j := strings.IndexByte(s, '.')
				if j < 0 {
					break
				}
				s = s[j+1:]
			}
		}
		if d.win == nil {
			d.list(e.hostless[req.Port])
		}
	}
	c := d.win
	if c == nil {
		c = d.why
		res.Reason = d.reason
	} else {
		res.Allowed = true
		res.Reason = ReasonNone
		res.MatchedBinary = d.matched
	}
	if c != nil {
		res.Entry, res.EntryName = c.entry.key, c.entry.name
		res.Endpoint, res.EndpointIndex = c.ep, c.index
		res.Audit = c.audit
		res.ExactHost = c.exactHost
		res.AllowedIPs = c.allowed
		res.OnlyAllowedIPs = c.pat == nil
	}
	return res
}

// decider is the state of one Decide call. Candidates may be considered
// in any order: the allowing candidate with the lowest order wins, and the
// deny reason is the highest reason, ties going to the lowest order.
type decider struct {
	host      string
	port      int
	binary    string
	ancestors []string

	win     *candidate // best allowing candidate
	matched string     // binary path that matched for win
	reason  Reason     // most specific deny reason so far
	why     *candidate // the candidate behind reason

	lastEntry *entry // memo of the last binary check
	lastPath  string
	lastOK    bool
}

// list considers a bucket sorted by order, stopping at the first allow.
func (d *decider) list(cs []*candidate) {
	for _, c := range cs {
		if d.win != nil && c.order > d.win.order {
			return
		}
		d.consider(c)
	}
}

func (d *decider) consider(c *candidate) {
	if d.win != nil && c.order > d.win.order {
		return
	}
	if c.verify && !c.pat.Match(d.host) {
		return
	}
	if !c.ep.HasPort(d.port) {
		d.note(ReasonPortNotAllowed, c)
		return
	}
	if d.lastEntry != c.entry {
		d.lastEntry = c.entry
		d.lastPath, d.lastOK = c.entry.matchBinary(d.binary, d.ancestors)
	}
	if d.lastOK {
		d.win, d.matched = c, d.lastPath
		return
	}
	if knownBinary(d.binary, d.ancestors) {
		d.note(ReasonBinaryNotAllowed, c)
	} else {
		d.note(ReasonBinaryUnknown, c)
	}
}

func (d *decider) note(r Reason, c *candidate) {
	if r > d.reason || r == d.reason && d.why != nil && c.order < d.why.order {
		d.reason, d.why = r, c
	}
}

// knownBinary reports whether the request names any absolute executable.
func knownBinary(binary string, ancestors []string) bool {
	if strings.HasPrefix(binary, "/") {
		return true
	}
	for _, a := range ancestors {
		if strings.HasPrefix(a, "/") {
			return true
		}
	}
	return false
}

// matchBinary returns the nearest of the request's binary and ancestors
// that matches one of the entry's binaries.
func (ent *entry) matchBinary(binary string, ancestors []string) (string, bool) {
	if ent.matchOne(binary) {
		return path.Clean(binary), true
	}
	for _, a := range ancestors {
		if ent.matchOne(a) {
			return path.Clean(a), true
		}
	}
	return "", false
}

func (ent *entry) matchOne(exe string) bool {
	if !strings.HasPrefix(exe, "/") {
		return false
	}
	exe = path.Clean(exe)
	if _, ok := ent.literal[exe]; ok {
		return true
	}
	for i := range ent.globs {
		g := &ent.globs[i]
		if g.mayMatch(exe) && policy.MatchBinary(g.pattern, exe) {
			return true
		}
	}
	return false
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
