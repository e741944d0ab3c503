package ceiling

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/decision"
	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/l7/rest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
)

// The oracle: what the proxy lets one request through, computed by the
// real code — pkg/decision picks the endpoint and says which names policy
// DNS answers, pkg/ssrf's guard checks the address,
// pkg/l7's Check judges HTTP requests under every reading of their path
// — and, for the transport, the conditions of the proxy's
// handle.go, inspect.go and transparent.go written out again here.

type transport int

const (
	tunnelSNI   transport = iota // CONNECT, bytes with a ClientHello naming the host
	tunnelOther                  // CONNECT, a ClientHello naming another host (or anything with tls: skip)
	native                       // raw bytes to a policy DNS synthetic address (transparent)
	httpReq                      // one HTTP request (forwarded or inspected)
)

type request struct {
	kind      transport
	host      string
	port      int
	binary    string
	ancestors []string
	addr      netip.Addr // the address the name resolves to
	method    string
	path      string
	query     url.Values
	ctype     string
	// cred names the provider whose placeholder the request carries
	// ("": none), in its body when credInBody, else in a header field.
	cred       string
	credInBody bool
}

func (r request) String() string {
	return fmt.Sprintf("{kind %d %s:%d %s<-%v addr %s %s %s?%s ct=%q cred=%q body=%v}", r.kind, r.host, r.port, r.binary, r.ancestors, r.addr, r.method, r.path, r.query.Encode(), r.ctype, r.cred, r.credInBody)
}

var guard = &ssrf.Guard{ControlPlanePorts: []int{}}

// allowedBy says whether p lets r through and, for an HTTP request, what
// the proxy does to it with credentials on the way (credentialEffects;
// a refusal for a placeholder is an effect, not a refusal: it guards the
// credential, and a policy that passes the placeholder unresolved
// instead grants nothing more).
func allowedBy(p *policy.Policy, eng *decision.Engine, r request) (bool, []string) {
	res := eng.Decide(decision.Request{Host: r.host, Port: r.port, Binary: r.binary, Ancestors: r.ancestors})
	if !res.Allowed {
		return false, nil
	}
	addr := r.addr
	if a, ok := ssrf.ParseHostLiteral(r.host); ok {
		addr = a
	}
	if guard.CheckScope(netip.AddrPortFrom(addr, uint16(r.port)), res.Scope()) != nil {
		return false, nil
	}
	ep := res.Endpoint
	inspected := ep.TLS != policy.TLSSkip && (ep.Protocol == policy.ProtocolREST || ep.L7()) // handle.go, inspects
	switch r.kind {
	case tunnelSNI:
		return !inspected, nil
	case tunnelOther:
		return !inspected && ep.TLS == policy.TLSSkip, nil // connect(..., sni = TLS != skip)
	case native:
		// Bytes that are neither TLS nor HTTP to the name's synthetic
		// address: the name must be one policy DNS answers on the port,
		// and the tunnel one that relays them (transparent.go decides
		// and serves it as a CONNECT).
		n, ok := eng.Name(r.host)
		return ok && slices.Contains(n.Ports, r.port) && !inspected, nil
	}
	effects := credentialEffects(ep, r)
	if !ep.L7() || res.Audit {
		return true, effects
	}
	path, err := l7.ParsePath(r.path)
	if err != nil {
		return false, nil
	}
	ok, _ := rest.Check(ep, &l7.Request{Method: r.method, Path: &path, Query: r.query, Field: func(name string) []string {
		if name == "Content-Type" && r.ctype != "" {
			return []string{r.ctype}
		}
		return nil
	}})
	return ok, effects
}

// credentialEffects is what the proxy's request preparation (pkg/proxy
// outgoing.go, after admission) does to an admitted HTTP request on
// endpoint ep, as far as the policy decides it (providers bound here by
// credential_binding; the credentials file's own endpoints are not the
// policy's): a placeholder of a provider the endpoint binds is resolved
// ("resolved:P"), one it does not bind is refused (false); a placeholder
// in a body is read only where the endpoint opts in and passes unread
// otherwise; a credential_signing endpoint re-signs every request
// ("signed:SERVICE/REGION"). A policy is within its ceiling only if each
// request it lets through gets no effect the ceiling would not give it.
func credentialEffects(ep *policy.Endpoint, r request) []string {
	var out []string
	if ep.CredentialSigning != "" {
		out = append(out, "signed:"+ep.SigningService+"/"+ep.SigningRegion)
	}
	if r.cred == "" || r.credInBody && !ep.RequestBodyCredentialRewrite {
		return out
	}
	if ep.CredentialBinding == nil || ep.CredentialBinding.Provider != r.cred {
		return []string{"refused"} // credential_endpoint_mismatch: nothing goes
	}
	return append(out, "resolved:"+r.cred)
}

