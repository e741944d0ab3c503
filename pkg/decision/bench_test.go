package decision

import (
	"fmt"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// bigPolicy is a valid policy with 40 entries of 250 endpoints each
// (10,000): per entry 175 exact hosts, 37 "*." hosts, 25 "**." hosts and
// 13 intra-label patterns, three binaries (one literal, one glob, curl).
func bigPolicy(tb testing.TB) *policy.Policy {
	tb.Helper()
	var y strings.Builder
	y.WriteString("version: 1\nnetwork_policies:\n")
	n := 0
	for k := 0; k < 40; k++ {
		fmt.Fprintf(&y, "  team%d:\n    endpoints:\n", k)
		for i := 0; i < 250; i++ {
			switch {
			case i < 175:
				fmt.Fprintf(&y, "      - {host: svc%d.team%d.example.com, port: 443}\n", n, k)
			case i < 212:
				fmt.Fprintf(&y, "      - {host: \"*.cdn%d.example.net\", port: 443}\n", n)
			case i < 237:
				fmt.Fprintf(&y, "      - {host: \"**.zone%d.example.org\", ports: [443, 8443]}\n", n)
			default:
				fmt.Fprintf(&y, "      - {host: \"*-r%d.example.io\", port: 443}\n", n)
			}
			n++
		}
		fmt.Fprintf(&y, "    binaries:\n      - path: /usr/bin/tool%d\n      - path: /opt/team%d/bin/*\n      - path: /usr/bin/curl\n", k, k)
	}
	p, err := policy.Parse([]byte(y.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

var benchRequests = []struct {
	name    string
	req     Request
	allowed bool
}{
	{"exact_hit", Request{Host: "svc7100.team28.example.com", Port: 443, Binary: "/usr/bin/tool28"}, true},
	{"exact_hit_ancestor", Request{Host: "svc7100.team28.example.com", Port: 443, Binary: "/usr/bin/node", Ancestors: []string{"/usr/bin/bash", "/usr/bin/tool28"}}, true},
	{"exact_hit_glob_binary", Request{Host: "SVC7100.team28.example.com.", Port: 443, Binary: "/opt/team28/bin/agent"}, true},
	{"exact_miss", Request{Host: "svc7100.team29.example.com", Port: 443, Binary: "/usr/bin/curl"}, false},
	{"one_label_hit", Request{Host: "static.cdn9190.example.net", Port: 443, Binary: "/usr/bin/curl"}, true},
	{"multi_label_hit", Request{Host: "a.b.c.zone9220.example.org", Port: 8443, Binary: "/usr/bin/curl"}, true},
	{"intra_label_hit", Request{Host: "eu-west-r9245.example.io", Port: 443, Binary: "/usr/bin/curl"}, true},
	{"wildcard_miss", Request{Host: "a.b.c.cdn99999.example.net", Port: 443, Binary: "/usr/bin/curl"}, false},
	{"ip_literal_miss", Request{Host: "0x7f.1", Port: 443, Binary: "/usr/bin/curl"}, false},
	{"binary_denied_64_ancestors", Request{Host: "svc7100.team28.example.com", Port: 443, Binary: "/usr/bin/python3", Ancestors: ancestors64()}, false},
}

func ancestors64() []string {
	a := make([]string, MaxAncestors)
	for i := range a {
		a[i] = fmt.Sprintf("/usr/bin/shell%d", i)
	}
	return a
}

// BenchmarkDecide measures Decide on the 10,000-endpoint policy; the
// "linear" sub-benchmarks are the baseline: every endpoint's HostPattern
// tried in turn, as an unindexed engine would.
func BenchmarkDecide(b *testing.B) {
	p := bigPolicy(b)
	e, err := Compile(p, 1)
	if err != nil {
		b.Fatal(err)
	}
	if s := e.Stats(); s.Endpoints != 10000 {
		b.Fatalf("policy has %d endpoints", s.Endpoints)
	}
	for _, br := range benchRequests {
		if r := e.Decide(br.req); r.Allowed != br.allowed {
			b.Fatalf("%s: Decide = %+v; want allowed %v", br.name, r, br.allowed)
		}
		b.Run(br.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.Decide(br.req)
			}
		})
	}
	type pat struct {
		hp    *policy.HostPattern
		ep    *policy.Endpoint
		entry *policy.NetworkPolicy
	}
	var all []pat
	for _, np := range p.NetworkPolicies {
		for _, ep := range np.Endpoints {
			all = append(all, pat{ep.HostPattern(), ep, np})
		}
	}
	linear := func(req Request) bool {
		h, _ := CanonicalHost(req.Host)
		for _, x := range all {
			if x.hp.Match(h) && x.ep.HasPort(req.Port) {
				for _, bin := range x.entry.Binaries {
					if policy.MatchBinary(bin.Path, req.Binary) {
						return true
					}
				}
			}
		}
		return false
	}
	for _, name := range []string{"exact_hit", "wildcard_miss"} {
		for _, br := range benchRequests {
			if br.name != name {
				continue
			}
			b.Run("linear_baseline_"+name, func(b *testing.B) {
				for b.Loop() {
					linear(br.req)
				}
			})
		}
	}
}

func BenchmarkCompile10k(b *testing.B) {
	p := bigPolicy(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(p, 1); err != nil {
			b.Fatal(err)
		}
	}
}
