package proxy

import (
	"context"
	"errors"
	"net"
)

// admit is the one decision every connection gets, whichever way it
// came: an explicit CONNECT or forwarded request, or a transparent
// connection to a policy DNS synthetic address (handleTransparent). With
// attribute set (a connection's first request) the caller is attributed
// and its binary pin checked (identify); then generation g decides on
// rec's host and port for the caller, its ancestors and its socket's
// recorded connector (decideConn). It sets the record's generation,
// entry, reason and L7 flag. On a refusal the record's outcome is
// policy_denied, and nothing has been resolved or dialled: the caller
// answers the refusal its own way (refused: a 403; a reset). One case is not a
// refusal: a client that closed its end before it could be attributed or
// held (the process exited mid-request: no process holds the socket any
// more) is client_gone (identify's ReasonClientClosed). Nothing was
// decided, and the caller closes the connection without writing; a
// client still there gets the refusal of a failed attribution, so
// closing early gains a client nothing.
func (p *Proxy) admit(c *net.TCPConn, rec *Record, g *Generation, attribute bool) (Verdict, bool) {
	if g == nil {
		rec.Outcome, rec.Reason = OutcomePolicyDenied, ReasonAttributionFailed
		return Verdict{}, false
	}
	rec.Generation, rec.PolicySHA = g.Number, g.SHA256
	if attribute && !p.identify(c, rec) {
		rec.Outcome, rec.refused = OutcomePolicyDenied, true
		if rec.Reason == ReasonClientClosed {
			rec.Outcome = OutcomeClientGone
		}
		return Verdict{}, false
	}
	v, ok := decideConn(g.Decider, rec)
	rec.L7Rules, rec.EndpointID = v.L7Rules, v.EndpointID
	if !ok {
		rec.Outcome, rec.refused = OutcomePolicyDenied, true
	}
	return v, ok
}

// refused answers an explicit-proxy request admit refused: a 403 with
// the denial body, or for client_gone nothing but the close.
func (p *Proxy) refused(c *net.TCPConn, rec *Record) {
	if rec.Outcome == OutcomeClientGone {
		c.Close()
		return
	}
	p.deny(c, rec, OutcomePolicyDenied)
}

// decideRequest is what the engine decides for the record's host, port
// and caller: the caller's binary and ancestors, leaving out each that
// lost its binary's identity (foreign code), as an unknown binary is.
func decideRequest(rec *Record) DecideRequest { return decideIdentity(rec, false) }

// decideIdentity is decideRequest; with trusting, foreign code is
// ignored (what the decision would have been had the identities held).
func decideIdentity(rec *Record, trusting bool) DecideRequest {
	dr := DecideRequest{Host: rec.Host, Port: rec.Port}
	if id := rec.Identity; id != nil {
		if id.Code == nil || trusting {
			dr.Binary = id.Exe
		}
		for _, a := range id.Ancestors {
			if a.Code == nil || trusting {
				dr.Ancestors = append(dr.Ancestors, a.Exe)
			}
		}
	}
	return dr
}

// decideConn decides the connection's caller on the record's host and
// port, and sets the record's entry, reason and audit flag. A refusal
// that only foreign code caused (trusting the identities that lost
// their binary would have allowed) gets ReasonForeignCode and names the
// process for its Detection Finding; then the connector rule applies.
func decideConn(d Decider, rec *Record) (Verdict, bool) {
	dr := decideRequest(rec)
	v := d.Decide(dr)
	rec.Entry, rec.Reason, rec.Audit = v.Entry, v.Reason, v.Audit
	if !v.Allowed {
		if fp := rec.Identity.foreign(); fp != nil {
			if tv := d.Decide(decideIdentity(rec, true)); tv.Allowed {
				rec.Entry, rec.Reason, rec.Foreign = tv.Entry, ReasonForeignCode, fp
			}
		}
		return v, false
	}
	return v, connectorAllowed(d, dr, rec)
}

