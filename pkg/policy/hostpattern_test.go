package policy

import "testing"

func TestHostPatternMatch(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		noMatch []string
	}{
		{"github.com",
			[]string{"github.com", "GitHub.COM", "github.com."},
			[]string{"api.github.com", "github.co", "xgithub.com", "github.com..", "", "github.com:443"}},
		{"*.example.com",
			[]string{"a.example.com", "API.example.com", "a.example.com."},
			[]string{"example.com", "a.b.example.com", ".example.com", "a.example.org", "aexample.com"}},
		{"**.example.com",
			[]string{"a.example.com", "a.b.example.com", "x.y.z.example.com"},
			[]string{"example.com", "a..example.com", "a.example.com.evil.org", "evilexample.com"}},
		{"*-aiplatform.googleapis.com",
			[]string{"us-central1-aiplatform.googleapis.com", "-aiplatform.googleapis.com"},
			[]string{"aiplatform.googleapis.com", "a.b-aiplatform.googleapis.com", "us-aiplatform.googleapis.com.evil", "us-aiplatformx.googleapis.com"}},
		{"api-*.example.com",
			[]string{"api-1.example.com", "api-.example.com"},
			[]string{"api.example.com", "x.api-1.example.com"}},
		{"a*b*c.example.com",
			[]string{"abc.example.com", "axxbyyc.example.com", "abcbc.example.com"},
			[]string{"acb.example.com", "abcd.example.com"}},
		{"192.0.2.10",
			[]string{"192.0.2.10", "::ffff:192.0.2.10", "[::ffff:192.0.2.10]"},
			[]string{"192.0.2.1", "192.0.2.100", "host.192.0.2.10"}},
		{"2001:db8::1",
			[]string{"2001:db8::1", "2001:0db8:0::1", "[2001:db8::1]"},
			[]string{"2001:db8::2", "2001:db8::1%eth0"}},
	}
	for _, tc := range tests {
		p, err := CompileHostPattern(tc.pattern)
		if err != nil {
			t.Errorf("%s: %v", tc.pattern, err)
			continue
		}
		for _, h := range tc.match {
			if !p.Match(h) {
				t.Errorf("%s does not match %q", tc.pattern, h)
			}
		}
		for _, h := range tc.noMatch {
			if p.Match(h) {
				t.Errorf("%s matches %q", tc.pattern, h)
			}
		}
	}
	var nilPattern *HostPattern
	if nilPattern.Match("github.com") {
		t.Error("nil pattern matched")
	}
}

func TestCompileHostPatternRejects(t *testing.T) {
	for _, s := range []string{
		"", "*", "**", "*.com", "**.com", "*-x.com", "*.*.example.com", "api.*.example.com",
		"example.*", "a**.example.com", "a.b**.example.com", "exa mple.com", "example.com.",
		"a..b.com", ".example.com", "-a.example.com", "a-.example.com", "ex@mple.com",
		"[::1]", "fe80::1%eth0", "1.2.3", "256.0.0.1", "*.10.0.0.1", "*.example.123",
		string(make([]byte, 254)),
	} {
		if p, err := CompileHostPattern(s); err == nil {
			t.Errorf("%q compiled to %v", s, p)
		}
	}
}

func TestHostPatternKinds(t *testing.T) {
	for s, want := range map[string][3]bool{ // wildcard, ip
		"github.com":         {false, false},
		"*.github.com":       {true, false},
		"**.github.com":      {true, false},
		"api-*.github.com":   {true, false},
		"198.51.100.1":       {false, true},
		"2001:db8::1":        {false, true},
		"localhost":          {false, false},
		"xn--bcher-kva.test": {false, false},
	} {
		p, err := CompileHostPattern(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if p.IsWildcard() != want[0] || p.IsIP() != want[1] {
			t.Errorf("%s: wildcard=%v ip=%v", s, p.IsWildcard(), p.IsIP())
		}
	}
	if p, _ := CompileHostPattern("GitHub.COM"); p.String() != "github.com" {
		t.Errorf("String() = %q", p.String())
	}
}
