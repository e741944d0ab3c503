package decision

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// refDecide is the obvious, slow decision: every endpoint of every entry,
// host selected by policy.HostPattern, binaries by policy.MatchBinary. It
// returns the outcome, the reason and which (entry, endpoint) Decide must
// report, using the documented specificity order.
func refDecide(p *policy.Policy, req Request) (bool, Reason, string, int) {
	host, err := CanonicalHost(req.Host)
	if err != nil {
		return false, ReasonInvalidHost, "", 0
	}
	if req.Port < 1 || req.Port > 65535 {
		return false, ReasonInvalidPort, "", 0
	}
	lit, isIP := netip.ParseAddr(host)
	type cand struct {
		kind, depth int
		key         string
		idx         int
		reason      Reason
	}
	var cands []cand
	chain := append([]string{req.Binary}, req.Ancestors[:min(len(req.Ancestors), MaxAncestors)]...)
	known := false
	for _, b := range chain {
		known = known || strings.HasPrefix(b, "/")
	}
	for key, np := range p.NetworkPolicies {
		binOK := false
		for _, exe := range chain {
			for _, b := range np.Binaries {
				if strings.HasPrefix(exe, "/") && policy.MatchBinary(b.Path, exe) {
					binOK = true
				}
			}
		}
		for i, ep := range np.Endpoints {
			c := cand{key: key, idx: i}
			if ep.Host == "" {
				if !ep.HasPort(req.Port) {
					continue // hostless endpoints select by port
				}
				if isIP == nil {
					in := false
					for _, pf := range ep.AllowedPrefixes() {
						in = in || pf.Contains(lit.Unmap())
					}
					if !in {
						continue
					}
				}
				c.kind = 4
			} else {
				hp := ep.HostPattern()
				if !hp.Match(host) {
					continue
				}
				switch first, suffix, _ := strings.Cut(hp.String(), "."); {
				case !hp.IsWildcard():
					c.kind = 0
				case first == "**":
					c.kind, c.depth = 3, -strings.Count(suffix, ".")
				case first == "*":
					c.kind = 2
				default:
					c.kind = 1
				}
			}
			switch {
			case !ep.HasPort(req.Port):
				c.reason = ReasonPortNotAllowed
			case binOK:
				c.reason = ReasonNone
			case known:
				c.reason = ReasonBinaryNotAllowed
			default:
				c.reason = ReasonBinaryUnknown
			}
			cands = append(cands, c)
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.depth, b.depth), cmp.Compare(a.key, b.key), cmp.Compare(a.idx, b.idx))
	})
	for _, c := range cands {
		if c.reason == ReasonNone {
			return true, ReasonNone, c.key, c.idx
		}
	}
	best := cand{reason: ReasonNoMatchingEndpoint}
	for _, c := range cands {
		if c.reason > best.reason {
			best = c
		}
	}
	return false, best.reason, best.key, best.idx
}

var (
	refLabels   = []string{"a", "b", "c", "ab", "x-y", "api", "z9"}
	refPorts    = []int{80, 443, 8080}
	refBinaries = []string{"/usr/bin/curl", "/usr/bin/git", "/usr/bin/python3.11", "/opt/a/bin/pip", "/opt/a/b/bin/pip", "/tmp/curl", "/bin/sh"}
	refPatterns = []string{"/usr/bin/curl", "/usr/bin/git", "/usr/bin/python3*", "/opt/**/bin/pip", "/usr/bin/*", "/bin/sh"}
	refIPs      = []string{"198.51.100.1", "198.51.100.2", "10.0.0.1", "2001:db8::1", "10.9.9.9"}
)

func randName(r *rand.Rand, n int) string {
	if n == 0 {
		return "test"
	}
	ls := make([]string, n)
	for i := range ls {
		ls[i] = refLabels[r.IntN(len(refLabels))]
	}
	return strings.Join(ls, ".") + ".test"
}

