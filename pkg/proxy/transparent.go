package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
)

// Reasons of the transparent listener.
const (
	ReasonNoMapping      = "no_mapping"
	ReasonMappingExpired = "mapping_expired"
	ReasonWrongPort      = "port_not_eligible"
	// ReasonOtherEpoch: a synthetic address of another boot epoch, as a
	// client that cached it before the proxy restarted would use.
	ReasonOtherEpoch = "other_epoch"
)

// MappingInfo is unmapped.egress_proxy.transparent: the policy DNS
// mapping a transparent connection used (or failed to find). It marks
// every event of a transparent connection, the HTTP Activity of each
// request on an inspected one included.
type MappingInfo struct {
	// Generation is the policy generation that made the name eligible
	// (0 when no mapping was found).
	Generation int64    `json:"generation"`
	MappingID  string   `json:"mapping_id,omitempty"`
	Name       string   `json:"name,omitempty"`
	Real       []string `json:"real,omitempty"`
	Synthetic  string   `json:"synthetic"`
}

// SetMappings gives the proxy the policy DNS table its transparent
// listener maps synthetic destinations with. Call it before
// ServeTransparent.
func (p *Proxy) SetMappings(t *policydns.Table) { p.mappings = t }

// ServeTransparent accepts connections the host-side nftables redirected
// from the synthetic range (policydns.SyntheticRange) until Close.
func (p *Proxy) ServeTransparent(ln net.Listener) error {
	if p.cfg.OriginalDst == nil || p.mappings == nil {
		return errors.New("proxy: transparent listener needs Config.OriginalDst and SetMappings")
	}
	return p.acceptLoop(ln, ListenerTransparent)
}

// DNSName is what the policy in force says about one DNS name (see
// Namer): the ports it is eligible on, the generation that says so, and
// the scope its real addresses are resolved with. The scope is the widest
// of the selecting endpoints'; each connection is dialled with the scope
// of the endpoint that decides it.
type DNSName struct {
	Ports      []int
	Generation int64
	Scope      Scope
}

// LookupName answers policy DNS's question from the generation in force:
// ok is false when no endpoint selects name by host (IP literals and
// hostless endpoints never do).
func (p *Proxy) LookupName(name string) (DNSName, bool) {
	g := p.gen.Load()
	if g == nil {
		return DNSName{}, false
	}
	nm, ok := g.Decider.(Namer)
	if !ok {
		return DNSName{}, false
	}
	ports, sc, ok := nm.Name(name)
	if !ok || len(ports) == 0 {
		return DNSName{}, false
	}
	return DNSName{Ports: ports, Generation: g.Number, Scope: sc}, true
}

// DNSActor names the sandbox process that sent a policy DNS query from
// client to server over network ("udp" or "tcp"), for the event of a
// refused one: nil when it cannot be named (no attributor, the socket is
// gone, a UDP socket and an attributor without UDPAttributor). A socket
// whose connect record is missing is named by its holder: this is a
// record, not a decision.
func (p *Proxy) DNSActor(network string, client, server netip.AddrPort) *ocsf.Actor {
	if p.cfg.Attributor == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), dnsAttributionTimeout)
	defer cancel()
	var id *Identity
	var err error
	switch u, ok := p.cfg.Attributor.(UDPAttributor); {
	case network == "tcp":
		id, err = p.cfg.Attributor.Lookup(ctx, client, server)
	case ok:
		id, err = u.LookupUDP(ctx, client, server)
	default:
		return nil
	}
	var ie *IncompleteError
	if errors.As(err, &ie) {
		id, err = ie.Holder, nil
	}
	if err != nil {
		return nil
	}
	return id.actor(p.src.Sandbox)
}

// dnsAttributionTimeout bounds naming a refused query's sender: the
// refusal waits for it.
const dnsAttributionTimeout = time.Second

// DNSEligibility is LookupName in the shape of policydns.Eligibility.
func (p *Proxy) DNSEligibility(name string) ([]int, int64, bool) {
	n, ok := p.LookupName(name)
	return n.Ports, n.Generation, ok
}

// checkTCPSubstrate refuses a reload that brings the first `protocol:
// tcp` endpoint to a proxy started without one and without the
// substrate (SetMappings): the policy DNS and the transparent redirect
// are set up when the sandbox starts (seed 004). A proxy that started
// with one may remove and re-add tcp endpoints freely.
func (p *Proxy) checkTCPSubstrate(cur, next *Generation) error {
	if cur == nil || p.baseTCP || p.mappings != nil || len(next.TCP) == 0 {
		return nil
	}
	return errors.New("network_policies: the first protocol: tcp endpoint cannot be added by a reload (policy DNS and transparent TCP are set up when the sandbox starts); recreate the sandbox")
}