// identify attributes the caller, holds the connection to it (the send
// guard, when there is one) and checks its binary pin. It returns false
// (with the record's reason set) when the connection must be denied;
// the reason is ReasonClientClosed when the client left first (gone).
// rec.Local must be the address the client connected to.
func (p *Proxy) identify(c *net.TCPConn, rec *Record) bool {
	if p.cfg.Attributor == nil {
		return true // standalone: unknown caller, binary-scoped entries never match
	}
	id, err := p.lookup(rec)
	if err != nil || id == nil {
		rec.Reason = ReasonAttributionFailed
		if errors.Is(err, ErrAttributionIncomplete) {
			rec.Reason = ReasonAttributionIncomplete
			var ie *IncompleteError
			if errors.As(err, &ie) {
				rec.Identity = ie.Holder // for the record only
			}
		}
		if err != nil {
			rec.Cause = err.Error()
		}
		if rec.Reason == ReasonAttributionFailed && peerGone(c) {
			rec.Reason = ReasonClientClosed
		}
		return false
	}
	rec.Identity = id
	if !p.guard(c, rec) {
		if p.gone(c, rec) {
			rec.Reason = ReasonClientClosed
		}
		return false
	}
	if p.cfg.Pinner == nil || id.Exe == "" {
		return true
	}
	if err := p.cfg.Pinner.Pin(id.Exe, id.SHA256); err != nil {
		var me *MismatchError
		if errors.As(err, &me) {
			rec.Mismatch = me
			rec.Reason = ReasonIdentityMismatch
		} else {
			rec.Reason = ReasonIdentityCheck
			rec.Cause = err.Error()
		}
		return false
	}
	return true
}

// lookup asks the attributor who holds the client's socket.
func (p *Proxy) lookup(rec *Record) (*Identity, error) {
	ctx, cancel := context.WithTimeout(context.Background(), attributionTimeout)
	defer cancel()
	return p.cfg.Attributor.Lookup(ctx, rec.Client, rec.Local)
}

// gone reports whether a connection the send guard could not hold after
// its caller was attributed is the client leaving, as a failed
// attribution with the client's end closed is (admit): the client closed
// its end (peerGone) and no process holds the socket any more (a second
// lookup names no one, not even an incomplete holder). A client that
// closes between the lookup and the binding takes the kernel's
// placeholder with it (bpf/attr.c deletes it at TCP_CLOSE), so the
// binding fails. A socket a process still holds stays the guard's
// refusal, half-closed or not: one reconnected after a disconnect, which
// the guard refuses on purpose, must not read as a client gone.
func (p *Proxy) gone(c *net.TCPConn, rec *Record) bool {
	if !peerGone(c) {
		return false
	}
	id, err := p.lookup(rec)
	return id == nil && err != nil && !errors.Is(err, ErrAttributionIncomplete)
}

// connectorAllowed applies the decision to the recorded connector of a
// socket that was handed on (Identity.Connector): the holder was allowed,
// and the connector must be too. A connector that can no longer be named
// is not allowed; one that lost its binary's identity (foreign code) is
// decided as an unknown binary. It sets the record's reason when it
// refuses.
func connectorAllowed(d Decider, dr DecideRequest, rec *Record) bool {
	id := rec.Identity
	if id == nil || id.Connector == nil {
		return true
	}
	c := id.Connector
	cr := DecideRequest{Host: dr.Host, Port: dr.Port}
	if c.Code == nil {
		cr.Binary = c.Exe
	}
	if (c.Exe != "" || c.Code != nil) && d.Decide(cr).Allowed {
		return true
	}
	rec.Reason = ReasonConnectorDenied
	if c.Code != nil && c.Exe != "" {
		if d.Decide(DecideRequest{Host: dr.Host, Port: dr.Port, Binary: c.Exe}).Allowed {
			rec.Reason, rec.Foreign = ReasonForeignCode, &ForeignProcess{PID: c.PID, Exe: c.Exe, Code: *c.Code}
		}
	}
	return false
}
