package upstreamproxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/decision"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
)

// NoProxy is the operator's list of destinations dialled directly rather
// than through the upstream proxy (--upstream-proxy-no-proxy). Loopback
// is always on it.
type NoProxy struct {
	entries []noProxyEntry
}

// noProxyEntry is one element of the list: a name (with its subdomains,
// or only its subdomains), or an address prefix; with a port, only that
// port.
type noProxyEntry struct {
	text       string // as the operator wrote it (events name it)
	port       int    // 0: any port
	name       string // canonical name ("" for an address entry)
	subdomains bool   // only strict subdomains of name (".x" or "*.x")
	prefix     netip.Prefix
}

// loopback is always dialled directly (the SSRF guard refuses it as a
// destination anyway; the corporate proxy must never be asked for it).
var loopback = []noProxyEntry{
	{text: "localhost", name: "localhost"},
	{text: "127.0.0.0/8", prefix: netip.MustParsePrefix("127.0.0.0/8")},
	{text: "::1", prefix: netip.MustParsePrefix("::1/128")},
}

// ParseNoProxy parses a comma-separated NO_PROXY list. Each entry is
//
//	example.com        the name and every name under it
//	.example.com       names under it only (so is *.example.com)
//	198.51.100.7       an address (IPv6 bare or in brackets)
//	198.51.100.0/24    a prefix (IPv4 or IPv6)
//
// each optionally followed by :PORT (an IPv6 address then in brackets),
// which limits the entry to that port. White space around entries is
// ignored; an empty entry, "*" (which would bypass the proxy for every
// destination: omit --upstream-proxy instead), a name that is not a DNS
// name and an address in any spelling but the standard one are errors
// naming the entry.
func ParseNoProxy(list string) (*NoProxy, error) {
	if strings.TrimSpace(list) == "" {
		return nil, errors.New("must not be empty (omit the flag for no exceptions)")
	}
	np := &NoProxy{}
	for i, raw := range strings.Split(list, ",") {
		e, err := parseNoProxyEntry(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("entry %d %q: %w", i+1, strings.TrimSpace(raw), err)
		}
		np.entries = append(np.entries, e)
	}
	return np, nil
}

func parseNoProxyEntry(s string) (noProxyEntry, error) {
	e := noProxyEntry{text: s}
	switch {
	case s == "":
		return e, errors.New("is empty (two commas in a row, or one at an end)")
	case s == "*":
		return e, errors.New("would send every destination around the upstream proxy: omit --upstream-proxy instead")
	}
	host := s
	if slash := strings.IndexByte(s, '/'); slash >= 0 {
		// A prefix; a port follows the bits: 10.0.0.0/8:443.
		bits := s[slash+1:]
		if b, port, ok := strings.Cut(bits, ":"); ok {
			bits = b
			if err := e.setPort(port); err != nil {
				return e, err
			}
		}
		addr := strings.TrimSuffix(strings.TrimPrefix(s[:slash], "["), "]")
		p, err := netip.ParsePrefix(addr + "/" + bits)
		if err != nil || p.Addr().Zone() != "" {
			return e, errors.New("is not an address prefix such as 10.0.0.0/8 or 2001:db8::/32")
		}
		e.prefix = unmapPrefix(p.Masked())
		return e, nil
	}
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return e, errors.New("has '[' without ']'")
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" {
			port, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return e, errors.New("has text after ']' that is not :PORT")
			}
			if err := e.setPort(port); err != nil {
				return e, err
			}
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return e, errors.New("is not an IPv6 address in brackets")
		}
		e.prefix = unmapPrefix(netip.PrefixFrom(a, 128))
		return e, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return e, errors.New("has an IPv6 zone: give a routable address")
		}
		e.prefix = unmapPrefix(netip.PrefixFrom(a, a.BitLen()))
		return e, nil
	}
	if h, port, ok := strings.Cut(s, ":"); ok {
		if strings.Contains(port, ":") {
			return e, errors.New("is not an address: an IPv6 address with a port goes in brackets ([2001:db8::1]:443)")
		}
		host = h
		if err := e.setPort(port); err != nil {
			return e, err
		}
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		e.prefix = netip.PrefixFrom(a, 32)
		return e, nil
	}
	if _, ok := ssrf.ParseHostLiteral(host); ok {
		return e, errors.New("is an IP address in a non-standard spelling: write it as dotted decimal or standard IPv6")
	}
	name := host
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name, e.subdomains = rest, true
	} else if rest, ok := strings.CutPrefix(name, "."); ok {
		name, e.subdomains = rest, true
	}
	c, err := decision.CanonicalHost(name)
	if err != nil || strings.ContainsAny(c, "*") {
		return e, errors.New("is neither a DNS name, an address nor a prefix")
	}
	e.name = c
	return e, nil
}

func (e *noProxyEntry) setPort(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s != strconv.Itoa(n) {
		return errors.New("has a port that is not 1-65535")
	}
	e.port = n
	return nil
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// Route decides how a checked destination is dialled: direct lists the
// addresses to dial directly (nil: through the upstream proxy) and entry
// is the NO_PROXY entry that decided it. host is the canonical requested
// host (a name or an IP literal), addrs the addresses the SSRF guard
// admitted for it, all with the requested port.
//
// A name entry (with a matching port, when it has one) sends every
// address directly. Otherwise an address or prefix entry matches through
// the addresses — a requested name included, by what it resolved to —
// and only the addresses the matching entries contain are dialled
// directly; when none does the destination goes through the proxy.
// Loopback is always direct.
func (np *NoProxy) Route(host string, addrs []netip.AddrPort) (direct []netip.AddrPort, entry string) {
	if len(addrs) == 0 {
		return nil, ""
	}
	port := int(addrs[0].Port())
	for _, list := range [][]noProxyEntry{loopback, np.list()} {
		for _, e := range list {
			if e.name != "" && e.portMatches(port) && e.matchesName(host) {
				return addrs, e.text
			}
		}
	}
	for _, ap := range addrs {
		if text, ok := np.addrEntry(ap.Addr().Unmap(), port); ok {
			direct = append(direct, ap)
			if entry == "" {
				entry = text
			}
		}
	}
	return direct, entry
}

// addrEntry returns the first address entry (loopback first) that
// contains a for port.
func (np *NoProxy) addrEntry(a netip.Addr, port int) (string, bool) {
	for _, list := range [][]noProxyEntry{loopback, np.list()} {
		for _, e := range list {
			if e.prefix.IsValid() && e.portMatches(port) && e.prefix.Contains(a) {
				return e.text, true
			}
		}
	}
	return "", false
}

func (e noProxyEntry) portMatches(port int) bool { return e.port == 0 || e.port == port }

func (np *NoProxy) list() []noProxyEntry {
	if np == nil {
		return nil
	}
	return np.entries
}

// matchesName reports whether the canonical host is the entry's name or
// (for a subdomain entry, only) a name under it. An IP literal host never
// matches a name.
func (e noProxyEntry) matchesName(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	if host == e.name {
		return !e.subdomains
	}
	return strings.HasSuffix(host, "."+e.name)
}

// Entries returns the list as parsed (without the implicit loopback
// entries), in order.
func (np *NoProxy) Entries() []string {
	var out []string
	for _, e := range np.list() {
		out = append(out, e.text)
	}
	return out
}
