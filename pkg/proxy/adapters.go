package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"

	"github.com/palisade-sandbox/palisade/pkg/attribution"
	"github.com/palisade-sandbox/palisade/pkg/decision"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
	"github.com/palisade-sandbox/palisade/pkg/upstreamproxy"
)

// The adapters below connect the proxy's small interfaces to the real
// packages: decision (the policy engine), ssrf (resolve, classify, dial
// the checked address) and attribution (socket to process, binary pins).

// CompileDecision compiles a generation with decision.Compile.
func CompileDecision(p *policy.Policy, gen int64) (Decider, error) {
	e, err := decision.Compile(p, gen)
	if err != nil {
		return nil, err
	}
	return decisionEngine{e: e, inspectors: &inspectorCache{}}, nil
}

type decisionEngine struct {
	e          *decision.Engine
	inspectors *inspectorCache
}

func (d decisionEngine) Decide(r DecideRequest) Verdict {
	res := d.e.Decide(decision.Request{Host: r.Host, Port: r.Port, Binary: r.Binary, Ancestors: r.Ancestors})
	v := Verdict{
		Allowed: res.Allowed,
		Entry:   res.EntryName,
		Audit:   res.Audit,
		Scope:   Scope{ExactHost: res.ExactHost, AllowedIPs: res.AllowedIPs, OnlyAllowedIPs: res.OnlyAllowedIPs},
	}
	if v.Entry == "" {
		v.Entry = res.Entry
	}
	if res.Endpoint != nil {
		v.EndpointID = endpointID(res.Entry, res.EndpointIndex)
	}
	if ep := res.Endpoint; res.Allowed && ep != nil {
		v.L7Rules = ep.Inspected()
		v.Endpoint = ep
		if v.L7Rules {
			v.Inspector = d.inspectors.get(ep)
		}
	}
	if !res.Allowed {
		v.Reason = res.Reason.String()
	}
	return v
}

// Name implements Namer with decision.Engine.Name.
func (d decisionEngine) Name(name string) ([]int, Scope, bool) {
	n, ok := d.e.Name(name)
	return n.Ports, Scope{ExactHost: n.ExactHost, AllowedIPs: n.AllowedIPs}, ok
}

// CanonicalHost is decision.CanonicalHost: IP literals in any spelling
// become canonical address text, names are lower-cased without the
// trailing dot, anything else is an error.
func CanonicalHost(h string) (string, error) { return decision.CanonicalHost(h) }

// SSRFDialer adapts an *ssrf.Dialer, turning its *ssrf.DenyError into a
// *DenyError carrying the guard's reason. With Chain set it is a
// TunnelDialer: CONNECT tunnels go through the operator's upstream proxy
// (except the Chain's NO_PROXY destinations and loopback), to the address
// the guard checked.
type SSRFDialer struct {
	Dialer *ssrf.Dialer
	Chain  *upstreamproxy.Chain
}

// DialContext implements Dialer.
func (s SSRFDialer) DialContext(ctx context.Context, host string, port int, sc Scope) (net.Conn, netip.AddrPort, error) {
	c, ap, err := s.Dialer.DialScope(ctx, host, port, ssrfScope(sc))
	return c, ap, denyError(err)
}

func ssrfScope(sc Scope) ssrf.Scope {
	return ssrf.Scope{ExactHost: sc.ExactHost, AllowedIPs: sc.AllowedIPs, OnlyAllowedIPs: sc.OnlyAllowedIPs}
}

func denyError(err error) error {
	var de *ssrf.DenyError
	if errors.As(err, &de) {
		return &DenyError{Reason: de.Reason.String()}
	}
	return err
}

// DialTunnel implements TunnelDialer. Without a Chain it is DialContext.
// With one, the name is resolved and every answer checked first, and the
// checked addresses are routed (route).
func (s SSRFDialer) DialTunnel(ctx context.Context, host string, port int, sc Scope) (net.Conn, Route, error) {
	if s.Chain == nil {
		c, ap, err := s.DialContext(ctx, host, port, sc)
		return c, Route{Addr: ap}, err
	}
	addrs, err := s.Dialer.Resolve(ctx, host, port, ssrfScope(sc))
	if err != nil {
		return nil, Route{}, denyError(err)
	}
	return s.route(ctx, host, port, addrs)
}

// DialPinned implements TunnelDialer: DialTunnel to addresses resolved
// before (a transparent connection's policy DNS mapping), each checked
// again for the scope; nothing is resolved.
func (s SSRFDialer) DialPinned(ctx context.Context, host string, port int, sc Scope, pinned []netip.Addr) (net.Conn, Route, error) {
	addrs, err := s.Dialer.Admit(pinned, port, ssrfScope(sc))
	if err != nil {
		return nil, Route{}, denyError(err)
	}
	if s.Chain == nil {
		c, ap, err := s.Dialer.DialResolved(ctx, host, port, addrs)
		return c, Route{Addr: ap}, err
	}
	return s.route(ctx, host, port, addrs)
}

