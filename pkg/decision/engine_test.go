package decision

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

const testPolicy = `
version: 1
network_policies:
  github:
    name: GitHub
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        access: read-only
        enforcement: audit
      - host: github.com
        ports: [443, 22]
      - host: "*.githubusercontent.com"
        port: 443
    binaries:
      - path: /usr/bin/git
      - path: /usr/lib/git-core/*
  pypi:
    endpoints:
      - host: pypi.org
        port: 443
      - host: "**.pythonhosted.org"
        port: 443
    binaries:
      - path: /usr/bin/python3*
      - path: /opt/**/bin/pip
  google:
    endpoints:
      - host: "*-aiplatform.googleapis.com"
        port: 443
      - host: "*.googleapis.com"
        port: 443
    binaries:
      - path: /usr/bin/curl
  internal:
    endpoints:
      - host: db.corp.example
        port: 5432
        allowed_ips: [10.1.0.0/16]
      - host: "*.svc.corp.example"
        port: 8080
        allowed_ips: [10.2.0.0/16]
      - host: 198.51.100.20
        port: 8443
      - host: 2001:db8::20
        port: 8443
      - allowed_ips: [10.9.0.0/16, 198.51.100.128/25]
        port: 9000
    binaries:
      - path: /usr/bin/curl
  curl-github:
    endpoints:
      - host: api.github.com
        port: 443
    binaries:
      - path: /usr/bin/curl
`

func compileTest(t testing.TB, yaml string) *Engine {
	t.Helper()
	p, err := policy.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	e, err := Compile(p, 7)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return e
}

