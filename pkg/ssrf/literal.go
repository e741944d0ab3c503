package ssrf

import (
	"net/netip"
	"strings"
)

// ParseHostLiteral reports whether s, a URL or CONNECT host without port,
// is an IP address literal, and returns the address it denotes.
//
// IPv4 is recognised in every form glibc's inet_aton (and so getaddrinfo,
// curl and most clients) accepts, plus the WHATWG URL forms: one to four
// dot-separated parts, each decimal, octal (leading 0) or hexadecimal (0x),
// the last part filling the remaining bytes — 127.0.0.1, 127.1, 127.0.1,
// 2130706433, 0177.0.0.1, 0x7f.0.0.1, 0x7f000001 — optionally followed by
// one trailing dot ("127.0.0.1."). A part of "0x" alone is 0, as in URLs.
// Trailing garbage that inet_aton tolerates ("127.0.0.1 x") is not a
// literal; such a string is not a valid host name either, so callers that
// validate names reject it.
//
// IPv6 is accepted bare ("::1") or bracketed ("[::1]"); zones ("fe80::1%eth0")
// are rejected. IPv4-mapped forms ("::ffff:127.0.0.1") are returned as the
// IPv6 address they are; Classify reports them as ClassIPv4Mapped.
//
// The returned address has no zone and is never the zero Addr.
func ParseHostLiteral(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		if len(s) < 2 || s[len(s)-1] != ']' {
			return netip.Addr{}, false
		}
		return parseIPv6(s[1 : len(s)-1])
	}
	if strings.IndexByte(s, ':') >= 0 {
		return parseIPv6(s)
	}
	return parseIPv4(s)
}

func parseIPv6(s string) (netip.Addr, bool) {
	if strings.IndexByte(s, '%') >= 0 {
		return netip.Addr{}, false // zones are never acceptable destinations
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return netip.Addr{}, false
	}
	return a, true
}

// parseIPv4 implements the inet_aton grammar (see ParseHostLiteral).
func parseIPv4(s string) (netip.Addr, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return netip.Addr{}, false
	}
	var parts [4]uint64
	n := 0
	for {
		i := strings.IndexByte(s, '.')
		part := s
		if i >= 0 {
			part = s[:i]
		}
		if n == len(parts) {
			return netip.Addr{}, false // a fifth part
		}
		v, ok := parseIPv4Part(part)
		if !ok {
			return netip.Addr{}, false
		}
		parts[n] = v
		n++
		if i < 0 {
			break
		}
		s = s[i+1:]
	}
	// Every part but the last is one byte; the last fills the rest.
	var v uint64
	for i := 0; i < n-1; i++ {
		if parts[i] > 0xff {
			return netip.Addr{}, false
		}
		v |= parts[i] << (8 * (3 - i))
	}
	last := parts[n-1]
	if last > 0xffffffff>>(8*(n-1)) {
		return netip.Addr{}, false
	}
	v |= last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseIPv4Part parses one part: 0x/0X hex (possibly no digits: 0), leading-0
// octal, or decimal. Values above 2^32-1 are rejected.
func parseIPv4Part(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := uint64(10)
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
	case len(p) >= 2 && p[0] == '0':
		base, p = 8, p[1:]
	}
	var v uint64
	for i := 0; i < len(p); i++ {
		c := p[i]
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case base == 16 && c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		v = v*base + d
		if v > 0xffffffff {
			return 0, false
		}
	}
	return v, true
}
