package ceiling

import (
	"math/rand/v2"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

func TestHostWithin(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"api.github.com", "api.github.com", true},
		{"api.github.com", "*.github.com", true},
		{"api.github.com", "**.github.com", true},
		{"a.b.github.com", "*.github.com", false},
		{"a.b.github.com", "**.github.com", true},
		{"github.com", "*.github.com", false},
		{"github.com", "**.github.com", false},
		{"*.github.com", "*.github.com", true},
		{"*.github.com", "**.github.com", true},
		{"*.api.github.com", "**.github.com", true},
		{"*.api.github.com", "*.github.com", false},
		{"**.github.com", "*.github.com", false},
		{"**.github.com", "**.github.com", true},
		{"**.github.com", "**.api.github.com", false},
		{"**.api.github.com", "**.github.com", true},
		{"*.github.com", "api.github.com", false},
		{"*-ai.g.com", "*.g.com", true},
		{"*-ai.g.com", "*ai.g.com", true},
		{"*ai.g.com", "*-ai.g.com", false},
		{"x-*-ai.g.com", "x*ai.g.com", true},
		{"*.g.com", "*-ai.g.com", false},
		{"*.g.com", "*ai.g.com", false},
		{"a*.x.g.com", "**.g.com", true},
		{"198.51.100.7", "198.51.100.7", true},
		{"198.51.100.7", "198.51.100.8", false},
		{"198.51.100.7", "*.g.com", false},
		{"api.github.com", "githubcom", false},
	} {
		sa := selectorOf(&policy.Endpoint{Host: c.a})
		b := &policy.Endpoint{Host: c.b}
		if b.HostPattern() == nil {
			continue
		}
		if got := hostWithin(sa, selectorOf(b)); got != c.want {
			t.Errorf("hostWithin(%s, %s) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	hostless := func(ips ...string) hostSel {
		return selectorOf(&policy.Endpoint{AllowedIPs: ips})
	}
	for _, c := range []struct {
		a, b hostSel
		want bool
	}{
		{selectorOf(&policy.Endpoint{Host: "x.test"}), hostless("10.0.0.0/8"), true},
		{selectorOf(&policy.Endpoint{Host: "10.1.2.3"}), hostless("10.0.0.0/8"), true},
		{selectorOf(&policy.Endpoint{Host: "11.1.2.3"}), hostless("10.0.0.0/8"), false},
		{hostless("10.1.0.0/16"), hostless("10.0.0.0/8"), true},
		{hostless("10.0.0.0/8"), hostless("10.1.0.0/16"), false},
		{hostless("10.0.0.0/8"), selectorOf(&policy.Endpoint{Host: "**.x.test"}), false},
	} {
		if got := hostWithin(c.a, c.b); got != c.want {
			t.Errorf("hostWithin(%s, %s) = %v, want %v", c.a.describe(), c.b.describe(), got, c.want)
		}
	}
}

func TestURLGlobWithin(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"/v1/items", "/v1/items", true},
		{"/v1/items", "/v1/*", true},
		{"/v1/items/7", "/v1/*", true}, // "*" crosses "/"
		{"/v1/*", "/v1/**", true},
		{"/v1/**", "/v1/*", true},
		{"/v1/*", "/v1/items", false},
		{"/a?c", "/a*c", true},
		{"/a*c", "/a?c", false},
		{"/a?c", "/a?c", true},
		{"/abc", "/a?c", true},
		{"/a?c", "/abc", false},
		{"*", "/**", true}, // every request path starts with "/"
		{"**", "*", true},
		{"/x", "*", true},
		{"/**", "/v1/**", false},
		{"*/git-upload-pack", "/**/git-upload-pack", false},
		{"/a/**/git-upload-pack", "*/git-upload-pack", true},
	} {
		if got := urlGlobWithin(c.a, c.b); got != c.want {
			t.Errorf("urlGlobWithin(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestBinaryWithin(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"/usr/bin/curl", "/usr/bin/curl", true},
		{"/usr/bin/curl", "/usr/bin/*", true},
		{"/usr/bin/curl", "/usr/**", true},
		{"/usr/bin/curl", "/**/curl", true},
		{"/usr/bin/*", "/usr/bin/curl", false},
		{"/usr/bin/python3*", "/usr/bin/python*", true},
		{"/usr/bin/python*", "/usr/bin/python3*", false},
		{"/usr/bin/python3.1?", "/usr/bin/python3*", true},
		{"/usr/bin/[cg]url", "/usr/bin/?url", true},
		{"/usr/bin/[cg]url", "/usr/bin/[cg]url", true},
		{"/usr/bin/curl", "/usr/bin/[cg]url", true},
		{"/usr/bin/hurl", "/usr/bin/[cg]url", false},
		{"/usr/bin/?url", "/usr/bin/[cg]url", false},
		{"/opt/**/bin/pip", "/opt/**", true},
		{"/opt/**", "/opt/**/bin/pip", false},
		{"/opt/a/**/pip", "/opt/**/pip", true},
		{"/usr/**", "/usr/*", false},
		{"/usr/*", "/usr/**", true},
		{"/usr/lib/*/x", "/usr/**/x", true},
	} {
		if got := binaryWithin(c.a, c.b); got != c.want {
			t.Errorf("binaryWithin(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// instance fills a glob's wildcards with text drawn from r: "*" with
// runs of fill, "?" with one byte of fill.
func instance(r *rand.Rand, g string, fill []string) string {
	var b strings.Builder
	for i := 0; i < len(g); i++ {
		switch g[i] {
		case '*':
			n := r.IntN(3)
			for ; n > 0; n-- {
				b.WriteString(fill[r.IntN(len(fill))])
			}
		case '?':
			s := fill[r.IntN(len(fill))] + "x"
			b.WriteByte(s[0])
		default:
			b.WriteByte(g[i])
		}
	}
	return b.String()
}

// FuzzHostWithin: whenever hostWithin says a is within b, every name a
// selects (names built from a's wildcards, kept when a's own matcher
// selects them) is selected by b's real matcher.
func FuzzHostWithin(f *testing.F) {
	f.Add("api.github.com", "*.github.com", uint64(1))
	f.Add("*.a.g.com", "**.g.com", uint64(2))
	f.Add("x-*-ai.g.com", "x*ai.g.com", uint64(3))
	f.Add("**.b.ex.test", "**.ex.test", uint64(4))
	f.Fuzz(func(t *testing.T, a, b string, seed uint64) {
		pa, err := policy.CompileHostPattern(a)
		if err != nil {
			return
		}
		pb, err := policy.CompileHostPattern(b)
		if err != nil {
			return
		}
		ea, eb := &policy.Endpoint{Host: pa.String()}, &policy.Endpoint{Host: pb.String()}
		if !hostWithin(selectorOf(ea), selectorOf(eb)) {
			return
		}
		r := rand.New(rand.NewPCG(seed, 7))
		fill := []string{"a", "x-", "q", "b.c", "api", "9", "a.b.c"}
		for i := 0; i < 32; i++ {
			name := instance(r, pa.String(), fill)
			if !pa.Match(name) {
				continue
			}
			if !pb.Match(name) {
				t.Fatalf("hostWithin(%s, %s) but %s matches only the first", pa, pb, name)
			}
		}
	})
}

// FuzzURLGlobWithin: whenever urlGlobWithin says a is within b, every
// request path a rule with path a allows (Endpoint.CheckRequest, the
// proxy's own check) a rule with path b allows too.
func FuzzURLGlobWithin(f *testing.F) {
	f.Add("/v1/items", "/v1/*", uint64(1))
	f.Add("/a?c", "/a*c", uint64(2))
	f.Add("*", "/**", uint64(3))
	f.Add("/a/**/git-upload-pack", "*/git-upload-pack", uint64(4))
	f.Fuzz(func(t *testing.T, a, b string, seed uint64) {
		if !ruleGlob(a) || !ruleGlob(b) || !urlGlobWithin(a, b) {
			return
		}
		ea := &policy.Endpoint{Protocol: policy.ProtocolREST, Rules: []policy.Rule{{Allow: policy.RequestMatch{Method: "GET", Path: a}}}}
		eb := &policy.Endpoint{Protocol: policy.ProtocolREST, Rules: []policy.Rule{{Allow: policy.RequestMatch{Method: "GET", Path: b}}}}
		r := rand.New(rand.NewPCG(seed, 9))
		fill := []string{"/", "x", "a/b", "items", "?", "7", "git-upload-pack"}
		for i := 0; i < 32; i++ {
			p := instance(r, a, fill)
			if ok, _ := ea.CheckRequest("GET", p, url.Values{}, ""); !ok {
				continue
			}
			if ok, _ := eb.CheckRequest("GET", p, url.Values{}, ""); !ok {
				t.Fatalf("urlGlobWithin(%q, %q) but %q matches only the first", a, b, p)
			}
		}
	})
}

// ruleGlob accepts what the loader accepts as a rule path.
func ruleGlob(s string) bool {
	if s == "" || len(s) > 256 || strings.ContainsAny(s, " #") {
		return false
	}
	for _, c := range s {
		if c < ' ' || c == 0x7f {
			return false
		}
	}
	return s == "*" || s == "**" || strings.HasPrefix(s, "/")
}

// FuzzBinaryWithin: whenever binaryWithin says a is within b, every
// executable path policy.MatchBinary matches with a, it matches with b.
func FuzzBinaryWithin(f *testing.F) {
	f.Add("/usr/bin/curl", "/usr/bin/*", uint64(1))
	f.Add("/usr/bin/[cg]url", "/usr/bin/?url", uint64(2))
	f.Add("/opt/a/**/pip", "/opt/**/pip", uint64(3))
	f.Add("/usr/bin/python3.1?", "/usr/bin/python3*", uint64(4))
	f.Fuzz(func(t *testing.T, a, b string, seed uint64) {
		if !strings.HasPrefix(a, "/") || !strings.HasPrefix(b, "/") || strings.Contains(a+b, `\`) || len(a)+len(b) > 512 {
			return
		}
		if !binaryWithin(a, b) {
			return
		}
		r := rand.New(rand.NewPCG(seed, 11))
		for i := 0; i < 32; i++ {
			exe := binaryInstance(r, a)
			if !policy.MatchBinary(a, exe) {
				continue
			}
			if !policy.MatchBinary(b, exe) {
				t.Fatalf("binaryWithin(%q, %q) but %q matches only the first", a, b, exe)
			}
		}
	})
}

// binaryInstance builds a path the binary pattern may match: "**" as
// zero to two components, "*" and "?" filled, a class by a character it
// admits.
func binaryInstance(r *rand.Rand, pat string) string {
	var comps []string
	for _, c := range splitComponents(pat) {
		if c == "**" {
			for n := r.IntN(3); n > 0; n-- {
				comps = append(comps, []string{"a", "lib", "x9"}[r.IntN(3)])
			}
			continue
		}
		var b strings.Builder
		for i := 0; i < len(c); i++ {
			switch c[i] {
			case '*':
				b.WriteString([]string{"", "a", "3.11", "xy"}[r.IntN(4)])
			case '?':
				b.WriteByte("a1._"[r.IntN(4)])
			case '[':
				end := strings.IndexByte(c[i+1:], ']')
				if end < 0 {
					b.WriteByte('[')
					continue
				}
				class := c[i : i+end+2]
				for _, ch := range "acgxz019.-_" {
					if m, _ := path.Match(class, string(ch)); m {
						b.WriteRune(ch)
						break
					}
				}
				i += end + 1
			default:
				b.WriteByte(c[i])
			}
		}
		comps = append(comps, b.String())
	}
	return "/" + strings.Join(comps, "/")
}
