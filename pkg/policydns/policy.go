package policydns

import (
	"slices"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// TCPNames returns the names eligible for policy DNS in p: the host of
// every `protocol: tcp` endpoint (always an exact DNS name) with its
// ports, sorted and unique. Empty when p has no tcp endpoint.
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
// resolver on the host side of its veth, and nothing else.
func ResolvConf(nameserver string) []byte {
	return []byte("# Palisade policy DNS: only names of protocol: tcp endpoints resolve.\n" +
		"nameserver " + nameserver + "\noptions timeout:2 attempts:1\n")
}