func TestDecide(t *testing.T) {
	e := compileTest(t, testPolicy)
	src, _ := policy.Parse([]byte(testPolicy))
	git := "/usr/bin/git"
	curl := "/usr/bin/curl"
	tests := []struct {
		name      string
		req       Request
		allowed   bool
		reason    Reason
		entry     string
		endpoint  string // expected Endpoint.Host; "-" for hostless
		matched   string
		exactHost bool
		onlyIPs   bool
		audit     bool
	}{
		{"exact", Request{Host: "github.com", Port: 443, Binary: git}, true, ReasonNone, "github", "github.com", git, true, false, false},
		{"exact second port", Request{Host: "github.com", Port: 22, Binary: git}, true, ReasonNone, "github", "github.com", git, true, false, false},
		{"exact case and dot", Request{Host: "GitHub.COM.", Port: 443, Binary: git}, true, ReasonNone, "github", "github.com", git, true, false, false},
		{"audit endpoint", Request{Host: "api.github.com", Port: 443, Binary: git}, true, ReasonNone, "github", "api.github.com", git, true, false, true},
		{"same host other entry", Request{Host: "api.github.com", Port: 443, Binary: curl}, true, ReasonNone, "curl-github", "api.github.com", curl, true, false, false},
		{"one label", Request{Host: "raw.githubusercontent.com", Port: 443, Binary: git}, true, ReasonNone, "github", "*.githubusercontent.com", git, false, false, false},
		{"one label not two", Request{Host: "a.raw.githubusercontent.com", Port: 443, Binary: git}, false, ReasonNoMatchingEndpoint, "", "", "", false, false, false},
		{"one label not apex", Request{Host: "githubusercontent.com", Port: 443, Binary: git}, false, ReasonNoMatchingEndpoint, "", "", "", false, false, false},
		{"multi one", Request{Host: "files.pythonhosted.org", Port: 443, Binary: "/usr/bin/python3.11"}, true, ReasonNone, "pypi", "**.pythonhosted.org", "/usr/bin/python3.11", false, false, false},
		{"multi deep", Request{Host: "a.b.c.pythonhosted.org", Port: 443, Binary: "/opt/venv/x/bin/pip"}, true, ReasonNone, "pypi", "**.pythonhosted.org", "/opt/venv/x/bin/pip", false, false, false},
		{"multi not apex", Request{Host: "pythonhosted.org", Port: 443, Binary: "/usr/bin/python3"}, false, ReasonNoMatchingEndpoint, "", "", "", false, false, false},
		{"intra beats one label", Request{Host: "us-central1-aiplatform.googleapis.com", Port: 443, Binary: curl}, true, ReasonNone, "google", "*-aiplatform.googleapis.com", curl, false, false, false},
		{"one label fallback", Request{Host: "storage.googleapis.com", Port: 443, Binary: curl}, true, ReasonNone, "google", "*.googleapis.com", curl, false, false, false},
		{"exact with allowed_ips", Request{Host: "db.corp.example", Port: 5432, Binary: curl}, true, ReasonNone, "internal", "db.corp.example", curl, true, false, false},
		{"wildcard with allowed_ips", Request{Host: "api.svc.corp.example", Port: 8080, Binary: curl}, true, ReasonNone, "internal", "*.svc.corp.example", curl, false, false, false},
		{"ip host", Request{Host: "198.51.100.20", Port: 8443, Binary: curl}, true, ReasonNone, "internal", "198.51.100.20", curl, true, false, false},
		{"ip host hex spelling", Request{Host: "0xc6.0x33.0x64.0x14", Port: 8443, Binary: curl}, true, ReasonNone, "internal", "198.51.100.20", curl, true, false, false},
		{"ip host decimal spelling", Request{Host: "3325256724", Port: 8443, Binary: curl}, true, ReasonNone, "internal", "198.51.100.20", curl, true, false, false},
		{"ip host mapped", Request{Host: "[::ffff:198.51.100.20]", Port: 8443, Binary: curl}, true, ReasonNone, "internal", "198.51.100.20", curl, true, false, false},
		{"ip6 host", Request{Host: "[2001:db8:0:0::20]", Port: 8443, Binary: curl}, true, ReasonNone, "internal", "2001:db8::20", curl, true, false, false},
		{"ip host wrong port", Request{Host: "198.51.100.20", Port: 443, Binary: curl}, false, ReasonPortNotAllowed, "internal", "198.51.100.20", "", true, false, false},
		{"other ip", Request{Host: "198.51.100.21", Port: 8443, Binary: curl}, false, ReasonNoMatchingEndpoint, "", "", "", false, false, false},
		{"hostless by ip", Request{Host: "10.9.1.2", Port: 9000, Binary: curl}, true, ReasonNone, "internal", "-", curl, false, true, false},
		{"hostless by public ip", Request{Host: "198.51.100.200", Port: 9000, Binary: curl}, true, ReasonNone, "internal", "-", curl, false, true, false},
		{"hostless ip outside", Request{Host: "198.51.100.21", Port: 9000, Binary: curl}, false, ReasonNoMatchingEndpoint, "", "", "", false, false, false},
		{"hostless by name", Request{Host: "anything.example", Port: 9000, Binary: curl}, true, ReasonNone, "internal", "-", curl, false, true, false},
		{"hostless other port", Request{Host: "anything.example", Port: 9001, Binary: curl}, false, ReasonNoMatchingEndpoint, "", "", "", false, false, false},
		{"ip not selected by name entries", Request{Host: "140.82.112.3", Port: 443, Binary: git}, false, ReasonNoMatchingEndpoint, "", "", "", false, false, false},
		// Binaries.
		{"binary not allowed", Request{Host: "github.com", Port: 443, Binary: "/usr/bin/python3"}, false, ReasonBinaryNotAllowed, "github", "github.com", "", true, false, false},
		{"copy of curl in tmp", Request{Host: "storage.googleapis.com", Port: 443, Binary: "/tmp/curl"}, false, ReasonBinaryNotAllowed, "google", "*.googleapis.com", "", false, false, false},
		{"glob one component", Request{Host: "github.com", Port: 443, Binary: "/usr/lib/git-core/git-remote-https"}, true, ReasonNone, "github", "github.com", "/usr/lib/git-core/git-remote-https", true, false, false},
		{"glob not deeper", Request{Host: "github.com", Port: 443, Binary: "/usr/lib/git-core/x/git"}, false, ReasonBinaryNotAllowed, "github", "github.com", "", true, false, false},
		{"ancestor", Request{Host: "github.com", Port: 443, Binary: "/usr/bin/ssh", Ancestors: []string{"/usr/bin/bash", git, "/sbin/init"}}, true, ReasonNone, "github", "github.com", git, true, false, false},
		{"nearest ancestor reported", Request{Host: "github.com", Port: 443, Binary: "/usr/bin/ssh", Ancestors: []string{"/usr/lib/git-core/git-remote-ssh", git}}, true, ReasonNone, "github", "github.com", "/usr/lib/git-core/git-remote-ssh", true, false, false},
		{"unclean path", Request{Host: "github.com", Port: 443, Binary: "/usr//bin/./git"}, true, ReasonNone, "github", "github.com", git, true, false, false},
		{"relative binary", Request{Host: "github.com", Port: 443, Binary: "usr/bin/git"}, false, ReasonBinaryUnknown, "github", "github.com", "", true, false, false},
		{"unknown binary", Request{Host: "github.com", Port: 443}, false, ReasonBinaryUnknown, "github", "github.com", "", true, false, false},
		{"unknown binary known ancestor", Request{Host: "github.com", Port: 443, Ancestors: []string{"/usr/bin/bash"}}, false, ReasonBinaryNotAllowed, "github", "github.com", "", true, false, false},
		// Reason precedence: binary > port > no endpoint.
		{"port not allowed", Request{Host: "github.com", Port: 80, Binary: git}, false, ReasonPortNotAllowed, "github", "github.com", "", true, false, false},
		{"binary beats port", Request{Host: "api.github.com", Port: 443, Binary: "/usr/bin/wget"}, false, ReasonBinaryNotAllowed, "curl-github", "api.github.com", "", true, false, false},
		{"no endpoint", Request{Host: "example.com", Port: 443, Binary: git}, false, ReasonNoMatchingEndpoint, "", "", "", false, false, false},
		// Invalid requests.
		{"invalid host", Request{Host: "exa mple.com", Port: 443, Binary: git}, false, ReasonInvalidHost, "", "", "", false, false, false},
		{"numeric tld", Request{Host: "github.123", Port: 443, Binary: git}, false, ReasonInvalidHost, "", "", "", false, false, false},
		{"port 0", Request{Host: "github.com", Port: 0, Binary: git}, false, ReasonInvalidPort, "", "", "", false, false, false},
		{"port 65536", Request{Host: "github.com", Port: 65536, Binary: git}, false, ReasonInvalidPort, "", "", "", false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.Decide(tc.req)
			if r.Allowed != tc.allowed || r.Reason != tc.reason || r.Entry != tc.entry {
				t.Fatalf("Decide(%+v) = allowed %v reason %s entry %q; want %v %s %q", tc.req, r.Allowed, r.Reason, r.Entry, tc.allowed, tc.reason, tc.entry)
			}
			if r.Generation != 7 {
				t.Errorf("Generation = %d", r.Generation)
			}
			if tc.entry == "" {
				if r.Endpoint != nil {
					t.Errorf("Endpoint = %+v; want nil", r.Endpoint)
				}
				return
			}
			wantHost := tc.endpoint
			if wantHost == "-" {
				wantHost = ""
			}
			if r.Endpoint == nil || r.Endpoint.Host != wantHost || !sameEndpoint(src.NetworkPolicies[r.Entry].Endpoints[r.EndpointIndex], r.Endpoint) {
				t.Fatalf("endpoint %d %+v; want host %q", r.EndpointIndex, r.Endpoint, tc.endpoint)
			}
			if r.MatchedBinary != tc.matched || r.ExactHost != tc.exactHost || r.OnlyAllowedIPs != tc.onlyIPs || r.Audit != tc.audit {
				t.Errorf("matched %q exact %v onlyIPs %v audit %v; want %q %v %v %v", r.MatchedBinary, r.ExactHost, r.OnlyAllowedIPs, r.Audit, tc.matched, tc.exactHost, tc.onlyIPs, tc.audit)
			}
			if s := r.Scope(); s.ExactHost != r.ExactHost || s.OnlyAllowedIPs != r.OnlyAllowedIPs || !slices.Equal(s.AllowedIPs, r.AllowedIPs) {
				t.Errorf("Scope() = %+v does not reflect the result", s)
			}
		})
	}
}

