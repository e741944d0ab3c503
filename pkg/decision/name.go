package decision

import (
	"net/netip"
	"slices"
	"strings"
)

// Name is what a policy says about one DNS name, whatever the binary: the
// ports of every endpoint whose host selects the name (an exact host or a
// wildcard pattern), and the widest SSRF scope those endpoints give its
// addresses. Policy DNS answers exactly such names; the connection that
// follows is decided by Decide as any other.
type Name struct {
	// Ports are the selecting endpoints' ports, sorted and unique.
	Ports []int
	// ExactHost is set when an endpoint names the host exactly (private
	// addresses may then be reached, see Result.Scope).
	ExactHost bool
	// AllowedIPs is the union of the selecting endpoints' allowed_ips.
	AllowedIPs []netip.Prefix
}

// Name reports what the policy says about the DNS name name (canonicalised
// as CanonicalHost does): ok is false when no endpoint selects it by host.
// IP literals are never names, and hostless (allowed_ips only) endpoints,
// which select any name on their ports, select none here: they stay with
// the explicit proxy, which resolves a name only after a binary was
// allowed.
func (e *Engine) Name(name string) (Name, bool) {
	host, addr, err := canonicalHost(name)
	if err != nil || addr.IsValid() {
		return Name{}, false
	}
	var n Name
	found := false
	add := func(c *candidate) {
		if c.verify && !c.pat.Match(host) {
			return
		}
		found = true
		n.Ports = append(n.Ports, c.ep.Ports...)
		n.ExactHost = n.ExactHost || c.exactHost
		n.AllowedIPs = append(n.AllowedIPs, c.allowed...)
	}
	addAll := func(cs []*candidate) {
		for _, c := range cs {
			add(c)
		}
	}
	addAll(e.exact[host])
	if i := strings.IndexByte(host, '.'); i >= 0 {
		suffix := host[i+1:]
		if ix := e.intra[suffix]; ix != nil {
			ix.each(host[:i], add)
		}
		addAll(e.one[suffix])
		for s := suffix; ; {
			addAll(e.multi[s])
			j := strings.IndexByte(s, '.')
			if j < 0 {
				break
			}
			s = s[j+1:]
		}
	}
	if !found {
		return Name{}, false
	}
	slices.Sort(n.Ports)
	n.Ports = slices.Compact(n.Ports)
	slices.SortFunc(n.AllowedIPs, func(a, b netip.Prefix) int { return a.Compare(b) })
	n.AllowedIPs = slices.Compact(n.AllowedIPs)
	return n, true
}
