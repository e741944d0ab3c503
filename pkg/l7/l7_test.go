package l7

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// The path-confusion corpus: what each spelling becomes, or why it is
// refused.
var pathCases = []struct {
	in, want string
	err      error
}{
	{"/", "/", nil},
	{"/a/b", "/a/b", nil},
	{"/a/b/", "/a/b/", nil},
	{"//a///b", "/a/b", nil},
	{"/a/./b", "/a/b", nil},
	{"/a/../b", "/b", nil},
	{"/a/b/..", "/a", nil},
	{"/a/%62", "/a/b", nil},
	{"/a/%7e%7E", "/a/~~", nil},
	{"/a%20b", "/a b", nil},
	{"/a/%2F/b", "", ErrAmbiguousPath},
	{"/a/%2f/b", "", ErrAmbiguousPath},
	{"/a%5Cb", "", ErrAmbiguousPath},
	{"/a/%2e%2e/b", "", ErrAmbiguousPath},
	{"/a/%2E/b", "", ErrAmbiguousPath},
	{"/a%00", "", ErrAmbiguousPath},
	{"/a%252Fb", "", ErrAmbiguousPath},
	{"/a/..;/b", "", ErrAmbiguousPath},
	{"/admin;x/secret", "", ErrAmbiguousPath},
	{"/a%3Bb", "", ErrAmbiguousPath},
	{`/a\..\b`, "", ErrAmbiguousPath},
	{"/..", "", ErrAmbiguousPath},
	{"/a/../../b", "", ErrAmbiguousPath},
	{"", "", ErrInvalidPath},
	{"a/b", "", ErrInvalidPath},
	{"*", "", ErrInvalidPath},
	{"http://x/a", "", ErrInvalidPath},
	{"/a%", "", ErrInvalidPath},
	{"/a%2", "", ErrInvalidPath},
	{"/a%zz", "", ErrInvalidPath},
	{"/a%0a", "", ErrInvalidPath},
	{"/a b", "", ErrInvalidPath},
	{"/a\x7f", "", ErrInvalidPath},
	{"/a\xc3\xa9", "", ErrInvalidPath},
	{"/a#frag", "", ErrInvalidPath},
	{"/" + strings.Repeat("a", MaxPathLen), "", ErrInvalidPath},
}

func TestNormalizePath(t *testing.T) {
	for _, c := range pathCases {
		got, err := NormalizePath(c.in)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("NormalizePath(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestCheckAuthority(t *testing.T) {
	for _, c := range []struct {
		auth, host string
		port, def  int
		ok         bool
	}{
		{"registry.test", "registry.test", 443, 443, true},
		{"registry.test:443", "registry.test", 443, 443, true},
		{"REGISTRY.test.", "registry.test", 443, 443, true},
		{"registry.test:8443", "registry.test", 8443, 443, true},
		{"registry.test", "registry.test", 8443, 443, false},
		{"registry.test:444", "registry.test", 443, 443, false},
		{"other.test", "registry.test", 443, 443, false},
		{"registry.test.evil", "registry.test", 443, 443, false},
		{"user@registry.test", "registry.test", 443, 443, false},
		{"192.0.2.7", "192.0.2.7", 443, 443, true},
		{"3221225991", "192.0.2.7", 443, 443, true}, // the same address, other spelling
		{"[2001:db8::1]:443", "2001:db8::1", 443, 443, true},
		{"2001:db8::1", "2001:db8::1", 443, 443, false},
		{"[2001:db8::1", "2001:db8::1", 443, 443, false},
		{"registry.test:+443", "registry.test", 443, 443, false},
		{"registry.test:", "registry.test", 443, 443, false},
		{"", "registry.test", 443, 443, false},
		{"registry.test/x", "registry.test", 443, 443, false},
	} {
		err := CheckAuthority(c.auth, c.host, c.port, c.def)
		if (err == nil) != c.ok {
			t.Errorf("CheckAuthority(%q, %q, %d) = %v, want ok %v", c.auth, c.host, c.port, err, c.ok)
		}
	}
}

// FuzzNormalizePath: the result is itself normal (idempotent), has no dot
// segments, repeated slashes, "%", ";" or "\", and re-escaping it gives a
// path that normalises to the same thing (what the upstream receives
// means what was decided).
func FuzzNormalizePath(f *testing.F) {
	for _, c := range pathCases {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := NormalizePath(in)
		if err != nil {
			if out != "" {
				t.Fatalf("error %v with output %q", err, out)
			}
			return
		}
		if !strings.HasPrefix(out, "/") || strings.ContainsAny(out, "%;\\") || strings.Contains(out, "//") {
			t.Fatalf("NormalizePath(%q) = %q", in, out)
		}
		for _, seg := range strings.Split(out, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("NormalizePath(%q) = %q keeps a dot segment", in, out)
			}
		}
		again, err := NormalizePath(out)
		if err == nil && again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
		}
		esc := (&url.URL{Path: out}).EscapedPath()
		if len(esc) > MaxPathLen {
			return // escaping lengthened it past the bound
		}
		if back, err := NormalizePath(esc); err != nil || back != out {
			t.Fatalf("escaped form %q of %q normalises to %q, %v", esc, out, back, err)
		}
	})
}

// FuzzCheckAuthority: an accepted authority names exactly the tunnel's
// host, never one with userinfo, a path or a different port.
func FuzzCheckAuthority(f *testing.F) {
	f.Add("registry.test:443", 443)
	f.Add("[2001:db8::1]:8443", 8443)
	f.Add("0x7f.1", 80)
	f.Fuzz(func(t *testing.T, auth string, port int) {
		if CheckAuthority(auth, "registry.test", port, 443) == nil {
			host := strings.ToLower(strings.TrimSuffix(strings.Split(auth, ":")[0], "."))
			if host != "registry.test" || strings.ContainsAny(auth, "@/?# ") {
				t.Fatalf("accepted %q for registry.test:%d", auth, port)
			}
		}
	})
}
