package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// forbiddenRanges are the destinations an allowed_ips entry or an IP host
// must never overlap: loopback, link-local (including cloud metadata at
// 169.254.169.254) and unspecified, in IPv4, IPv6 and IPv4-mapped IPv6.
var forbiddenRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::ffff:127.0.0.0/104"), "loopback"},
	{netip.MustParsePrefix("::ffff:169.254.0.0/112"), "link-local"},
	{netip.MustParsePrefix("::ffff:0.0.0.0/128"), "unspecified"},
}

// forbiddenOverlap names the forbidden range p overlaps, or "".
func forbiddenOverlap(p netip.Prefix) string {
	for _, f := range forbiddenRanges {
		if p.Overlaps(f.prefix) {
			return fmt.Sprintf("%s (%s)", f.what, f.prefix)
		}
	}
	return ""
}

// parseAllowedIP parses an allowed_ips entry (an IP or a CIDR with no host
// bits set) and returns its canonical prefix.
func parseAllowedIP(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		p, err = netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a valid CIDR", s)
		}
		if p.Masked() != p {
			return netip.Prefix{}, fmt.Errorf("%q has host bits set; did you mean %s?", s, p.Masked())
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a valid IP address or CIDR", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q: IPv6 zones are not allowed", s)
	}
	if what := forbiddenOverlap(p); what != "" {
		return netip.Prefix{}, fmt.Errorf("%s overlaps %s, which is never allowed", p, what)
	}
	return p, nil
}