func TestDecideDetails(t *testing.T) {
	e := compileTest(t, testPolicy)
	r := e.Decide(Request{Host: "DB.corp.example.", Port: 5432, Binary: "/usr/bin/curl"})
	if !r.Allowed || r.Host != "db.corp.example" || !slices.Equal(r.AllowedIPs, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}) {
		t.Errorf("got %+v", r)
	}
	r = e.Decide(Request{Host: "api.github.com", Port: 443, Binary: "/usr/bin/git"})
	if r.EntryName != "GitHub" || r.Endpoint.Protocol != policy.ProtocolREST || r.Endpoint.Access != policy.AccessReadOnly {
		t.Errorf("L7 settings not exposed: %+v %+v", r, r.Endpoint)
	}
	r = e.Decide(Request{Host: "0x7f.1", Port: 443})
	if r.Host != "127.0.0.1" || r.Reason != ReasonNoMatchingEndpoint {
		t.Errorf("literal host not canonicalised: %+v", r)
	}
	if e.Generation() != 7 || len(e.Checksum()) != 64 {
		t.Errorf("Generation %d Checksum %q", e.Generation(), e.Checksum())
	}
	p, _ := policy.Parse([]byte(testPolicy))
	if e.Checksum() != p.Checksum() {
		t.Error("Checksum differs from the policy's")
	}
	want := Stats{Entries: 5, Endpoints: 13, ExactHosts: 5, IPHosts: 2, Wildcards: 5, Hostless: 1}
	if got := e.Stats(); got != want {
		t.Errorf("Stats = %+v; want %+v", got, want)
	}
}

