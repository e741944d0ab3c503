package ssrf

import (
	"bufio"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// glibc_inet_aton.tsv holds what glibc 2.36's inet_aton and
// getaddrinfo(AI_NUMERICHOST) return for 450 inputs (see
// testdata/glibc_inet_aton.c). ParseHostLiteral must accept everything
// getaddrinfo accepts, with the same address; what only inet_aton accepts
// (trailing whitespace and garbage) must not be a literal.
func TestParseHostLiteralMatchesGlibc(t *testing.T) {
	f, err := os.Open("testdata/glibc_inet_aton.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n, accepted := 0, 0
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != 3 {
			t.Fatalf("line %d: %d columns", n+1, len(cols))
		}
		n++
		in, aton, gai := cols[0], cols[1], cols[2]
		got, ok := ParseHostLiteral(in)
		switch {
		case gai != "-":
			accepted++
			if !ok || got.String() != gai {
				t.Errorf("ParseHostLiteral(%q) = %v, %v; glibc getaddrinfo gives %s", in, got, ok, gai)
			}
		case aton != "-":
			// inet_aton stops at whitespace: "127.0.0.1 x".
			if ok {
				t.Errorf("ParseHostLiteral(%q) = %v; want not a literal (trailing garbage)", in, got)
			}
			if !strings.ContainsAny(in, " \t") {
				t.Errorf("inet_aton accepted %q without whitespace; extend the test", in)
			}
		case ok && got.Is4() && !whatwgOnly(in):
			t.Errorf("ParseHostLiteral(%q) = %v; glibc rejects it and it is not a WHATWG-only form", in, got)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 400 || accepted < 100 {
		t.Fatalf("golden file too small: %d lines, %d accepted", n, accepted)
	}
}

// whatwgOnly reports the forms URL parsers accept and glibc does not: one
// trailing dot, and a bare "0x" part meaning 0.
func whatwgOnly(s string) bool {
	if _, ok := refInetAton(s, true); !ok {
		return false
	}
	_, glibc := refInetAton(s, false)
	return !glibc
}

func TestParseHostLiteral(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" = not a literal
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0x7f.0.0.1", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"0x7F000001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0251.0376.0251.0376", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"0x", "0.0.0.0"},
		{"0", "0.0.0.0"},
		{"4294967295", "255.255.255.255"},
		{"198.51.100.7", "198.51.100.7"},
		{"::1", "::1"},
		{"[::1]", "::1"},
		{"[0:0:0:0:0:0:0:1]", "::1"},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1"},
		{"[::FFFF:7F00:1]", "::ffff:127.0.0.1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"[fd00:ec2::254]", "fd00:ec2::254"},
		// Not literals.
		{"", ""},
		{"4294967296", ""},
		{"0x100000000", ""},
		{"08", ""},
		{"256.1.1.1", ""},
		{"1.2.3.4.5", ""},
		{"127.0.0.1..", ""},
		{".127.0.0.1", ""},
		{"1..1", ""},
		{"127.0.0.1 ", ""},
		{"127.0.0.1x", ""},
		{"localhost", ""},
		{"example.com", ""},
		{"fe80::1%eth0", ""},
		{"[fe80::1%25eth0]", ""},
		{"[fe80::1%eth0]", ""},
		{"[127.0.0.1]", ""},
		{"[::1", ""},
		{"::1]", ""},
		{"[]", ""},
		{"[", ""},
		{":::", ""},
		{"::ffff:0177.0.0.1", ""},
		{"+1", ""},
		{"1e1", ""},
	}
	for _, tc := range tests {
		got, ok := ParseHostLiteral(tc.in)
		if tc.want == "" {
			if ok {
				t.Errorf("ParseHostLiteral(%q) = %v; want not a literal", tc.in, got)
			}
			continue
		}
		if !ok || got.String() != tc.want {
			t.Errorf("ParseHostLiteral(%q) = %v, %v; want %s", tc.in, got, ok, tc.want)
		}
		if got.Zone() != "" {
			t.Errorf("ParseHostLiteral(%q) has zone %q", tc.in, got.Zone())
		}
	}
}

// refInetAton is an independent model of glibc's inet_aton (strtoul with
// base 0 per part, parts separated by '.', nothing after the last part).
// With whatwg it also accepts one trailing dot and a bare "0x" (= 0), as
// URL parsers do.
func refInetAton(s string, whatwg bool) (netip.Addr, bool) {
	if whatwg && strings.HasSuffix(s, ".") {
		s = s[:len(s)-1]
	}
	var parts []uint64
	i := 0
	for {
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return netip.Addr{}, false
		}
		// strtoul(s, &end, 0)
		var base uint64 = 10
		start := i
		if s[i] == '0' {
			base = 8
			if i+1 < len(s) && (s[i+1]|0x20) == 'x' {
				if i+2 < len(s) && isHex(s[i+2]) {
					base, i = 16, i+2
				} else if whatwg {
					i += 2 // "0x" alone is 0
				}
			}
		}
		var v uint64
		overflow := false
		for i < len(s) {
			d, ok := digitVal(s[i])
			if !ok || d >= base {
				break
			}
			v = v*base + d
			if v > 1<<40 {
				overflow = true
			}
			i++
		}
		if overflow || v > 0xffffffff || i == start {
			return netip.Addr{}, false
		}
		if i < len(s) && s[i] == '.' {
			if len(parts) >= 3 || v > 0xff {
				return netip.Addr{}, false
			}
			parts = append(parts, v)
			i++
			continue
		}
		if i != len(s) {
			return netip.Addr{}, false
		}
		max := []uint64{0xffffffff, 0xffffff, 0xffff, 0xff}[len(parts)]
		if v > max {
			return netip.Addr{}, false
		}
		for k, p := range parts {
			v |= p << (24 - 8*k)
		}
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
	}
}

func isHex(c byte) bool { _, ok := digitVal(c); return ok }

func digitVal(c byte) (uint64, bool) {
	switch {
	case c >= '0' && c <= '9':
		return uint64(c - '0'), true
	case c >= 'a' && c <= 'f':
		return uint64(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return uint64(c-'A') + 10, true
	}
	return 0, false
}

func FuzzParseHostLiteral(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "0x7f.1", "2130706433", "0177.0.0.1", "127.1", "[::1]", "::ffff:1.2.3.4", "fe80::1%eth0", "1.2.3.4.", "0x", "example.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := ParseHostLiteral(s)
		ref, refOK := refInetAton(s, false)
		if refOK && (!ok || a != ref) {
			t.Fatalf("ParseHostLiteral(%q) = %v, %v; inet_aton gives %v", s, a, ok, ref)
		}
		if !ok {
			return
		}
		if !a.IsValid() || a.Zone() != "" {
			t.Fatalf("ParseHostLiteral(%q) = %#v: invalid or zoned", s, a)
		}
		if back, ok := ParseHostLiteral(a.String()); !ok || back != a {
			t.Fatalf("ParseHostLiteral(%q) = %v does not round-trip: %v, %v", s, a, back, ok)
		}
		if a.Is4() {
			if w, wok := refInetAton(s, true); !wok || w != a {
				t.Fatalf("ParseHostLiteral(%q) = %v; the inet_aton/WHATWG model gives %v, %v", s, a, w, wok)
			}
			return
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
		if n, err := netip.ParseAddr(inner); err != nil || n != a || (strings.HasPrefix(s, "[") != strings.HasSuffix(s, "]")) {
			t.Fatalf("ParseHostLiteral(%q) = %v; netip gives %v, %v", s, a, n, err)
		}
	})
}
