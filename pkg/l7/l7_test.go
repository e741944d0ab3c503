package l7

import (
	"errors"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The path-confusion corpus: what the upstream receives for each
// spelling and every reading a server may take of it, or why it is
// refused.
var pathCases = []struct {
	in, esc  string
	readings []string // Decoded first
	err      error
}{
	{"/", "/", []string{"/"}, nil},
	{"/a/b", "/a/b", []string{"/a/b"}, nil},
	{"/a/b/", "/a/b/", []string{"/a/b/"}, nil},
	{"//a///b", "/a/b", []string{"/a/b"}, nil},
	{"/a/./b", "/a/b", []string{"/a/b"}, nil},
	{"/a/../b", "/b", []string{"/b"}, nil},
	{"/a/b/..", "/a", []string{"/a"}, nil},
	{"/a/%62", "/a/b", []string{"/a/b"}, nil},
	{"/a/%7e%7E", "/a/~~", []string{"/a/~~"}, nil},
	{"/a%20b", "/a%20b", []string{"/a b"}, nil},
	{"/a%21b!", "/a%21b!", []string{"/a!b!"}, nil}, // a reserved character stays encoded
	{`/a"b`, "/a%22b", []string{`/a"b`}, nil},
	{"/github.com/!burnt!sushi/toml/@v/list", "/github.com/!burnt!sushi/toml/@v/list", []string{"/github.com/!burnt!sushi/toml/@v/list"}, nil},
	// Above the root: every server clamps or refuses.
	{"/..", "/", []string{"/"}, nil},
	{"/a/../../b", "/b", []string{"/b"}, nil},
	// An encoded "/": data inside a segment, or a separator. Both read
	// the same string unless a dot segment or an empty one follows.
	{"/@types%2fnode", "/@types%2fnode", []string{"/@types/node"}, nil},
	{"/@types%2Fnode/-/node-1.0.0.tgz", "/@types%2Fnode/-/node-1.0.0.tgz", []string{"/@types/node/-/node-1.0.0.tgz"}, nil},
	{"/a/%2F/b", "/a/%2F/b", []string{"/a///b", "/a/b"}, nil},
	{"/a/..%2fadmin", "/a/..%2fadmin", []string{"/a/../admin", "/admin"}, nil},
	// "\": data, or a separator (Windows servers); sent as %5C.
	{`/a\..\b`, "/a%5C..%5Cb", []string{`/a\..\b`, "/b"}, nil},
	{"/a%5cb", "/a%5cb", []string{`/a\b`, "/a/b"}, nil},
	// An encoded "." makes a dot segment only to servers that decode
	// before resolving dot segments; a trailing dot is dropped by others.
	{"/a/%2e%2e/b", "/a/%2e%2e/b", []string{"/a/../b", "/b", "/a/b"}, nil},
	{"/a/%2E/b", "/a/%2E/b", []string{"/a/./b", "/a/b"}, nil},
	{"/file%2ejson", "/file%2ejson", []string{"/file.json"}, nil},
	// ";": data, or path parameters cut off the segment (Tomcat, Jetty).
	{"/x/..;/admin/y", "/x/..;/admin/y", []string{"/x/..;/admin/y", "/admin/y"}, nil},
	{"/admin;x/secret", "/admin;x/secret", []string{"/admin;x/secret", "/admin/secret"}, nil},
	{"/a%3Bb", "/a%3Bb", []string{"/a;b", "/a"}, nil},
	// "%25": data, or the start of an escape to a server that decodes twice.
	{"/a%252Fb", "/a%252Fb", []string{"/a%2Fb", "/a/b"}, nil},
	{"/a%2525", "", nil, ErrAmbiguousPath}, // a third decoding
	{"/a%25zz", "/a%25zz", []string{"/a%zz"}, nil},
	// A trailing "." or space: dropped by Windows, IIS and ASP.NET.
	{"/admin.", "/admin.", []string{"/admin.", "/admin"}, nil},
	{"/admin%20/x", "/admin%20/x", []string{"/admin /x", "/admin/x"}, nil},
	{"/admin.%20./x", "/admin.%20./x", []string{"/admin. ./x", "/admin/x"}, nil},
	// Refused whatever the rules.
	{"/a%00", "", nil, ErrAmbiguousPath},
	{"/a%2500", "", nil, ErrAmbiguousPath},
	{"/a%250a", "", nil, ErrAmbiguousPath},
	{"/a%25252F", "", nil, ErrAmbiguousPath},
	{"", "", nil, ErrInvalidPath},
	{"a/b", "", nil, ErrInvalidPath},
	{"*", "", nil, ErrInvalidPath},
	{"http://x/a", "", nil, ErrInvalidPath},
	{"/a%", "", nil, ErrInvalidPath},
	{"/a%2", "", nil, ErrInvalidPath},
	{"/a%zz", "", nil, ErrInvalidPath},
	{"/a%0a", "", nil, ErrInvalidPath},
	{"/a b", "", nil, ErrInvalidPath},
	{"/a\x7f", "", nil, ErrInvalidPath},
	{"/a\xc3\xa9", "", nil, ErrInvalidPath},
	{"/a#frag", "", nil, ErrInvalidPath},
	{"/" + strings.Repeat("a", MaxPathLen), "", nil, ErrInvalidPath},
}

func TestParsePath(t *testing.T) {
	for _, c := range pathCases {
		p, err := ParsePath(c.in)
		var got []string
		if err == nil {
			p.Readings(func(r string) bool { got = append(got, r); return true })
		}
		if !errors.Is(err, c.err) || p.Escaped != c.esc || !slices.Equal(got, c.readings) {
			t.Errorf("ParsePath(%q) = %q %q, %v; want %q %q, %v", c.in, p.Escaped, got, err, c.esc, c.readings, c.err)
		}
		if err == nil && (&url.URL{Path: p.Decoded, RawPath: p.Escaped}).EscapedPath() != p.Escaped {
			t.Errorf("ParsePath(%q): url.URL does not send %q as is", c.in, p.Escaped)
		}
	}
	for in, want := range map[string]bool{"/%C5%BFecret": true, "/a%25C5%25BF": true, "/secret": false, "/%7e": false} {
		if p, err := ParsePath(in); err != nil || p.NonASCII != want {
			t.Errorf("ParsePath(%q).NonASCII = %v, %v; want %v", in, p.NonASCII, err, want)
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

// FuzzParsePath: what the upstream receives parses back to itself with
// the same readings (it means what was decided), url.URL sends it
// unchanged, the decoded reading comes first, and no reading keeps a
// dot segment or an empty segment it did not get from an encoded "/".
func FuzzParsePath(f *testing.F) {
	for _, c := range pathCases {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ParsePath(in)
		if err != nil {
			if p.Escaped != "" || p.Decoded != "" {
				t.Fatalf("error %v with output %+v", err, p)
			}
			return
		}
		if !strings.HasPrefix(p.Escaped, "/") || strings.Contains(p.Escaped, "//") {
			t.Fatalf("ParsePath(%q).Escaped = %q", in, p.Escaped)
		}
		for _, seg := range strings.Split(p.Escaped, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("ParsePath(%q).Escaped = %q keeps a dot segment", in, p.Escaped)
			}
		}
		if dec, err := url.PathUnescape(p.Escaped); err != nil || dec != p.Decoded {
			t.Fatalf("ParsePath(%q): Decoded %q is not Escaped %q decoded (%q, %v)", in, p.Decoded, p.Escaped, dec, err)
		}
		if got := (&url.URL{Path: p.Decoded, RawPath: p.Escaped}).EscapedPath(); got != p.Escaped {
			t.Fatalf("ParsePath(%q): url.URL sends %q, not %q", in, got, p.Escaped)
		}
		if len(p.Escaped) > MaxPathLen {
			return // escaping lengthened it past the bound
		}
		again, err := ParsePath(p.Escaped)
		if err != nil || again.Escaped != p.Escaped || again.Decoded != p.Decoded || !slices.Equal(again.Alternates, p.Alternates) || again.NonASCII != p.NonASCII {
			t.Fatalf("not idempotent: %q -> %+v -> %+v, %v", in, p, again, err)
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

// benchPaths are what package managers send: plain paths (the fast
// path), a scoped npm name, a percent-encoded Go module path.
var benchPaths = []string{
	"/left-pad/-/left-pad-1.3.0.tgz",
	"/@types%2fnode",
	"/github.com/%21burnt%21sushi/toml/@v/v1.3.2.zip",
	"/debian/pool/main/h/hello/hello_2.10-3_amd64.deb",
}

// BenchmarkParsePath against what the standard library offers for the
// same job (url.PathUnescape and path.Clean, which know nothing of
// readings); see ParsePath's doc comment for the ratio.
func BenchmarkParsePath(b *testing.B) {
	b.Run("l7", func(b *testing.B) {
		b.ReportAllocs()
		defer testutil.CPUPerOp(b)()
		for i := 0; i < b.N; i++ {
			for _, p := range benchPaths {
				if _, err := ParsePath(p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("stdlib", func(b *testing.B) {
		b.ReportAllocs()
		defer testutil.CPUPerOp(b)()
		for i := 0; i < b.N; i++ {
			for _, p := range benchPaths {
				d, err := url.PathUnescape(p)
				if err != nil {
					b.Fatal(err)
				}
				_ = (&url.URL{Path: path.Clean(d)}).EscapedPath()
			}
		}
	})
}
