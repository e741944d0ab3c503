//go:build linux

package fence

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// sandboxSpec is what the sandbox-side ruleset depends on.
type sandboxSpec struct {
	hostAddr  netip.Addr
	proxyPort uint16
	// dns admits UDP and TCP port 53 to hostAddr (the policy DNS).
	dns bool
}

// hostSpec is what the host-side ruleset depends on.
type hostSpec struct {
	table     string
	hostIf    string
	hostAddr  netip.Addr
	proxyPort uint16
	fencePort uint16
	// dnsPort, when not 0, is the policy DNS listener: UDP and TCP to
	// hostAddr port 53 are redirected there.
	dnsPort uint16
	// transparentPort, when not 0, is the first port of the range
	// (to transparentLast) that receives the TCP connections to the
	// synthetic range (redirected ahead of the fence): the redirect
	// takes the first port of the range that gives a unique reply tuple.
	transparentPort, transparentLast uint16
	synthetic                        netip.Prefix
}

// hostNATPriority puts the redirect before every NAT chain at the usual
// dstnat priority, so another table (a container runtime's published
// ports, say) cannot claim the sandbox's connection first.
var hostNATPriority = nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest - 1)

// addSandboxRules queues, on c, the batch that creates table inet
// palisade inside the sandbox namespace, and returns the rules it queued. The table must not exist yet
// (NLM_F_EXCL), so a namespace is never fenced twice.
//
//	table inet palisade {
//	  chain output  { type filter hook output priority filter; policy drop;
//	    oifname "lo" accept
//	    meta nfproto ipv4 ip daddr HOST tcp dport PROXY accept
//	    ip daddr HOST udp/tcp dport 53 accept        # with dns only
//	    meta nfproto ipv4 meta l4proto tcp accept   # captured on the host
//	    counter reject with icmpx admin-prohibited
//	  }
//	  chain input   { type filter hook input priority filter; policy drop;
//	    iifname "lo" accept
//	    ct state established,related accept
//	    counter drop
//	  }
//	  chain forward { type filter hook forward priority filter; policy drop; }
//	}
func addSandboxRules(c *nftables.Conn, s sandboxSpec) []*nftables.Rule {
	t := c.CreateTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: SandboxTable})
	drop := nftables.ChainPolicyDrop
	out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})

	var rules []*nftables.Rule
	rule := func(ch *nftables.Chain, parts ...[]expr.Any) {
		rules = append(rules, c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(parts...)}))
	}

	// Output. Allowed destinations on the host address come first: the
	// proxy, and with the tcp substrate the policy DNS (udp/tcp HOST:53).
	rule(out, oifname("lo"), verdict(expr.VerdictAccept))
	allowed := []struct {
		proto byte
		port  uint16
	}{
		{unix.IPPROTO_TCP, s.proxyPort},
	}
	if s.dns {
		allowed = append(allowed, struct {
			proto byte
			port  uint16
		}{unix.IPPROTO_UDP, 53}, struct {
			proto byte
			port  uint16
		}{unix.IPPROTO_TCP, 53})
	}
	for _, a := range allowed {
		rule(out, ipv4Daddr(s.hostAddr), l4Dport(a.proto, a.port), verdict(expr.VerdictAccept))
	}
	// Every other IPv4 TCP connection leaves, to be redirected to the
	// fence listener on the host and refused there with an event.
	rule(out, nfproto(unix.NFPROTO_IPV4), l4proto(unix.IPPROTO_TCP), verdict(expr.VerdictAccept))
	// Everything else (UDP, ICMP, IPv6, raw protocols) fails at once.
	rule(out, counter(), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})

	// Input: loopback and replies only.
	rule(in, iifname("lo"), verdict(expr.VerdictAccept))
	rule(in, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
	rule(in, counter(), verdict(expr.VerdictDrop))
	return rules
}

