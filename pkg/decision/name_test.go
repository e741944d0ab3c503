package decision

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// refName is Engine.Name the slow way: every endpoint with a DNS host
// pattern that matches the name.
func refName(p *policy.Policy, name string) (Name, bool) {
	var n Name
	found := false
	if _, addr, err := canonicalHost(name); err != nil || addr.IsValid() {
		return n, false
	}
	for _, np := range p.NetworkPolicies {
		for _, ep := range np.Endpoints {
			if ep.Host == "" {
				continue
			}
			hp, err := policy.CompileHostPattern(ep.Host)
			if err != nil || hp.IsIP() || !hp.Match(name) {
				continue
			}
			found = true
			n.Ports = append(n.Ports, ep.Ports...)
			n.ExactHost = n.ExactHost || !hp.IsWildcard()
			for _, s := range ep.AllowedIPs {
				n.AllowedIPs = append(n.AllowedIPs, netip.MustParsePrefix(s).Masked())
			}
		}
	}
	slices.Sort(n.Ports)
	n.Ports = slices.Compact(n.Ports)
	slices.SortFunc(n.AllowedIPs, func(a, b netip.Prefix) int { return a.Compare(b) })
	n.AllowedIPs = slices.Compact(n.AllowedIPs)
	return n, found
}

// Name agrees with the slow reference on random policies and names from
// the reference test's small alphabet (exact, "*", "**" and intra-label
// patterns, IP hosts and hostless endpoints), and whenever it answers a
// name, Decide allows that name on each of its ports for some binary of
// the policy: policy DNS answers no name the proxy would refuse for
// everyone.
func TestNameMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	named, unnamed := 0, 0
	for round := 0; round < 300; round++ {
		p := randPolicy(r)
		e, err := Compile(p, int64(round))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := 0; i < 200; i++ {
			req := randRequest(r)
			got, ok := e.Name(req.Host)
			want, wok := refName(p, req.Host)
			if ok != wok || !slices.Equal(got.Ports, want.Ports) || got.ExactHost != want.ExactHost || !slices.Equal(got.AllowedIPs, want.AllowedIPs) {
				t.Fatalf("round %d: Name(%q) = %+v %v; reference %+v %v\npolicy: %s", round, req.Host, got, ok, want, wok, p.Canonical())
			}
			if !ok {
				unnamed++
				continue
			}
			named++
			for _, port := range got.Ports {
				if !allowsSomeone(e, p, req.Host, port) {
					t.Fatalf("round %d: %s is named on port %d but Decide allows no binary there\npolicy: %s", round, req.Host, port, p.Canonical())
				}
			}
		}
	}
	if named < 1000 || unnamed < 1000 {
		t.Fatalf("weak coverage: %d named, %d not", named, unnamed)
	}
	t.Logf("%d names answered, %d refused", named, unnamed)
}

// allowsSomeone reports whether some binary the policy lists (a glob
// made concrete by the reference binaries) is allowed host:port.
func allowsSomeone(e *Engine, p *policy.Policy, host string, port int) bool {
	for _, b := range refBinaries {
		if e.Decide(Request{Host: host, Port: port, Binary: b}).Allowed {
			return true
		}
	}
	return false
}

func TestNameCases(t *testing.T) {
	e := compileTest(t, testPolicy)
	for _, c := range []struct {
		name  string
		ok    bool
		ports []int
		exact bool
	}{
		{"api.github.com", true, []int{443}, true},
		{"API.GitHub.com.", true, []int{443}, true},
		{"github.com", true, []int{22, 443}, true},
		{"raw.githubusercontent.com", true, []int{443}, false},
		{"githubusercontent.com", false, nil, false},
		{"a.b.files.pythonhosted.org", true, []int{443}, false},
		{"us-aiplatform.googleapis.com", true, []int{443}, false},
		{"x.svc.corp.example", true, []int{8080}, false},
		{"db.corp.example", true, []int{5432}, true},
		{"198.51.100.20", false, nil, false}, // an IP host is no name
		{"2001:db8::20", false, nil, false},
		{"unlisted.test", false, nil, false}, // hostless endpoints name nothing
		{"bad_name!.github.com", false, nil, false},
		{"", false, nil, false},
	} {
		n, ok := e.Name(c.name)
		if ok != c.ok || !slices.Equal(n.Ports, c.ports) || n.ExactHost != c.exact {
			t.Errorf("Name(%q) = %+v %v, want ports %v exact %v ok %v", c.name, n, ok, c.ports, c.exact, c.ok)
		}
	}
	if n, _ := e.Name("db.corp.example"); !slices.Equal(n.AllowedIPs, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}) {
		t.Errorf("db.corp.example allowed_ips %v", n.AllowedIPs)
	}
}