// handleTransparent serves one connection to a synthetic address: the
// original destination is looked up in the policy DNS table, and the
// connection is then what a CONNECT to the mapping's name and port would
// be: the caller is attributed and decided on by admit, only the real
// addresses recorded with the mapping are dialled (through the SSRF
// guard, with the deciding endpoint's scope, and chained through the
// upstream proxy exactly as the CONNECT would be), and tunnel serves it —
// TLS terminated and every request held to the endpoint's L7 rules when
// it is inspected, the ClientHello's server name checked against the
// name otherwise (unless tls: skip). Every refusal before the tunnel
// resets the connection (SO_LINGER 0): the client has no proxy to read a
// 403 from.
func (p *Proxy) handleTransparent(c *net.TCPConn, rec *Record) {
	rec.Kind = KindConnect
	c.SetLinger(0)
	g := p.gen.Load()
	if g != nil {
		rec.Generation, rec.PolicySHA = g.Number, g.SHA256
	}
	m, ok := p.mapped(c, rec)
	if !ok {
		return
	}
	v, ok := p.admit(c, rec, g, true)
	if !ok {
		return // reset, or closed unanswered when the client is gone
	}
	if v.Endpoint != nil && v.Endpoint.Protocol == policy.ProtocolTCP {
		rec.Kind = KindTCP
	}
	if len(m.Real) == 0 { // never resolve the name here: nil pinned would
		rec.Outcome, rec.Reason, rec.Cause = OutcomeUpstreamFailed, ReasonConnectFailed, "mapping has no real address"
		return
	}
	up, err := p.dialUpstream(rec, v.Scope, m.Real)
	if err != nil {
		var de *DenyError
		var ue *UpstreamProxyError
		switch {
		case errors.As(err, &de):
			rec.Outcome, rec.Reason = OutcomeSSRFDenied, de.Reason
		case errors.As(err, &ue):
			rec.Outcome, rec.Reason, rec.Cause = OutcomeUpstreamFailed, ue.Reason, err.Error()
		default:
			rec.Outcome, rec.Reason, rec.Cause = OutcomeUpstreamFailed, ReasonConnectFailed, err.Error()
		}
		return
	}
	rec.Outcome = OutcomeAllowed
	untrack := p.trackUpstream(up)
	defer func() {
		untrack()
		up.Close()
	}()
	c.SetLinger(-1)
	br := newPooledReader(c)
	defer br.release()
	p.tunnel(c, br.Reader, up, rec, v, br.release, false)
}

// mapped finds the policy DNS mapping of a transparent connection's
// original destination and records it (host, port, mapping). On a
// refusal (no mapping, expired, another epoch's, a port the name is not
// eligible on) it sets the record's outcome and reason, attributes the
// caller for the event only, and returns false.
func (p *Proxy) mapped(c *net.TCPConn, rec *Record) (policydns.Mapping, bool) {
	dst, err := p.cfg.OriginalDst(c)
	if err != nil {
		rec.Outcome, rec.Reason, rec.Cause = OutcomePolicyDenied, ReasonNoMapping, "original destination unavailable: "+err.Error()
		return policydns.Mapping{}, false
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	rec.Local, rec.Host, rec.Port = dst, dst.Addr().String(), int(dst.Port())
	rec.Mapping = &MappingInfo{Synthetic: dst.Addr().String()}
	m, lerr := p.mappings.Lookup(dst)
	if m.ID != "" {
		real := make([]string, len(m.Real))
		for i, a := range m.Real {
			real[i] = a.String()
		}
		rec.Mapping.MappingID, rec.Mapping.Name, rec.Mapping.Real, rec.Mapping.Generation = m.ID, m.Name, real, m.Generation
		rec.Host = m.Name
	}
	if lerr == nil {
		return m, true
	}
	rec.Outcome = OutcomePolicyDenied
	switch {
	case errors.Is(lerr, policydns.ErrExpired):
		rec.Reason = ReasonMappingExpired
	case errors.Is(lerr, policydns.ErrWrongPort):
		rec.Reason = ReasonWrongPort
	case errors.Is(lerr, policydns.ErrOtherEpoch):
		rec.Reason = ReasonOtherEpoch
	default:
		rec.Reason = ReasonNoMapping
	}
	// Attributed for the event only; the refusal stands either way.
	if p.cfg.Attributor != nil {
		ctx, cancel := context.WithTimeout(context.Background(), attributionTimeout)
		if id, err := p.cfg.Attributor.Lookup(ctx, rec.Client, rec.Local); err == nil {
			rec.Identity = id
		}
		cancel()
	}
	return m, false
}

// dialMapped dials the mapping's real addresses in order, each as an IP
// literal through a Dialer that is no TunnelDialer (so the SSRF guard
// checks it), and returns the first connection.
func (p *Proxy) dialMapped(ctx context.Context, real []netip.Addr, port int, sc Scope) (net.Conn, netip.AddrPort, error) {
	var errs []error
	for _, a := range real {
		up, ap, err := p.cfg.Dialer.DialContext(ctx, a.String(), port, sc)
		if err == nil {
			return up, ap, nil
		}
		errs = append(errs, err)
		var de *DenyError
		if len(real) == 1 && errors.As(err, &de) {
			return nil, netip.AddrPort{}, err
		}
	}
	if len(errs) == 0 {
		return nil, netip.AddrPort{}, fmt.Errorf("mapping has no real address")
	}
	var de *DenyError
	if errors.As(errs[0], &de) {
		return nil, netip.AddrPort{}, errs[0]
	}
	return nil, netip.AddrPort{}, errors.Join(errs...)
}