// addHostRules queues, on c, the batch that creates the sandbox's table
// in the host namespace, and returns the rules it queued. Every rule is scoped to the sandbox's veth, and
// the filter chains' policy is accept: the chains see all host traffic.
// The table must not exist yet (NLM_F_EXCL).
//
//	table inet palisade-NAME {
//	  chain prerouting { type nat hook prerouting priority dstnat - 1; policy accept;
//	    iifname IF meta nfproto ipv4 ip daddr HOST tcp dport PROXY accept
//	    iifname IF ip daddr HOST udp/tcp dport 53 counter redirect to :DNS
//	    iifname IF ip daddr 198.18.0.0/15 meta l4proto tcp counter redirect to :TRANSPARENT-LAST
//	    iifname IF meta nfproto ipv4 meta l4proto tcp counter redirect to :FENCE
//	  }
//	  chain input { type filter hook input priority filter; policy accept;
//	    iifname IF ct state established,related accept
//	    iifname IF meta nfproto ipv4 ip daddr HOST tcp dport PROXY accept
//	    iifname IF meta nfproto ipv4 ip daddr HOST tcp dport FENCE accept
//	    iifname IF ip daddr HOST udp/tcp dport DNS ct status dnat accept
//	    iifname IF ip daddr HOST tcp dport TRANSPARENT-LAST ct status dnat accept
//	    iifname IF counter drop
//	  }
//	  chain forward { type filter hook forward priority filter; policy accept;
//	    iifname IF counter drop
//	    oifname IF counter drop
//	  }
//	}
func addHostRules(c *nftables.Conn, s hostSpec) []*nftables.Rule {
	t := c.CreateTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: s.table})
	accept := nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: hostNATPriority, Policy: &accept})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})

	var rules []*nftables.Rule
	rule := func(ch *nftables.Chain, parts ...[]expr.Any) {
		rules = append(rules, c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(parts...)}))
	}
	fromIf := iifname(s.hostIf)

	rule(pre, fromIf, ipv4Daddr(s.hostAddr), l4Dport(unix.IPPROTO_TCP, s.proxyPort), verdict(expr.VerdictAccept))
	if s.dnsPort != 0 {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			rule(pre, fromIf, ipv4Daddr(s.hostAddr), l4Dport(proto, 53), counter(), redirectTo(s.dnsPort))
		}
	}
	if s.transparentPort != 0 {
		rule(pre, fromIf, ipv4DaddrIn(s.synthetic), l4proto(unix.IPPROTO_TCP), counter(), redirectToRange(s.transparentPort, s.transparentLast))
	}
	rule(pre, fromIf, nfproto(unix.NFPROTO_IPV4), l4proto(unix.IPPROTO_TCP), counter(), redirectTo(s.fencePort))

	rule(in, fromIf, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
	rule(in, fromIf, ipv4Daddr(s.hostAddr), l4Dport(unix.IPPROTO_TCP, s.proxyPort), verdict(expr.VerdictAccept))
	rule(in, fromIf, ipv4Daddr(s.hostAddr), l4Dport(unix.IPPROTO_TCP, s.fencePort), verdict(expr.VerdictAccept))
	// The policy DNS and transparent listeners take only what the
	// redirects above sent them (conntrack status DNAT): a direct dial of
	// either port is fenced (TCP went to the fence listener instead).
	if s.dnsPort != 0 {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			rule(in, fromIf, ipv4Daddr(s.hostAddr), l4Dport(proto, s.dnsPort), ctStatusDNAT(), verdict(expr.VerdictAccept))
		}
	}
	if s.transparentPort != 0 {
		rule(in, fromIf, ipv4Daddr(s.hostAddr), l4DportRange(unix.IPPROTO_TCP, s.transparentPort, s.transparentLast), ctStatusDNAT(), verdict(expr.VerdictAccept))
	}
	rule(in, fromIf, counter(), verdict(expr.VerdictDrop))

	rule(fwd, fromIf, counter(), verdict(expr.VerdictDrop))
	rule(fwd, oifname(s.hostIf), counter(), verdict(expr.VerdictDrop))
	return rules
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ifnameBytes pads an interface name to IFNAMSIZ as the kernel stores it.
func ifnameBytes(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func iifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameBytes(name)},
	}
}

func oifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameBytes(name)},
	}
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// ipv4Daddr matches IPv4 packets to a.
func ipv4Daddr(a netip.Addr) []expr.Any {
	b := a.As4()
	return append(nfproto(unix.NFPROTO_IPV4),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b[:]},
	)
}

// l4Dport matches transport protocol proto with destination port port.
func l4Dport(proto byte, port uint16) []expr.Any {
	return append(l4proto(proto),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(port)},
	)
}

// l4DportRange matches transport protocol proto with destination port
// in lo..hi (one port when they are equal).
func l4DportRange(proto byte, lo, hi uint16) []expr.Any {
	if hi <= lo {
		return l4Dport(proto, lo)
	}
	return append(l4proto(proto),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: be16(lo), ToData: be16(hi)},
	)
}

func ctState(bits uint32) []expr.Any { return ctBits(expr.CtKeySTATE, bits) }

// ctBits matches connections whose conntrack key (state, status) has
// any of bits set.
func ctBits(key expr.CtKey, bits uint32) []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, bits)
	return []expr.Any{
		&expr.Ct{Key: key, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

// ipv4DaddrIn matches IPv4 packets to an address inside p.
func ipv4DaddrIn(p netip.Prefix) []expr.Any {
	b := p.Masked().Addr().As4()
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
	return append(nfproto(unix.NFPROTO_IPV4),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b[:]},
	)
}

// ipsDstNAT is the conntrack status bit IPS_DST_NAT (1 << IPS_DST_NAT_BIT).
const ipsDstNAT = 1 << 5

// ctStatusDNAT matches connections whose destination NAT rewrote (a
// redirect).
func ctStatusDNAT() []expr.Any { return ctBits(expr.CtKeySTATUS, ipsDstNAT) }

func counter() []expr.Any { return []expr.Any{&expr.Counter{}} }

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

// redirectTo sends the packet to port on the primary address of the
// interface it arrived on: the host side of the veth.
func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: be16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

// redirectToRange is redirectTo onto the ports lo..hi (one port when
// they are equal): the kernel's NAT takes the first of them that makes
// the connection's reply tuple unique, so a clash with an entry in
// TIME_WAIT changes the destination port, not the client's source port.
func redirectToRange(lo, hi uint16) []expr.Any {
	if hi <= lo {
		return redirectTo(lo)
	}
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: be16(lo)},
		&expr.Immediate{Register: 2, Data: be16(hi)},
		&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 2},
	}
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
