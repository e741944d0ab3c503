package ssrf

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		addr string
		want Class
	}{
		{"0.0.0.0", ClassUnspecified},
		{"0.1.2.3", ClassUnspecified},
		{"::", ClassUnspecified},
		{"127.0.0.1", ClassLoopback},
		{"127.255.255.254", ClassLoopback},
		{"::1", ClassLoopback},
		{"10.0.0.1", ClassPrivate},
		{"172.16.0.1", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"172.32.0.1", ClassPublic},
		{"192.168.1.1", ClassPrivate},
		{"fc00::1", ClassULA},
		{"fd12:3456::1", ClassULA},
		{"169.254.1.1", ClassLinkLocal},
		{"fe80::1", ClassLinkLocal},
		{"febf::1", ClassLinkLocal},
		{"169.254.169.254", ClassMetadata},
		{"fd00:ec2::254", ClassMetadata},
		{"100.100.100.200", ClassMetadata},
		{"224.0.0.1", ClassMulticast},
		{"239.255.255.250", ClassMulticast},
		{"ff02::1", ClassMulticast},
		{"255.255.255.255", ClassBroadcast},
		{"240.0.0.1", ClassReserved},
		{"255.255.255.254", ClassReserved},
		{"192.0.0.8", ClassReserved},
		{"fec0::1", ClassReserved},
		{"100::1", ClassReserved},
		{"4000::1", ClassReserved},
		{"100.64.0.1", ClassCGNAT},
		{"100.127.255.255", ClassCGNAT},
		{"100.128.0.1", ClassPublic},
		{"198.18.0.1", ClassBenchmarking},
		{"198.19.255.255", ClassBenchmarking},
		{"2001:2::1", ClassBenchmarking},
		{"::ffff:127.0.0.1", ClassIPv4Mapped},
		{"::ffff:8.8.8.8", ClassIPv4Mapped},
		{"::127.0.0.1", ClassIPv4Compatible},
		{"::8.8.8.8", ClassIPv4Compatible},
		{"64:ff9b::7f00:1", ClassNAT64},
		{"64:ff9b:1::a00:1", ClassNAT64},
		{"2002:7f00:1::1", Class6to4},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", ClassTeredo},
		// TEST-NET and documentation ranges are the tests' internet.
		{"192.0.2.1", ClassPublic},
		{"198.51.100.7", ClassPublic},
		{"203.0.113.200", ClassPublic},
		{"2001:db8::1", ClassPublic},
		{"8.8.8.8", ClassPublic},
		{"2606:4700::1111", ClassPublic},
		{"fe80::1%eth0", ClassLinkLocal},
	}
	for _, tc := range tests {
		a := netip.MustParseAddr(tc.addr)
		if got := Classify(a); got != tc.want {
			t.Errorf("Classify(%s) = %s; want %s", tc.addr, got, tc.want)
		}
	}
	if got := Classify(netip.Addr{}); got != ClassInvalid {
		t.Errorf("Classify(zero) = %s; want invalid", got)
	}
}

// Every spelling of a dangerous IPv4 address classifies like the dotted form.
func TestClassifySpellings(t *testing.T) {
	for _, tc := range []struct {
		spellings []string
		want      Class
	}{
		{[]string{"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.0.0.1", "127.1", "127.0.1", "0x7f000001", "017700000001", "127.0.0.1."}, ClassLoopback},
		{[]string{"169.254.169.254", "2852039166", "0251.0376.0251.0376", "0xa9.0xfe.0xa9.0xfe", "0xa9fea9fe", "169.254.43518"}, ClassMetadata},
		{[]string{"10.0.0.1", "10.1", "167772161", "012.0.0.1", "0xa.0.0.1"}, ClassPrivate},
		{[]string{"0", "0x", "0.0.0.0", "00000"}, ClassUnspecified},
		{[]string{"[::1]", "::1", "[0::1]", "0:0:0:0:0:0:0:1"}, ClassLoopback},
		{[]string{"[::ffff:7f00:1]", "::ffff:127.0.0.1"}, ClassIPv4Mapped},
	} {
		for _, s := range tc.spellings {
			a, ok := ParseHostLiteral(s)
			if !ok {
				t.Errorf("ParseHostLiteral(%q) failed", s)
				continue
			}
			if got := Classify(a); got != tc.want {
				t.Errorf("Classify(ParseHostLiteral(%q) = %s) = %s; want %s", s, a, got, tc.want)
			}
		}
	}
}

func TestEmbeddedIPv4(t *testing.T) {
	tests := []struct {
		addr, want string // want "" = none
	}{
		{"::ffff:127.0.0.1", "127.0.0.1"},
		{"::ffff:198.51.100.7", "198.51.100.7"},
		{"::10.0.0.1", "10.0.0.1"},
		{"64:ff9b::a9fe:a9fe", "169.254.169.254"},
		{"64:ff9b::192.0.2.33", "192.0.2.33"},
		{"2002:7f00:1::1", "127.0.0.1"},
		{"2002:c633:6407:1::", "198.51.100.7"},
		// Teredo: client 192.0.2.45 is stored inverted as 3fff:fdd2.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"},
		{"64:ff9b:1::a00:1", ""},
		{"2001:db8::1", ""},
		{"127.0.0.1", ""},
		{"::1", ""},
	}
	for _, tc := range tests {
		got, ok := EmbeddedIPv4(netip.MustParseAddr(tc.addr))
		if tc.want == "" {
			if ok {
				t.Errorf("EmbeddedIPv4(%s) = %s; want none", tc.addr, got)
			}
			continue
		}
		if !ok || got.String() != tc.want {
			t.Errorf("EmbeddedIPv4(%s) = %s, %v; want %s", tc.addr, got, ok, tc.want)
		}
	}
}

func TestClassAndReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for c := ClassInvalid; c <= ClassTeredo; c++ {
		s := c.String()
		if s == "" || s == "unknown" || seen[s] {
			t.Errorf("Class(%d).String() = %q: empty, unknown or repeated", c, s)
		}
		seen[s] = true
	}
	if Class(200).String() != "unknown" {
		t.Errorf("out-of-range class: %q", Class(200).String())
	}
	seen = map[string]bool{}
	for r := ReasonNone; r <= ReasonNotInAllowedIPs; r++ {
		s := r.String()
		if s == "" || s == "unknown" || seen[s] {
			t.Errorf("Reason(%d).String() = %q: empty, unknown or repeated", r, s)
		}
		seen[s] = true
	}
}

// issueAlwaysDenied is issue 4's always-deny list, written out here
// independently of the implementation's tables.
var issueAlwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("255.255.255.255/32"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("169.254.169.254/32"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("::ffff:0:0/96"),
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001::/32"),
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "198.51.100.7", "::1", "::ffff:10.0.0.1", "2002:a00:1::", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "fd00:ec2::254", "2001:db8::1"} {
		f.Add(netip.MustParseAddr(s).AsSlice())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var a netip.Addr
		switch {
		case len(b) >= 16:
			a = netip.AddrFrom16([16]byte(b[:16]))
		case len(b) >= 4:
			a = netip.AddrFrom4([4]byte(b[:4]))
		default:
			return
		}
		c := Classify(a)
		if s := c.String(); s == "unknown" || s == "invalid" {
			t.Fatalf("Classify(%s) = %s", a, s)
		}
		// Agree with the standard library's predicates (which look through
		// IPv4-mapped addresses; those are ipv4_mapped here).
		switch {
		case a.Is4In6():
			if c != ClassIPv4Mapped {
				t.Fatalf("%s: mapped, Classify says %s", a, c)
			}
		case a.IsLoopback() && c != ClassLoopback:
			t.Fatalf("%s: netip says loopback, Classify says %s", a, c)
		case a.IsUnspecified() && c != ClassUnspecified:
			t.Fatalf("%s: netip says unspecified, Classify says %s", a, c)
		case a.IsMulticast() && c != ClassMulticast:
			t.Fatalf("%s: netip says multicast, Classify says %s", a, c)
		case a.IsLinkLocalUnicast() && c != ClassLinkLocal && c != ClassMetadata:
			t.Fatalf("%s: netip says link-local, Classify says %s", a, c)
		case a.IsPrivate() && c != ClassPrivate && c != ClassULA && c != ClassMetadata:
			t.Fatalf("%s: netip says private, Classify says %s", a, c)
		case !a.IsGlobalUnicast() && c == ClassPublic:
			t.Fatalf("%s: netip says not global unicast, Classify says public", a)
		}
		if a.Is4() && Classify(netip.AddrFrom16(a.As16())) != ClassIPv4Mapped {
			t.Fatalf("::ffff:%s is not ipv4_mapped", a)
		}
		if e, ok := EmbeddedIPv4(a); ok != (c.Embeds() && !netip.MustParsePrefix("64:ff9b:1::/48").Contains(a)) || (ok && !e.Is4()) {
			t.Fatalf("EmbeddedIPv4(%s) = %s, %v for class %s", a, e, ok, c)
		}
		// The Guard: the issue's always-deny list stays denied even for an
		// exact host with allowed_ips covering everything.
		everything := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
		ap := netip.AddrPortFrom(a, 443)
		g := &Guard{}
		errExact := g.Check(ap, true, everything)
		for _, p := range issueAlwaysDenied {
			if p.Contains(a) && errExact == nil {
				t.Fatalf("%s (in %s) allowed for an exact host with allowed_ips 0/0", a, p)
			}
		}
		if (errExact == nil) != (c == ClassPublic || c == ClassPrivate || c == ClassULA) {
			t.Fatalf("%s class %s: exact-host check = %v", a, c, errExact)
		}
		if err := g.Check(ap, false, nil); (err == nil) != (c == ClassPublic) {
			t.Fatalf("%s class %s: wildcard-host check = %v", a, c, err)
		}
	})
}

// ConditionalPrefixes lists exactly the private and ULA ranges: each
// prefix's first and last address classify as such, and the addresses
// just outside do not.
func TestConditionalPrefixes(t *testing.T) {
	ps := ConditionalPrefixes()
	if len(ps) != 4 {
		t.Fatalf("got %v", ps)
	}
	for _, p := range ps {
		first := p.Masked().Addr()
		last := first
		for i := p.Bits(); i < first.BitLen(); i++ {
			b := last.AsSlice()
			b[i/8] |= 0x80 >> (i % 8)
			last, _ = netip.AddrFromSlice(b)
		}
		for _, a := range []netip.Addr{first, last} {
			if c := Classify(a); c != ClassPrivate && c != ClassULA {
				t.Errorf("%s in %s classifies %v", a, p, c)
			}
		}
		for _, a := range []netip.Addr{first.Prev(), last.Next()} {
			if c := Classify(a); c == ClassPrivate || c == ClassULA {
				t.Errorf("%s outside %s classifies %v", a, p, c)
			}
		}
	}
}