// Only the nearest MaxAncestors ancestors count.
func TestDecideAncestorLimit(t *testing.T) {
	e := compileTest(t, testPolicy)
	chain := make([]string, MaxAncestors+1)
	for i := range chain {
		chain[i] = fmt.Sprintf("/usr/bin/sh%d", i)
	}
	chain[MaxAncestors-1] = "/usr/bin/git"
	if r := e.Decide(Request{Host: "github.com", Port: 443, Binary: "/x", Ancestors: chain}); !r.Allowed {
		t.Errorf("ancestor %d not consulted: %s", MaxAncestors, r.Reason)
	}
	chain[MaxAncestors-1], chain[MaxAncestors] = "/usr/bin/sh", "/usr/bin/git"
	if r := e.Decide(Request{Host: "github.com", Port: 443, Binary: "/x", Ancestors: chain}); r.Allowed || r.Reason != ReasonBinaryNotAllowed {
		t.Errorf("ancestor %d consulted: %+v", MaxAncestors+1, r)
	}
}

func TestDecideEmptyPolicy(t *testing.T) {
	e, err := Compile(policy.Default(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"github.com", "127.0.0.1", "localhost"} {
		if r := e.Decide(Request{Host: h, Port: 443, Binary: "/usr/bin/curl"}); r.Allowed || r.Reason != ReasonNoMatchingEndpoint {
			t.Errorf("default policy: %s → %+v", h, r)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	base := func() *policy.Policy {
		p, err := policy.Parse([]byte(testPolicy))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name   string
		mutate func(p *policy.Policy)
		want   string
	}{
		{"null entry", func(p *policy.Policy) { p.NetworkPolicies["x.y"] = nil }, `network_policies."x.y": entry is null`},
		{"null endpoint", func(p *policy.Policy) { p.NetworkPolicies["pypi"].Endpoints[1] = nil }, "network_policies.pypi.endpoints[1]: endpoint is null"},
		{"bad host", func(p *policy.Policy) { p.NetworkPolicies["pypi"].Endpoints[0].Host = "*.com" }, `network_policies.pypi.endpoints[0].host: "*.com": a wildcard must be followed`},
		{"no ports", func(p *policy.Policy) { p.NetworkPolicies["pypi"].Endpoints[0].Ports = nil }, "network_policies.pypi.endpoints[0].ports: no ports"},
		{"bad port", func(p *policy.Policy) { p.NetworkPolicies["pypi"].Endpoints[0].Ports = []int{70000} }, "network_policies.pypi.endpoints[0].ports: 70000 is outside 1-65535"},
		{"bad allowed_ips", func(p *policy.Policy) { p.NetworkPolicies["internal"].Endpoints[0].AllowedIPs = []string{"10.0.0.1"} }, `network_policies.internal.endpoints[0].allowed_ips[0]: "10.0.0.1" is not a CIDR prefix`},
		{"hostless without ips", func(p *policy.Policy) { p.NetworkPolicies["internal"].Endpoints[4].AllowedIPs = nil }, "network_policies.internal.endpoints[4].host: an endpoint needs a host or allowed_ips"},
		{"relative binary", func(p *policy.Policy) { p.NetworkPolicies["google"].Binaries[0].Path = "curl" }, "network_policies.google.binaries[0].path: must be an absolute path"},
	}
	for _, tc := range tests {
		p := base()
		tc.mutate(p)
		_, err := Compile(p, 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Compile = %v; want %q", tc.name, err, tc.want)
		}
	}
	if _, err := Compile(nil, 1); err == nil {
		t.Error("Compile(nil) succeeded")
	}
}

// The Engine works on its own copy of the policy.
func TestCompileCopies(t *testing.T) {
	p, err := policy.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	e, err := Compile(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	p.NetworkPolicies["github"].Endpoints[1].Ports = []int{80}
	p.NetworkPolicies["github"].Binaries[0].Path = "/usr/bin/wget"
	delete(p.NetworkPolicies, "pypi")
	if r := e.Decide(Request{Host: "github.com", Port: 443, Binary: "/usr/bin/git"}); !r.Allowed {
		t.Errorf("engine changed with the policy: %+v", r)
	}
	if r := e.Decide(Request{Host: "pypi.org", Port: 443, Binary: "/usr/bin/python3"}); !r.Allowed {
		t.Errorf("engine changed with the policy: %+v", r)
	}
}

func TestDecideConcurrent(t *testing.T) {
	e := compileTest(t, testPolicy)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				allowed := e.Decide(Request{Host: "raw.githubusercontent.com", Port: 443, Binary: "/usr/bin/git"})
				denied := e.Decide(Request{Host: fmt.Sprintf("h%d.example.com", i), Port: 443, Binary: "/usr/bin/git"})
				if !allowed.Allowed || denied.Allowed {
					errs <- fmt.Sprintf("goroutine %d iteration %d: %v %v", g, i, allowed.Allowed, denied.Allowed)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for r := ReasonNone; r <= ReasonBinaryNotAllowed; r++ {
		s := r.String()
		if s == "" || s == "unknown" || seen[s] {
			t.Errorf("Reason(%d) = %q", r, s)
		}
		seen[s] = true
	}
	for r, want := range map[Reason]string{ReasonNoMatchingEndpoint: "no_matching_endpoint", ReasonPortNotAllowed: "port_not_allowed", ReasonBinaryNotAllowed: "binary_not_allowed"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q; want %q", r, r.String(), want)
		}
	}
	if Reason(99).String() != "unknown" {
		t.Error("out-of-range reason")
	}
}

func sameEndpoint(a, b *policy.Endpoint) bool {
	return a.Host == b.Host && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.AllowedIPs, b.AllowedIPs) && a.Protocol == b.Protocol
}

// The glob prefilter never hides a match: for every pattern and path,
// policy.MatchBinary implies mayMatch, and the entry's matcher agrees with
// policy.MatchBinary.
func TestBinaryGlobPrefilter(t *testing.T) {
	patterns := []string{"/usr/bin/python3*", "/opt/**/bin/pip", "/opt/**", "/**/curl", "/usr/lib/git-core/*", "/usr/*/bin/x", "/a/[bc]/d", "/a/b?/**/e", "/**", "/usr/bin/**/node"}
	paths := []string{"/usr/bin/python3", "/usr/bin/python3.11", "/usr/bin/python", "/opt/bin/pip", "/opt/a/bin/pip", "/opt/a/b/bin/pip", "/opt", "/opt/x", "/optx/bin/pip",
		"/curl", "/usr/bin/curl", "/tmp/curl", "/usr/lib/git-core/git", "/usr/lib/git-core/a/b", "/usr/local/bin/x", "/usr/bin/x", "/a/b/d", "/a/d/d", "/a/bb/e", "/a/bb/x/y/e", "/usr/bin/node", "/usr/bin/n/node", "/"}
	for _, p := range patterns {
		g := newBinaryGlob(p)
		ent := &entry{literal: map[string]struct{}{}, globs: []binaryGlob{g}}
		for _, x := range paths {
			want := policy.MatchBinary(p, x)
			if want && !g.mayMatch(x) {
				t.Errorf("prefilter of %s (dir %q base %q) rejects matching %s", p, g.dir, g.base, x)
			}
			if got := ent.matchOne(x); got != want {
				t.Errorf("matchOne(%s, %s) = %v; policy.MatchBinary = %v", p, x, got, want)
			}
		}
	}
}