// route connects to host's checked addresses: the NO_PROXY list picks
// those dialled directly, and otherwise they are tried in order through
// the upstream proxy, each as the CONNECT target (the name instead with
// ConnectByHostname, once): a 502, 503 or 504 from the proxy moves on to
// the next address, any other refusal ends the attempt.
func (s SSRFDialer) route(ctx context.Context, host string, port int, addrs []netip.AddrPort) (net.Conn, Route, error) {
	r := Route{Proxy: s.Chain.String()}
	if direct, entry := s.Chain.Route(host, addrs); direct != nil {
		c, ap, err := s.Dialer.DialResolved(ctx, host, port, direct)
		r.Addr, r.NoProxy = ap, entry
		return c, r, err
	}
	if s.Chain.ConnectByHostname {
		addrs = addrs[:1]
	}
	for i, ap := range addrs {
		r.Addr, r.Target = ap, s.Chain.Target(host, ap)
		c, err := s.chained(ctx, r.Target)
		var ue *upstreamproxy.Error
		if err == nil || i == len(addrs)-1 || ctx.Err() != nil ||
			!errors.As(err, &ue) || ue.Kind != upstreamproxy.KindRefused || ue.Status < 502 || ue.Status > 504 {
			return c, r, upstreamError(err)
		}
	}
	return nil, r, errors.New("proxy: no address to dial") // unreachable: Resolve and Admit return at least one
}

// Redial implements TunnelDialer.
func (s SSRFDialer) Redial(ctx context.Context, host string, r Route) (net.Conn, error) {
	if !r.Chained() || s.Chain == nil {
		c, _, err := s.Dialer.DialResolved(ctx, host, int(r.Addr.Port()), []netip.AddrPort{r.Addr})
		return c, err
	}
	c, err := s.chained(ctx, r.Target)
	return c, upstreamError(err)
}

// chained connects to the upstream proxy (resolved afresh each time,
// without the SSRF guard: the operator named it) and opens a tunnel to
// target through it.
func (s SSRFDialer) chained(ctx context.Context, target string) (net.Conn, error) {
	ch := s.Chain
	var addrs []netip.AddrPort
	if a, ok := ssrf.ParseHostLiteral(ch.Host); ok {
		addrs = []netip.AddrPort{netip.AddrPortFrom(a, uint16(ch.Port))}
	} else {
		found, err := s.Dialer.Resolver.LookupNetIP(ctx, ch.Host)
		if err != nil {
			return nil, &upstreamproxy.Error{Proxy: ch.String(), Target: target, Err: fmt.Errorf("resolve %s: %w", ch.Host, err)}
		}
		for _, a := range found {
			addrs = append(addrs, netip.AddrPortFrom(a.Unmap(), uint16(ch.Port)))
		}
	}
	raw, _, err := s.Dialer.DialResolved(ctx, ch.Host, ch.Port, addrs)
	if err != nil {
		return nil, &upstreamproxy.Error{Proxy: ch.String(), Target: target, Err: err}
	}
	return ch.Connect(ctx, raw, target)
}

// upstreamError turns an *upstreamproxy.Error into an
// *UpstreamProxyError with the proxy's reason.
func upstreamError(err error) error {
	var ue *upstreamproxy.Error
	if err == nil || !errors.As(err, &ue) {
		return err
	}
	out := &UpstreamProxyError{Err: err, Status: ue.Status}
	switch ue.Kind {
	case upstreamproxy.KindRefused:
		out.Reason = ReasonUpstreamProxyRefused
		switch ue.Status {
		case http.StatusProxyAuthRequired:
			out.Reason = ReasonUpstreamProxyAuth
		case http.StatusForbidden:
			out.Reason = ReasonUpstreamProxyDenied
		}
		out.Detail = fmt.Sprintf("the upstream proxy answered %d %s", ue.Status, http.StatusText(ue.Status))
	case upstreamproxy.KindTLS:
		out.Reason, out.Detail = ReasonUpstreamProxyTLS, "the TLS handshake with the upstream proxy failed"
	case upstreamproxy.KindTimeout:
		out.Reason, out.Timeout, out.Detail = ReasonUpstreamProxyTimeout, true, "the upstream proxy did not answer in time"
	case upstreamproxy.KindProtocol:
		out.Reason, out.Detail = ReasonUpstreamProxyProtocol, "the upstream proxy's answer was not an HTTP response"
	default:
		out.Reason, out.Detail = ReasonUpstreamProxyUnreachable, "the upstream proxy could not be reached"
		out.Timeout = isTimeout(err) || errors.Is(err, context.DeadlineExceeded)
	}
	return out
}