// fsAllowed is what Landlock grants: a path beneath a read_only entry is
// readable, beneath a read_write one writable too.
func fsAllowed(p *policy.Policy, x string, write bool) bool {
	roots := p.Filesystem.ReadWrite
	if !write {
		roots = append(slices.Clone(p.Filesystem.ReadOnly), roots...)
	}
	return slices.ContainsFunc(roots, func(r string) bool { return pathUnder(x, r) })
}

// The universe random policies are drawn from: small, so patterns,
// requests and the ceiling's entries collide often.
var (
	uLabels   = []string{"a", "b", "api", "x-y", "z9"}
	uDomains  = []string{"ex.test", "b.ex.test", "other.test"}
	uPorts    = []int{80, 443, 8080}
	uPatterns = []string{"/usr/bin/curl", "/usr/bin/git", "/usr/bin/python3*", "/opt/**/bin/pip", "/usr/bin/*", "/usr/**", "/bin/sh", "/usr/bin/[cg]*"}
	uBinaries = []string{"/usr/bin/curl", "/usr/bin/git", "/usr/bin/python3.11", "/opt/a/bin/pip", "/opt/bin/pip", "/bin/sh", "/usr/local/bin/x", "/usr/bin/gh"}
	uMethods  = []string{"GET", "POST", "*", "DELETE", "PUT"}
	uPaths    = []string{"/v1/**", "/v1/*/x", "/**", "/a?c", "/v2/items", "*", "/v1/items/*", "/repo/info/refs", "**/git-upload-pack", "/a?c/**", "**"}
	uFS       = []string{"/usr", "/usr/bin", "/opt", "/opt/data", "/etc", "/var/lib", "/var"}
	uRW       = []string{"/var", "/var/lib", "/srv", "/srv/x"}
	uIPs      = []string{"198.51.100.7", "10.1.2.3"}
	uAllowed  = []string{"10.0.0.0/8", "10.1.0.0/16", "198.51.100.0/24", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func randHost(r *rand.Rand) (host string, allowed []string) {
	switch r.IntN(9) {
	case 0, 1, 2:
		return pick(r, uLabels) + "." + pick(r, uDomains), nil
	case 3:
		return "*." + pick(r, uDomains), nil
	case 4:
		return "**." + pick(r, uDomains), nil
	case 5:
		return pick(r, []string{"a*", "*y", "x-*", "*"}) + "." + pick(r, uDomains), nil
	case 6:
		return pick(r, uIPs), nil
	case 7:
		return "", []string{pick(r, uAllowed)}
	}
	return "*." + pick(r, uDomains), []string{pick(r, uAllowed)}
}

func randMatch(r *rand.Rand) policy.RequestMatch {
	m := policy.RequestMatch{Method: pick(r, uMethods), Path: pick(r, uPaths)}
	if r.IntN(5) == 0 {
		m.Query = map[string]policy.QueryMatch{pick(r, []string{"service", "page"}): {Any: []string{pick(r, []string{"*", "git-upload-pack", "1*"})}}}
	}
	return m
}

func randEndpoint(r *rand.Rand) *policy.Endpoint {
	host, allowed := randHost(r)
	e := &policy.Endpoint{Host: host, AllowedIPs: allowed, Ports: []int{pick(r, uPorts)}}
	if r.IntN(3) == 0 {
		e.Ports = append(e.Ports, pick(r, uPorts))
	}
	switch r.IntN(6) {
	case 0, 1:
		e.Protocol = policy.ProtocolREST
		if r.IntN(2) == 0 {
			e.Access = pick(r, []string{policy.AccessReadOnly, policy.AccessReadWrite, policy.AccessFull})
		} else {
			for i := 1 + r.IntN(3); i > 0; i-- {
				e.Rules = append(e.Rules, policy.Rule{Allow: randMatch(r)})
			}
		}
		if r.IntN(3) == 0 {
			e.DenyRules = []policy.RequestMatch{randMatch(r)}
		}
		if r.IntN(6) == 0 {
			e.Enforcement = policy.EnforcementAudit
		}
		randCredentials(r, e)
	case 2:
		e.Protocol = policy.ProtocolTCP
	case 3:
		e.TLS = policy.TLSSkip
	}
	return e
}

// The providers and AWS services credential fields name.
var (
	uProviders = []string{"p1", "p2"}
	uServices  = []string{"s3", "sts"}
	uRegions   = []string{"", "us-east-1"}
)

// randCredentials gives a protocol rest endpoint credential fields now
// and then: a binding, and body rewrite or SigV4 signing (never both).
func randCredentials(r *rand.Rand, e *policy.Endpoint) {
	if r.IntN(3) == 0 {
		e.CredentialBinding = &policy.CredentialBinding{Provider: pick(r, uProviders)}
	}
	switch r.IntN(6) {
	case 0:
		e.RequestBodyCredentialRewrite = true
	case 1:
		e.CredentialSigning, e.SigningService, e.SigningRegion = policy.SigningSigV4, pick(r, uServices), pick(r, uRegions)
	}
}

func randPolicy(r *rand.Rand) *policy.Policy {
	p := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{},
		Landlock: policy.Landlock{Compatibility: pick(r, []string{policy.CompatibilityHardRequirement, policy.CompatibilityHardRequirement, policy.CompatibilityBestEffort})},
		Process:  policy.Process{RunAsUser: pick(r, []string{"sandbox", "sandbox", "1500"}), RunAsGroup: "sandbox"}}
	for i := 0; i < 1+r.IntN(3); i++ {
		if r.IntN(2) == 0 {
			p.Filesystem.ReadOnly = append(p.Filesystem.ReadOnly, pick(r, uFS))
		} else {
			p.Filesystem.ReadWrite = append(p.Filesystem.ReadWrite, pick(r, uRW))
		}
	}
	p.Filesystem.IncludeWorkdir = r.IntN(3) == 0
	for e := 0; e < 1+r.IntN(4); e++ {
		np := &policy.NetworkPolicy{}
		for i := 0; i < 1+r.IntN(2); i++ {
			np.Binaries = append(np.Binaries, policy.Binary{Path: pick(r, uPatterns)})
		}
		for i := 0; i < 1+r.IntN(3); i++ {
			np.Endpoints = append(np.Endpoints, randEndpoint(r))
		}
		p.NetworkPolicies[fmt.Sprintf("e%d", e)] = np
	}
	return p
}

// narrow returns a policy derived from c by dropping and narrowing parts
// and, now and then, widening one: pairs near containment, both ways.
func narrow(r *rand.Rand, c *policy.Policy) *policy.Policy {
	p := c.Clone()
	p.Filesystem.ReadOnly = dropSome(r, p.Filesystem.ReadOnly)
	p.Filesystem.ReadWrite = dropSome(r, p.Filesystem.ReadWrite)
	if r.IntN(6) == 0 {
		p.Filesystem.ReadWrite = append(p.Filesystem.ReadWrite, pick(r, uRW))
	}
	if r.IntN(6) == 0 {
		p.Filesystem.IncludeWorkdir = true
	}
	if r.IntN(8) == 0 {
		p.Landlock.Compatibility = policy.CompatibilityBestEffort
	}
	for i, x := range p.Filesystem.ReadOnly {
		if r.IntN(3) == 0 {
			p.Filesystem.ReadOnly[i] = x + "/sub"
		}
	}
	for key, np := range p.NetworkPolicies {
		if r.IntN(4) == 0 {
			delete(p.NetworkPolicies, key)
			continue
		}
		if len(np.Binaries) > 1 && r.IntN(2) == 0 {
			np.Binaries = np.Binaries[:1]
		}
		if r.IntN(4) == 0 {
			np.Binaries[0].Path = pick(r, uBinaries)
		}
		var eps []*policy.Endpoint
		for _, e := range np.Endpoints {
			if r.IntN(4) == 0 {
				continue
			}
			narrowEndpoint(r, e)
			if r.IntN(4) == 0 {
				widenEndpoint(r, e)
			}
			if e.CredentialBinding != nil && r.IntN(3) == 0 {
				widenCredentials(r, e)
			}
			eps = append(eps, e)
		}
		if len(eps) == 0 {
			eps = []*policy.Endpoint{randEndpoint(r)}
		}
		np.Endpoints = eps
	}
	if r.IntN(5) == 0 {
		p.NetworkPolicies["extra"] = &policy.NetworkPolicy{Binaries: []policy.Binary{{Path: pick(r, uPatterns)}}, Endpoints: []*policy.Endpoint{randEndpoint(r)}}
	}
	return p
}

func narrowEndpoint(r *rand.Rand, e *policy.Endpoint) {
	if len(e.Ports) > 1 {
		e.Ports = e.Ports[:1]
	}
	if strings.HasPrefix(e.Host, "*.") || strings.HasPrefix(e.Host, "**.") {
		if r.IntN(2) == 0 {
			_, suffix, _ := strings.Cut(e.Host, ".")
			e.Host = pick(r, uLabels) + "." + suffix
		}
	}
	switch r.IntN(8) {
	case 0:
		if e.Protocol == "" && e.TLS == "" {
			e.Protocol, e.Access = policy.ProtocolREST, pick(r, []string{policy.AccessReadOnly, policy.AccessReadWrite})
		}
	case 1:
		if e.Access == policy.AccessReadWrite || e.Access == policy.AccessFull {
			e.Access = policy.AccessReadOnly
		}
	case 2:
		if len(e.Rules) > 1 {
			e.Rules = e.Rules[:1]
		}
	case 3:
		for i := range e.Rules {
			if e.Rules[i].Allow.Method == "*" {
				e.Rules[i].Allow.Method = "GET"
			}
			if e.Rules[i].Allow.Path == "/**" || e.Rules[i].Allow.Path == "*" {
				e.Rules[i].Allow.Path = "/v1/items/*"
			}
		}
	case 4:
		e.Enforcement = policy.EnforcementEnforce
	case 5:
		if e.Protocol == policy.ProtocolREST {
			e.DenyRules = append(e.DenyRules, randMatch(r))
		}
	case 6:
		e.CredentialBinding = nil
		e.RequestBodyCredentialRewrite = false
	case 7:
		e.CredentialSigning, e.SigningService, e.SigningRegion = "", "", ""
	}
}

// widenEndpoint makes one change that may take e beyond what it was.
func widenEndpoint(r *rand.Rand, e *policy.Endpoint) {
	switch r.IntN(8) {
	case 0:
		e.Host, e.AllowedIPs = randHost(r)
	case 1:
		if e.Protocol == "" {
			e.TLS = policy.TLSSkip
		}
	case 2:
		e.DenyRules = nil
	case 3:
		if e.Access == policy.AccessReadOnly || e.Access == policy.AccessReadWrite {
			e.Access = ""
			e.Rules = []policy.Rule{{Allow: policy.RequestMatch{Method: "GET", Path: pick(r, []string{"/v1/**", "/repo/info/refs", "/v2/items"})}}}
		}
	case 4:
		for i := range e.Rules {
			e.Rules[i].Allow.Path = strings.ReplaceAll(e.Rules[i].Allow.Path, "?", "*")
		}
	case 5:
		first, suffix, _ := strings.Cut(e.Host, ".")
		switch first {
		case "*":
			e.Host = "**." + suffix
		case "**":
			if _, parent, ok := strings.Cut(suffix, "."); ok && strings.Contains(parent, ".") {
				e.Host = "**." + parent
			}
		}
	case 6:
		e.Enforcement = policy.EnforcementAudit
	case 7:
		widenCredentials(r, e)
	}
}

// widenCredentials makes one change to a protocol rest endpoint's
// credential fields that may take it beyond what it was: another (or a
// first) binding, body rewrite, signing (for another service or region).
func widenCredentials(r *rand.Rand, e *policy.Endpoint) {
	if e.Protocol != policy.ProtocolREST {
		return
	}
	switch r.IntN(3) {
	case 0:
		e.CredentialBinding = &policy.CredentialBinding{Provider: pick(r, uProviders)}
	case 1:
		e.RequestBodyCredentialRewrite = e.CredentialSigning == ""
	case 2:
		if !e.RequestBodyCredentialRewrite {
			e.CredentialSigning, e.SigningService, e.SigningRegion = policy.SigningSigV4, pick(r, uServices), pick(r, uRegions)
		}
	}
}

func dropSome(r *rand.Rand, s []string) []string {
	var out []string
	for _, x := range s {
		if r.IntN(3) > 0 {
			out = append(out, x)
		}
	}
	return out
}

// valid normalises p through the loader; nil when the loader refuses it.
func valid(p *policy.Policy) *policy.Policy {
	q, err := policy.Parse(p.Canonical())
	if err != nil {
		return nil
	}
	return q
}

// instances returns names a host pattern selects (and a few it does not).
func instances(r *rand.Rand, host string) []string {
	if host == "" {
		return []string{pick(r, uLabels) + "." + pick(r, uDomains), pick(r, uIPs), "10.1.9.9"}
	}
	first, suffix, _ := strings.Cut(host, ".")
	label := func() string {
		return strings.ReplaceAll(first, "*", pick(r, []string{"", "a", "q-", "x-y"}))
	}
	switch {
	case first == "*":
		return []string{pick(r, uLabels) + "." + suffix, "q." + suffix}
	case first == "**":
		return []string{pick(r, uLabels) + "." + suffix, "a.b." + suffix, "q." + pick(r, uLabels) + "." + suffix}
	case strings.Contains(first, "*"):
		return []string{label() + "." + suffix, label() + "." + suffix}
	}
	return []string{host}
}

// paths returns request paths a rule glob matches, and some it does not.
func paths(r *rand.Rand, g string) []string {
	fill := func() string {
		return pick(r, []string{"", "x", "items/7", "a/b", "info/refs", "q"})
	}
	var out []string
	for i := 0; i < 3; i++ {
		s := strings.ReplaceAll(g, "**", "*")
		var b strings.Builder
		for _, c := range s {
			switch c {
			case '*':
				b.WriteString(fill())
			case '?':
				b.WriteByte(pick(r, []byte("bxZ/")))
			default:
				b.WriteRune(c)
			}
		}
		p := b.String()
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		out = append(out, p)
	}
	return append(out, "/repo/info/refs", "/r/git-upload-pack", "/v1/items/7", "/V1/Items/7", "/v1/x/",
		"/v1/%C3%A9", "/a%2Fc", "/v1;x/items", "/v2/items.")
}

func randRequests(r *rand.Rand, p, c *policy.Policy, n int) []request {
	var hosts []string
	var globs []string
	for _, pol := range []*policy.Policy{p, c} {
		for _, np := range pol.NetworkPolicies {
			for _, e := range np.Endpoints {
				hosts = append(hosts, instances(r, e.Host)...)
				for _, ru := range e.Rules {
					globs = append(globs, ru.Allow.Path)
				}
				for _, d := range e.DenyRules {
					globs = append(globs, d.Path)
				}
			}
		}
	}
	globs = append(globs, "/**")
	out := make([]request, 0, n)
	for i := 0; i < n; i++ {
		q := request{
			kind:   transport(r.IntN(4)),
			host:   pick(r, hosts),
			port:   pick(r, uPorts),
			binary: pick(r, uBinaries),
			addr:   netip.MustParseAddr(pick(r, []string{"198.51.100.7", "10.1.2.3", "172.16.0.1", "fd00::1", "10.9.0.5", "192.168.1.1"})),
			method: pick(r, []string{"GET", "POST", "get", "DELETE", "PUT", "HEAD", "PATCH", "Post"}),
			path:   pick(r, paths(r, pick(r, globs))),
		}
		if r.IntN(3) == 0 {
			q.ancestors = []string{pick(r, uBinaries)}
		}
		if r.IntN(2) == 0 {
			aimAt(r, p, &q)
			if r.IntN(2) == 0 {
				// An ancestor some ceiling entry lists: it can make a
				// ceiling endpoint outrank the one that covers q.
				var other request
				aimAt(r, c, &other)
				q.ancestors = []string{other.binary}
			}
		}
		switch r.IntN(4) {
		case 0:
			q.query = url.Values{"service": {pick(r, []string{"git-receive-pack", "git-upload-pack"})}}
		case 1:
			q.query = url.Values{"page": {pick(r, []string{"1", "12", "x"})}}
		}
		if r.IntN(3) == 0 {
			q.ctype = policy.GitUploadPackRequestType
		}
		if r.IntN(2) == 0 {
			q.cred, q.credInBody = pick(r, uProviders), r.IntN(3) == 0
		}
		out = append(out, q)
	}
	return out
}

// binsCache holds, per entry, the universe's binaries its patterns match.
var binsCache = map[*policy.NetworkPolicy][]string{}

// aimAt points q at one endpoint of p: a destination it selects, one of
// its ports, a binary its entry lists, a path one of its rules matches.
func aimAt(r *rand.Rand, p *policy.Policy, q *request) {
	keys := sortedKeys(p.NetworkPolicies)
	if len(keys) == 0 {
		return
	}
	np := p.NetworkPolicies[pick(r, keys)]
	e := pick(r, np.Endpoints)
	q.host = pick(r, instances(r, e.Host))
	q.port = pick(r, e.Ports)
	bins, ok := binsCache[np]
	if !ok {
		for _, b := range uBinaries {
			if slices.ContainsFunc(np.Binaries, func(pb policy.Binary) bool { return policy.MatchBinary(pb.Path, b) }) {
				bins = append(bins, b)
			}
		}
		binsCache[np] = bins
	}
	if len(bins) > 0 {
		q.binary = pick(r, bins)
	}
	if len(e.Rules) > 0 {
		ru := pick(r, e.Rules).Allow
		q.path = pick(r, paths(r, ru.Path))
		if ru.Method != "*" && r.IntN(4) > 0 {
			q.method = ru.Method
		}
	}
}

// Containment agrees with brute force: whenever Contains proves p within
// c, no generated request (nor filesystem access) is allowed by p and
// refused by c, judged by the real decision, SSRF, policy DNS and L7 code.
// The pairs are random policies and narrowed copies of them, so both
// proofs and refusals are common; the test fails when too few pairs are
// proved (a prover that refuses everything is sound and useless).
func TestContainsAgreesWithBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 2026))
	proved, refused, witnessed := 0, 0, 0
	for round := 0; round < 3000; round++ {
		c := valid(randPolicy(r))
		if c == nil {
			continue
		}
		p := valid(narrow(r, c))
		if p == nil {
			continue
		}
		pe, err := decision.Compile(p, 1)
		if err != nil {
			t.Fatal(err)
		}
		ce, err := decision.Compile(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		xs := Contains(c, p, Options{})
		clear(binsCache)
		reqs := randRequests(r, p, c, 400)
		var witness *request
		for i := range reqs {
			pOK, pEffects := allowedBy(p, pe, reqs[i])
			cOK, cEffects := allowedBy(c, ce, reqs[i])
			if slices.Contains(pEffects, "refused") {
				continue
			}
			if slices.Contains(cEffects, "refused") {
				cEffects = nil
			}
			if pOK && (!cOK || !subset(pEffects, cEffects)) {
				witness = &reqs[i]
				break
			}
		}
		fsWitness := ""
		for _, x := range append(append(slices.Clone(uFS), uRW...), "/usr/bin/x", "/opt/data/f", "/var/lib/y", "/etc/sub", "/srv/x/y") {
			for _, w := range []bool{false, true} {
				if fsAllowed(p, x, w) && !fsAllowed(c, x, w) {
					fsWitness = fmt.Sprintf("%s write=%v", x, w)
				}
			}
		}
		if len(xs) == 0 {
			proved++
			if witness != nil || fsWitness != "" {
				t.Fatalf("round %d: Contains proved p within c, but %v %s is allowed by p and refused by c\nceiling: %s\npolicy: %s", round, witness, fsWitness, c.Canonical(), p.Canonical())
			}
			continue
		}
		refused++
		if witness != nil || fsWitness != "" {
			witnessed++
		}
	}
	t.Logf("proved %d, refused %d (%d with a witness of excess)", proved, refused, witnessed)
	if proved < 250 || witnessed < 700 {
		t.Fatalf("weak coverage: proved %d, refused with a witness %d", proved, witnessed)
	}
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// Every policy is within itself: the prover's incompleteness never
// refuses a policy as its own ceiling (a union-free comparison, and each
// endpoint that outranks another in the ceiling outranks it in the policy
// too).
func TestContainsIsReflexive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	n := 0
	for round := 0; round < 2000; round++ {
		p := valid(randPolicy(r))
		if p == nil {
			continue
		}
		n++
		if xs := Contains(p, p, Options{}); len(xs) > 0 {
			t.Fatalf("round %d: a policy is not within itself: %v\n%s", round, xs[0], p.Canonical())
		}
	}
	if n < 500 {
		t.Fatalf("only %d valid policies", n)
	}
}
