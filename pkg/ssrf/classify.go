package ssrf

import "net/netip"

// Class is what kind of destination an address is.
type Class uint8

// Address classes. Only ClassPublic is reachable without conditions;
// ClassPrivate and ClassULA are reachable under the conditions Guard
// documents; everything else is always denied.
const (
	ClassInvalid        Class = iota // the zero Addr
	ClassPublic                      // globally routable unicast, including TEST-NET and 2001:db8::/32
	ClassUnspecified                 // 0.0.0.0/8, ::
	ClassLoopback                    // 127.0.0.0/8, ::1
	ClassPrivate                     // RFC 1918: 10/8, 172.16/12, 192.168/16
	ClassULA                         // fc00::/7 (except the metadata address)
	ClassLinkLocal                   // 169.254/16, fe80::/10 (except the metadata address)
	ClassMulticast                   // 224/4, ff00::/8
	ClassBroadcast                   // 255.255.255.255
	ClassReserved                    // 240/4, 192.0.0/24, fec0::/10, 100::/64, IPv6 outside 2000::/3
	ClassCGNAT                       // 100.64/10 (except the metadata address)
	ClassBenchmarking                // 198.18/15, 2001:2::/48
	ClassMetadata                    // 169.254.169.254, fd00:ec2::254, 100.100.100.200
	ClassIPv4Mapped                  // ::ffff:0:0/96
	ClassIPv4Compatible              // ::/96 (except :: and ::1)
	ClassNAT64                       // 64:ff9b::/96, 64:ff9b:1::/48
	Class6to4                        // 2002::/16
	ClassTeredo                      // 2001::/32
)

var classNames = [...]string{
	ClassInvalid:        "invalid",
	ClassPublic:         "public",
	ClassUnspecified:    "unspecified",
	ClassLoopback:       "loopback",
	ClassPrivate:        "private",
	ClassULA:            "ula",
	ClassLinkLocal:      "link_local",
	ClassMulticast:      "multicast",
	ClassBroadcast:      "broadcast",
	ClassReserved:       "reserved",
	ClassCGNAT:          "cgnat",
	ClassBenchmarking:   "benchmarking",
	ClassMetadata:       "metadata",
	ClassIPv4Mapped:     "ipv4_mapped",
	ClassIPv4Compatible: "ipv4_compatible",
	ClassNAT64:          "nat64",
	Class6to4:           "6to4",
	ClassTeredo:         "teredo",
}

// String returns the class's snake_case name ("loopback", "ipv4_mapped").
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// Embeds reports whether the class is an IPv6 form that carries an IPv4
// address (mapped, compatible, NAT64, 6to4, Teredo).
func (c Class) Embeds() bool {
	switch c {
	case ClassIPv4Mapped, ClassIPv4Compatible, ClassNAT64, Class6to4, ClassTeredo:
		return true
	}
	return false
}

type classRange struct {
	p netip.Prefix
	c Class
}

// The first matching range wins, so specific ranges precede the ranges
// that contain them.
var v4Ranges = []classRange{
	{netip.MustParsePrefix("0.0.0.0/8"), ClassUnspecified},
	{netip.MustParsePrefix("127.0.0.0/8"), ClassLoopback},
	{netip.MustParsePrefix("169.254.169.254/32"), ClassMetadata},
	{netip.MustParsePrefix("169.254.0.0/16"), ClassLinkLocal},
	{netip.MustParsePrefix("100.100.100.200/32"), ClassMetadata},
	{netip.MustParsePrefix("100.64.0.0/10"), ClassCGNAT},
	{netip.MustParsePrefix("10.0.0.0/8"), ClassPrivate},
	{netip.MustParsePrefix("172.16.0.0/12"), ClassPrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), ClassPrivate},
	{netip.MustParsePrefix("198.18.0.0/15"), ClassBenchmarking},
	{netip.MustParsePrefix("192.0.0.0/24"), ClassReserved},
	{netip.MustParsePrefix("224.0.0.0/4"), ClassMulticast},
	{netip.MustParsePrefix("255.255.255.255/32"), ClassBroadcast},
	{netip.MustParsePrefix("240.0.0.0/4"), ClassReserved},
}