func randPolicy(r *rand.Rand) *policy.Policy {
	p := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{}}
	for e := 0; e < 1+r.IntN(6); e++ {
		np := &policy.NetworkPolicy{}
		for i := 0; i < 1+r.IntN(3); i++ {
			np.Binaries = append(np.Binaries, policy.Binary{Path: refPatterns[r.IntN(len(refPatterns))]})
		}
		for i := 0; i < 1+r.IntN(8); i++ {
			ep := &policy.Endpoint{Ports: []int{refPorts[r.IntN(len(refPorts))]}}
			if r.IntN(3) == 0 {
				ep.Ports = append(ep.Ports, refPorts[r.IntN(len(refPorts))])
			}
			switch r.IntN(7) {
			case 0:
				ep.Host = randName(r, r.IntN(3))
			case 1:
				ep.Host = "*." + randName(r, r.IntN(2))
			case 2:
				ep.Host = "**." + randName(r, r.IntN(2))
			case 3:
				l1, l2 := refLabels[r.IntN(len(refLabels))], refLabels[r.IntN(len(refLabels))]
				first := []string{l1 + "*", "*" + l1, l1 + "*" + l2, "*" + l1 + "*", "*-" + l1, l1 + "-*"}[r.IntN(6)]
				ep.Host = first + "." + randName(r, r.IntN(2))
			case 4:
				ep.Host = refIPs[r.IntN(len(refIPs))]
			case 5:
				ep.AllowedIPs = []string{"10.0.0.0/8", "198.51.100.0/31", "2001:db8::/126"}[r.IntN(3):][:1]
			default:
				ep.Host = randName(r, 1+r.IntN(2))
				ep.AllowedIPs = []string{"10.9.0.0/16"}
			}
			if ep.Host != "" {
				if _, err := policy.CompileHostPattern(ep.Host); err != nil {
					continue
				}
			}
			np.Endpoints = append(np.Endpoints, ep)
		}
		p.NetworkPolicies[fmt.Sprintf("e%d", e)] = np
	}
	return p
}

func randRequest(r *rand.Rand) Request {
	req := Request{Port: refPorts[r.IntN(len(refPorts))]}
	switch r.IntN(6) {
	case 0:
		req.Host = refIPs[r.IntN(len(refIPs))]
	case 1:
		req.Host = strings.ToUpper(randName(r, r.IntN(5))) + "."
	default:
		req.Host = randName(r, r.IntN(5))
	}
	if r.IntN(8) > 0 {
		req.Binary = refBinaries[r.IntN(len(refBinaries))]
	}
	for i := r.IntN(3); i > 0; i-- {
		req.Ancestors = append(req.Ancestors, refBinaries[r.IntN(len(refBinaries))])
	}
	return req
}

// Decide agrees with the slow reference on random policies and requests
// built from a small alphabet, so hosts collide with patterns often.
func TestDecideMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	allowed, denied := 0, map[Reason]int{}
	for round := 0; round < 300; round++ {
		p := randPolicy(r)
		e, err := Compile(p, int64(round))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := 0; i < 200; i++ {
			req := randRequest(r)
			got := e.Decide(req)
			ok, reason, key, idx := refDecide(p, req)
			if got.Allowed != ok || got.Reason != reason || (reason != ReasonNoMatchingEndpoint && (got.Entry != key || got.EndpointIndex != idx)) {
				t.Fatalf("round %d: Decide(%+v) = %v %s %s[%d]; reference %v %s %s[%d]\npolicy: %s",
					round, req, got.Allowed, got.Reason, got.Entry, got.EndpointIndex, ok, reason, key, idx, p.Canonical())
			}
			if ok {
				allowed++
			} else {
				denied[reason]++
			}
		}
	}
	// The random mix must exercise every outcome, or the test proves little.
	if allowed < 1000 || denied[ReasonNoMatchingEndpoint] < 1000 || denied[ReasonPortNotAllowed] < 200 || denied[ReasonBinaryNotAllowed] < 200 || denied[ReasonBinaryUnknown] < 50 {
		t.Fatalf("weak coverage: allowed %d, denied %v", allowed, denied)
	}
	t.Logf("allowed %d, denied %v", allowed, denied)
}

// Precedence ranks the endpoint Decide picks below every other endpoint
// that would also allow the request: the reference's allowing candidates,
// one policy at a time with only that endpoint kept, all rank higher.
func TestPrecedenceOrdersWinners(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	checked := 0
	for round := 0; round < 150; round++ {
		p := randPolicy(r)
		e, err := Compile(p, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			req := randRequest(r)
			got := e.Decide(req)
			if !got.Allowed {
				continue
			}
			win, ok := e.Precedence(got.Entry, got.EndpointIndex)
			if !ok {
				t.Fatalf("no precedence for the winner %s[%d]", got.Entry, got.EndpointIndex)
			}
			for key, np := range p.NetworkPolicies {
				for idx := range np.Endpoints {
					if key == got.Entry && idx == got.EndpointIndex {
						continue
					}
					one := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{
						key: {Binaries: np.Binaries, Endpoints: []*policy.Endpoint{np.Endpoints[idx]}},
					}}
					if ok, _, _, _ := refDecide(one, req); !ok {
						continue
					}
					rank, ok := e.Precedence(key, idx)
					if !ok || rank <= win {
						t.Fatalf("%s[%d] (rank %d) also allows %+v but does not rank above the winner %s[%d] (rank %d)", key, idx, rank, req, got.Entry, got.EndpointIndex, win)
					}
					checked++
				}
			}
		}
	}
	if checked < 500 {
		t.Fatalf("only %d competing endpoints checked", checked)
	}
	if _, ok := (&Engine{}).Precedence("none", 0); ok {
		t.Error("an empty engine ranks an endpoint")
	}
}
