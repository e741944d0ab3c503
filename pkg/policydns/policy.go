package policydns

import (
	"slices"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// TCPNames returns the host of every `protocol: tcp` endpoint of p
// (always an exact DNS name) with its ports, sorted and unique. Empty
// when p has no tcp endpoint. (Policy DNS answers every name of the
// policy, see decision.Engine.Name; a proxy started without the policy
// DNS refuses a reload that brings the first tcp endpoint, which needs
// it.)
func TCPNames(p *policy.Policy) map[string][]int {
	out := map[string][]int{}
	if p == nil {
		return out
	}
	for _, np := range p.NetworkPolicies {
		if np == nil {
			continue
		}
		for _, ep := range np.Endpoints {
			if ep == nil || ep.Protocol != policy.ProtocolTCP || ep.Host == "" {
				continue
			}
			out[ep.Host] = append(out[ep.Host], ep.Ports...)
		}
	}
	for h, ports := range out {
		slices.Sort(ports)
		out[h] = slices.Compact(ports)
	}
	return out
}

// ResolvConf is the /etc/resolv.conf a sandbox with policy DNS sees: the
// resolver on the host side of its veth, and nothing else (no search
// domains: a short name is not tried under another suffix).
func ResolvConf(nameserver string) []byte {
	return []byte("# Palisade policy DNS: names in the sandbox's network policy resolve,\n" +
		"# every other name is NXDOMAIN.\n" +
		"nameserver " + nameserver + "\noptions timeout:2 attempts:1\n")
}

// Hosts is the /etc/hosts a sandbox with policy DNS sees: loopback and
// the sandbox's own hostname (when it is a valid host name), nothing
// from the host's file, so that no name resolves behind the policy DNS's
// back to an address the fence would refuse.
func Hosts(hostname string) []byte {
	b := []byte("# Palisade: every other name resolves through the policy DNS (/etc/resolv.conf).\n" +
		"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	if validHostname(hostname) {
		b = append(b, "127.0.1.1\t"+hostname+"\n"...)
	}
	return b
}

// validHostname: one or more labels of ASCII letters, digits and '-'
// (not at either end), at most 63 characters each and 253 in all.
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
