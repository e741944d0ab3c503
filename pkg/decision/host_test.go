package decision

import (
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
)

func TestCanonicalHost(t *testing.T) {
	tests := []struct{ in, want string }{
		{"api.github.com", "api.github.com"},
		{"API.GitHub.COM", "api.github.com"},
		{"api.github.com.", "api.github.com"},
		{"localhost", "localhost"},
		{"a_b.example.com", "a_b.example.com"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"1.2.3.example.com", "1.2.3.example.com"},
		{"0x10.example.com", "0x10.example.com"},
		{"example.0x1g", "example.0x1g"},
		// IP literals in any spelling.
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0x7f.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"[::1]", "::1"},
		{"::1", "::1"},
		{"[2001:DB8:0::1]", "2001:db8::1"},
		{"[::ffff:127.0.0.1]", "::ffff:127.0.0.1"},
		// Invalid.
		{"", ""},
		{".", ""},
		{"example.com..", ""},
		{".example.com", ""},
		{"a..b", ""},
		{"-a.example.com", ""},
		{"a-.example.com", ""},
		{"exa mple.com", ""},
		{"example.com ", ""},
		{"127.0.0.1 x", ""},
		{"ex\x00ample.com", ""},
		{"bücher.example", ""},
		{"example.com:443", ""},
		{"user@example.com", ""},
		{"*.example.com", ""},
		{"fe80::1%eth0", ""},
		{"[fe80::1%25eth0]", ""},
		{"[127.0.0.1]", ""},
		{"256.1.1.1", ""},
		{"1.2.3.4.5", ""},
		{"4294967296", ""},
		{"08", ""},
		{"foo.123", ""},
		{"foo.0x10", ""},
		{"foo.0x", ""},
		{strings.Repeat("a", 64) + ".com", ""},
		{strings.Repeat("a.", 127) + "com", ""},
	}
	for _, tc := range tests {
		got, err := CanonicalHost(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("CanonicalHost(%q) = %q; want error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("CanonicalHost(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	long := strings.Repeat("abcdefghi.", 25) + "com" // 253 characters
	if got, err := CanonicalHost(long + "."); err != nil || got != long {
		t.Errorf("253-character name: %v", err)
	}
}

func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"api.github.com", "API.GitHub.COM.", "0x7f.1", "2130706433", "[::1]", "foo.123", "a..b", "127.0.0.1 x", "[fe80::1%25eth0]", "*.example.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := CanonicalHost(in)
		if a, ok := ssrf.ParseHostLiteral(in); ok {
			if err != nil || out != a.String() {
				t.Fatalf("CanonicalHost(%q) = %q, %v; the IP literal is %s", in, out, err, a)
			}
		}
		if err != nil {
			return
		}
		again, err := CanonicalHost(out)
		if err != nil || again != out {
			t.Fatalf("CanonicalHost not idempotent: %q → %q → %q, %v", in, out, again, err)
		}
		if _, ok := ssrf.ParseHostLiteral(out); ok {
			return
		}
		// A canonical name is a valid exact policy host that selects the
		// original spelling.
		hp, err := policy.CompileHostPattern(out)
		if err != nil {
			t.Fatalf("CanonicalHost(%q) = %q, which is not a valid policy host: %v", in, out, err)
		}
		if hp.IsWildcard() || hp.IsIP() || !hp.Match(in) {
			t.Fatalf("policy host %q does not select %q", out, in)
		}
		if out != strings.ToLower(out) || strings.HasSuffix(out, ".") {
			t.Fatalf("CanonicalHost(%q) = %q is not lower-case without trailing dot", in, out)
		}
	})
}
