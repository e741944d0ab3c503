package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/palisade-sandbox/palisade/pkg/attribution"
	"github.com/palisade-sandbox/palisade/pkg/decision"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
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
	return decisionEngine{e}, nil
}

type decisionEngine struct{ e *decision.Engine }

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
	if ep := res.Endpoint; res.Allowed && ep != nil {
		v.L7Rules = ep.Protocol == policy.ProtocolREST || ep.L7()
		v.Endpoint = ep
	}
	if !res.Allowed {
		v.Reason = res.Reason.String()
	}
	return v
}

// CanonicalHost is decision.CanonicalHost: IP literals in any spelling
// become canonical address text, names are lower-cased without the
// trailing dot, anything else is an error.
func CanonicalHost(h string) (string, error) { return decision.CanonicalHost(h) }

// SSRFDialer adapts an *ssrf.Dialer, turning its *ssrf.DenyError into a
// *DenyError carrying the guard's reason.
type SSRFDialer struct{ Dialer *ssrf.Dialer }

// DialContext implements Dialer.
func (s SSRFDialer) DialContext(ctx context.Context, host string, port int, sc Scope) (net.Conn, netip.AddrPort, error) {
	c, ap, err := s.Dialer.DialScope(ctx, host, port, ssrf.Scope{ExactHost: sc.ExactHost, AllowedIPs: sc.AllowedIPs, OnlyAllowedIPs: sc.OnlyAllowedIPs})
	var de *ssrf.DenyError
	if errors.As(err, &de) {
		return nil, netip.AddrPort{}, &DenyError{Reason: de.Reason.String()}
	}
	return c, ap, err
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