var v6Ranges = []classRange{
	{netip.MustParsePrefix("::/128"), ClassUnspecified},
	{netip.MustParsePrefix("::1/128"), ClassLoopback},
	{netip.MustParsePrefix("::ffff:0:0/96"), ClassIPv4Mapped},
	{netip.MustParsePrefix("::/96"), ClassIPv4Compatible},
	{netip.MustParsePrefix("64:ff9b::/96"), ClassNAT64},
	{netip.MustParsePrefix("64:ff9b:1::/48"), ClassNAT64},
	{netip.MustParsePrefix("2002::/16"), Class6to4},
	{netip.MustParsePrefix("2001::/32"), ClassTeredo},
	{netip.MustParsePrefix("2001:2::/48"), ClassBenchmarking},
	{netip.MustParsePrefix("fd00:ec2::254/128"), ClassMetadata},
	{netip.MustParsePrefix("fc00::/7"), ClassULA},
	{netip.MustParsePrefix("fe80::/10"), ClassLinkLocal},
	{netip.MustParsePrefix("fec0::/10"), ClassReserved}, // deprecated site-local
	{netip.MustParsePrefix("ff00::/8"), ClassMulticast},
	{netip.MustParsePrefix("100::/64"), ClassReserved}, // discard-only
	{netip.MustParsePrefix("2000::/3"), ClassPublic},
}

var nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")

// Classify returns the class of addr. A zone is ignored. IPv6 addresses
// outside the global unicast range 2000::/3 that no other class covers are
// ClassReserved. TEST-NET-1/2/3 (192.0.2/24, 198.51.100/24, 203.0.113/24)
// and 2001:db8::/32 are ClassPublic: tests use them as the internet.
func Classify(addr netip.Addr) Class {
	if !addr.IsValid() {
		return ClassInvalid
	}
	addr = addr.WithZone("")
	if addr.Is4() {
		for _, r := range v4Ranges {
			if r.p.Contains(addr) {
				return r.c
			}
		}
		return ClassPublic
	}
	for _, r := range v6Ranges {
		if r.p.Contains(addr) {
			return r.c
		}
	}
	return ClassReserved
}

// EmbeddedIPv4 returns the IPv4 address an IPv6 address carries, for the
// forms that define one: IPv4-mapped and -compatible (last 32 bits), NAT64
// well-known prefix 64:ff9b::/96 (last 32 bits), 6to4 (bits 16-47) and
// Teredo (the client address: the bitwise NOT of the last 32 bits). The
// local-use NAT64 prefix 64:ff9b:1::/48 is not decoded: where the IPv4
// address sits depends on the site's prefix length.
func EmbeddedIPv4(addr netip.Addr) (netip.Addr, bool) {
	if !addr.Is6() {
		return netip.Addr{}, false
	}
	b := addr.As16()
	last := [4]byte{b[12], b[13], b[14], b[15]}
	switch Classify(addr) {
	case ClassIPv4Mapped, ClassIPv4Compatible:
		return netip.AddrFrom4(last), true
	case ClassNAT64:
		if nat64WellKnown.Contains(addr.WithZone("")) {
			return netip.AddrFrom4(last), true
		}
	case Class6to4:
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	case ClassTeredo:
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

// ConditionalPrefixes returns the ranges whose addresses Guard allows
// only under conditions (ClassPrivate and ClassULA: an exact host or
// allowed_ips), from the same tables Classify reads. A fresh slice per
// call.
func ConditionalPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, rs := range [][]classRange{v4Ranges, v6Ranges} {
		for _, r := range rs {
			if r.c == ClassPrivate || r.c == ClassULA {
				out = append(out, r.p)
			}
		}
	}
	return out
}
