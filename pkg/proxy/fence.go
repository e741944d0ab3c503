package proxy

import (
	"context"
	"net"
)

// handleFence serves one connection the host-side nftables redirected to
// the fence listener: a sandbox process tried to reach rec.Local's
// original destination directly. The caller is attributed while its
// socket still exists (the lookup needs the live tuple), then the
// connection is reset (SO_LINGER 0) so the client fails at once instead
// of waiting for a timeout. The record becomes a Network Activity Refuse
// and a Detection Finding.
func (p *Proxy) handleFence(c *net.TCPConn, rec *Record) {
	rec.Kind = KindFence
	rec.Outcome, rec.Reason = OutcomeBypassDenied, ReasonDirectConnection
	c.SetLinger(0)
	dst, err := p.cfg.OriginalDst(c)
	if err != nil {
		rec.Cause = "original destination unavailable: " + err.Error()
	} else {
		rec.Local = dst
	}
	if rec.Local.IsValid() {
		rec.Host = rec.Local.Addr().Unmap().String()
		rec.Port = int(rec.Local.Port())
	}
	if g := p.gen.Load(); g != nil {
		rec.Generation, rec.PolicySHA = g.Number, g.SHA256
	}
	if p.cfg.Attributor != nil {
		ctx, cancel := context.WithTimeout(context.Background(), attributionTimeout)
		id, err := p.cfg.Attributor.Lookup(ctx, rec.Client, rec.Local)
		cancel()
		if err == nil && id != nil {
			rec.Identity = id
		} else if err != nil {
			// Still a bypass, reported without an actor.
			rec.Cause = joinCause(rec.Cause, "attribution failed: "+err.Error())
		}
	}
	c.Close()
}

func joinCause(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