// PolicyDNSResolver is the policy DNS's resolver (policydns.Resolver)
// for proxy p: an eligible name is resolved by d (never by the sandbox)
// with the widest scope of the endpoints naming it, and only addresses
// the SSRF guard admits come back; when it admits none, the refusal is a
// *policydns.DeniedError with the guard's reason. Each answer is checked
// afresh: a name that rebinds to a refused address is refused, and the
// mapping keeps the addresses last admitted until it expires. A
// transparent connection's dial checks each address again with its
// deciding endpoint's scope.
func PolicyDNSResolver(p *Proxy, d *ssrf.Dialer) policydns.Resolver {
	return func(ctx context.Context, name string) ([]netip.Addr, error) {
		n, ok := p.LookupName(name)
		if !ok {
			return nil, fmt.Errorf("%s: not eligible", name)
		}
		sc := ssrf.Scope{ExactHost: n.Scope.ExactHost, AllowedIPs: n.Scope.AllowedIPs}
		aps, err := d.Resolve(ctx, name, n.Ports[0], sc)
		var de *ssrf.DenyError
		if errors.As(err, &de) {
			return nil, &policydns.DeniedError{Reason: de.Reason.String()}
		}
		if err != nil {
			return nil, err
		}
		out := make([]netip.Addr, 0, len(aps))
		for _, ap := range aps {
			out = append(out, ap.Addr().Unmap())
		}
		return out, nil
	}
}

// AttributionBackend adapts an attribution.Backend.
type AttributionBackend struct{ Backend attribution.Backend }

// Lookup implements Attributor.
func (a AttributionBackend) Lookup(ctx context.Context, client, local netip.AddrPort) (*Identity, error) {
	id, err := a.Backend.Lookup(ctx, client, local)
	if errors.Is(err, attribution.ErrIncomplete) {
		ie := &IncompleteError{Err: err}
		var aie *attribution.IncompleteError
		if errors.As(err, &aie) && aie.Holder != nil {
			ie.Holder = fromAttribution(aie.Holder)
		}
		return nil, ie
	}
	if err != nil {
		return nil, err
	}
	out := fromAttribution(id)
	out.src = id
	return out, nil
}

// AttributionGuard adapts an *attribution.BPFBackend's send guard.
type AttributionGuard struct{ Backend *attribution.BPFBackend }

// Guard implements SendGuard for identities AttributionBackend answered.
func (g AttributionGuard) Guard(id *Identity, onViolation func(SendViolation)) (func(), error) {
	src, ok := id.src.(*attribution.Identity)
	if !ok {
		return nil, errors.New("send guard: the identity did not come from the eBPF backend")
	}
	return g.Backend.Guard(src, func(v attribution.SendViolation) {
		onViolation(SendViolation{PID: v.PID, Exe: v.Exe, Comm: v.Comm, Code: foreignCode(v.Code)})
	})
}

// fromAttribution converts an attribution identity.
func fromAttribution(id *attribution.Identity) *Identity {
	out := &Identity{PID: id.PID, Exe: id.Exe, SHA256: id.SHA256, Backend: id.Backend, Code: foreignCode(id.Code)}
	if c := id.Connector; c != nil {
		out.Connector = &Ancestor{PID: c.PID, Exe: c.Exe, Code: foreignCode(c.Code)}
	}
	if len(id.Ancestors) > 0 {
		out.Ancestors = make([]Ancestor, len(id.Ancestors))
		for i, p := range id.Ancestors {
			out.Ancestors[i] = Ancestor{PID: p.PID, Exe: p.Exe, Code: foreignCode(p.Code)}
		}
	}
	return out
}

func foreignCode(c *attribution.ForeignCode) *ForeignCode {
	if c == nil {
		return nil
	}
	return &ForeignCode{Reasons: c.Reasons, File: c.File}
}

// LookupUDP implements UDPAttributor for backends that attribute UDP
// sockets (a LookupUDP method, as attribution's have).
func (a AttributionBackend) LookupUDP(ctx context.Context, client, server netip.AddrPort) (*Identity, error) {
	u, ok := a.Backend.(interface {
		LookupUDP(ctx context.Context, client, server netip.AddrPort) (*attribution.Identity, error)
	})
	if !ok {
		return nil, errors.New("attribution: the backend does not attribute UDP sockets")
	}
	id, err := u.LookupUDP(ctx, client, server)
	if err != nil {
		return nil, err
	}
	return fromAttribution(id), nil
}

// SandboxPID implements SandboxPIDer: the pid of hostPID in its own pid
// namespace, 0 when it cannot be read.
func (a AttributionBackend) SandboxPID(hostPID int) int {
	n, err := attribution.SandboxPID("", hostPID)
	if err != nil {
		return 0
	}
	return n
}

// AttributionCounters implements AttributionCounter for backends that
// have counters (a Counters() map[string]uint64 method), else nil.
func (a AttributionBackend) AttributionCounters() map[string]uint64 {
	if c, ok := a.Backend.(interface{ Counters() map[string]uint64 }); ok {
		return c.Counters()
	}
	return nil
}

// AttributionPinner adapts an *attribution.Pinner, turning its
// *attribution.MismatchError into a *MismatchError.
type AttributionPinner struct{ Pinner *attribution.Pinner }

// Pin implements Pinner.
func (a AttributionPinner) Pin(exe, sha string) error {
	err := a.Pinner.Pin(exe, sha)
	var me *attribution.MismatchError
	if errors.As(err, &me) {
		return &MismatchError{Exe: me.Path, Pinned: me.Pinned, Seen: me.Seen}
	}
	return err
}
