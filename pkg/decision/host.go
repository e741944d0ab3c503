package decision

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/ssrf"
)

// CanonicalHost returns the canonical form of a request host (no port):
// an IP literal in any spelling ssrf.ParseHostLiteral accepts becomes its
// canonical address text ("0x7f.1" → "127.0.0.1", "[::1]" → "::1"); a DNS
// name is lower-cased with one trailing dot removed. Names must be ASCII
// letters, digits, '-' and '_' in labels of 1-63 characters (no leading or
// trailing '-'), at most 253 characters. A name whose last label is
// numeric ("1.2.3.256", "foo.0x10") is rejected: URL parsers treat it as a
// (malformed) IPv4 address, and it must not reach a resolver as a name.
func CanonicalHost(h string) (string, error) {
	s, _, err := canonicalHost(h)
	return s, err
}

// canonicalHost is CanonicalHost that also returns the literal address
// (invalid for names).
func canonicalHost(h string) (string, netip.Addr, error) {
	if h == "" {
		return "", netip.Addr{}, errors.New("host is empty")
	}
	if a, ok := ssrf.ParseHostLiteral(h); ok {
		return a.String(), a, nil
	}
	s := strings.TrimSuffix(h, ".")
	if s == "" {
		return "", netip.Addr{}, errors.New("host is only a dot")
	}
	if len(s) > 253 {
		return "", netip.Addr{}, fmt.Errorf("host is %d characters; a DNS name has at most 253", len(s))
	}
	upper := false
	labelStart := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			l := s[labelStart:i]
			switch {
			case l == "":
				return "", netip.Addr{}, errors.New("host has an empty label")
			case len(l) > 63:
				return "", netip.Addr{}, errors.New("host has a label longer than 63 characters")
			case l[0] == '-' || l[len(l)-1] == '-':
				return "", netip.Addr{}, errors.New("host has a label that starts or ends with '-'")
			}
			labelStart = i + 1
			continue
		}
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c >= 'A' && c <= 'Z':
			upper = true
		default:
			return "", netip.Addr{}, fmt.Errorf("host contains %q; names are ASCII letters, digits, '-', '_' and '.'", rune(c))
		}
	}
	if numericLabel(s[strings.LastIndexByte(s, '.')+1:]) {
		return "", netip.Addr{}, errors.New("host looks like an IPv4 address but is not a valid one")
	}
	if upper {
		s = strings.ToLower(s)
	}
	return s, netip.Addr{}, nil
}

// numericLabel reports whether a label is a number in the IPv4 sense:
// decimal digits, or 0x/0X followed by hex digits (or nothing).
func numericLabel(l string) bool {
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		for i := 2; i < len(l); i++ {
			c := l[i] | 0x20
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return l != ""
}
