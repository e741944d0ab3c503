package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"sync"
	"time"
)

// attributionTimeout bounds one attribution lookup.
const attributionTimeout = 5 * time.Second

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

func getReader(r io.Reader) *bufio.Reader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}

// pooledReader is a pooled reader on a connection. release gives it back
// once; a tunnel that needs no buffer any more releases it early.
type pooledReader struct {
	*bufio.Reader
	released bool
}

func newPooledReader(r io.Reader) *pooledReader { return &pooledReader{Reader: getReader(r)} }

func (r *pooledReader) release() {
	if !r.released {
		putReader(r.Reader)
		r.released = true
	}
}

var headPool = sync.Pool{New: func() any { b := make([]byte, 0, DefaultMaxHeadBytes); return &b }}

func isHeadError(err error) bool {
	var he *HeadError
	return errors.As(err, &he)
}

// request is what handleExplicit learnt from the head.
type request struct {
	head    *Head
	url     *url.URL // forward HTTP only
	framing framing  // forward HTTP only
	// header is the header sent upstream, credentials resolved (forward
	// HTTP only).
	header http.Header
	// scrub removes the credential values resolved into the request
	// from what is reported about it (nil: none were).
	scrub func(string) string
	// body, when set, is the request's body, read and its placeholders
	// resolved before the dial (forward HTTP, request body rewrite).
	body []byte
}

// handleExplicit serves one explicit-proxy connection: a CONNECT tunnel,
// or forwarded http:// requests — one after another on a keep-alive
// connection, each decided on its own (its own host, port, rules and
// upstream connection), with one record each. It returns the record of
// the last request, which the caller finishes.
func (p *Proxy) handleExplicit(c *net.TCPConn, rec *Record) *Record {
	br := newPooledReader(c)
	defer br.release()
	for first := true; ; first = false {
		if !p.serveRequest(c, br.Reader, rec, br.release, first) || br.released {
			return rec
		}
		p.finish(rec)
		// The socket's owner was attributed (and its binary pinned) when
		// it connected; the next request is decided afresh for it.
		rec = &Record{ConnID: rec.ConnID, Listener: rec.Listener, Start: p.now(), Client: rec.Client,
			Local: rec.Local, Identity: rec.Identity, guard: rec.guard}
	}
}

// serveRequest reads and serves one request head; it reports whether the
// connection may carry another request.
func (p *Proxy) serveRequest(c *net.TCPConn, br *bufio.Reader, rec *Record, release func(), first bool) bool {
	lim := &p.cfg.Limits
	if !first {
		c.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
		if _, err := br.Peek(1); err != nil {
			rec.silent = true // the client closed its keep-alive connection
			return false
		}
	}
	c.SetReadDeadline(time.Now().Add(lim.HeadTimeout))
	hb := headPool.Get().(*[]byte)
	raw, err := readHead(br, lim.MaxHeadBytes, (*hb)[:0])
	var h *Head
	if err == nil {
		h, err = ParseHead(raw)
	}
	if err != nil {
		p.partialRecord(rec, raw) // before raw goes back to the pool
	}
	*hb = raw[:0]
	headPool.Put(hb) // the parsed head holds copies; a tunnel keeps no buffer
	if err != nil {
		switch {
		case errors.Is(err, ErrHeadTooLarge):
			p.badRequest(c, rec, http.StatusRequestHeaderFieldsTooLarge, ReasonHeadTooLarge, nil)
		case errors.Is(err, os.ErrDeadlineExceeded):
			p.badRequest(c, rec, http.StatusRequestTimeout, ReasonHeadTimeout, nil)
		case isHeadError(err):
			p.badRequest(c, rec, http.StatusBadRequest, ReasonMalformed, err)
		case len(raw) == 0:
			rec.silent = true // closed without a request
			c.Close()
		default:
			rec.Outcome, rec.Reason = OutcomeBadRequest, ReasonMalformed
			c.Close() // the client went away mid-head
		}
		return false
	}
	c.SetReadDeadline(time.Time{})
	rec.Method = h.Method
	req := request{head: h}
	var host string
	if h.Method == http.MethodConnect {
		rec.Kind = KindConnect
		host, rec.Port, err = ParseAuthority(h.Target)
	} else {
		rec.Kind = KindHTTP
		req.url, host, rec.Port, err = ParseForwardTarget(h.Target)
		rec.URL = req.url
		if err == nil {
			req.framing, err = requestFraming(h)
		}
	}
	if err != nil {
		if canon, cerr := p.cfg.Canonicalize(host); cerr == nil {
			rec.Host = canon
		}
		p.badRequest(c, rec, http.StatusBadRequest, ReasonMalformed, err)
		return false
	}
	canon, err := p.cfg.Canonicalize(host)
	if err != nil {
		rec.Host = ""
		p.badRequest(c, rec, http.StatusBadRequest, ReasonInvalidHost, nil)
		return false
	}
	rec.Host = canon

	// One generation for the whole connection; the socket's owner is
	// attributed (and its binary pinned) with the first request.
	v, ok := p.admit(c, rec, p.gen.Load(), first)
	if !ok {
		if rec.Outcome == OutcomeClientGone {
			c.Close()
		} else {
			p.deny(c, rec, OutcomePolicyDenied)
		}
		return false
	}
	// A forwarded http:// request is visible in full: hold it to the
	// endpoint's L7 rules before anything reaches upstream. (A CONNECT
	// tunnel's requests are not visible without TLS termination.)
	if rec.Kind == KindHTTP && v.Endpoint != nil && v.Endpoint.L7() {
		rec.L7Checked = true
		path, nerr := l7.ParsePath(targetPath(h.Target))
		switch {
		case errors.Is(nerr, l7.ErrAmbiguousPath):
			rec.Reason = policy.L7AmbiguousPath
			req.url.Path, req.url.RawPath = "/", ""
			p.deny(c, rec, OutcomePolicyDenied)
			return false
		case nerr != nil:
			p.badRequest(c, rec, http.StatusBadRequest, ReasonInvalidPath, headErrorf("request path is not a valid path"))
			return false
		}
		req.url.Path, req.url.RawPath = path.Decoded, path.Escaped
		// The query goes upstream as sent: one that does not parse (a
		// ";" separator, a bad escape) is refused, not matched with its
		// unparsable pairs dropped (servers that split on ";" read them).
		q, qerr := url.ParseQuery(req.url.RawQuery)
		if qerr != nil {
			p.badRequest(c, rec, http.StatusBadRequest, ReasonInvalidQuery, headErrorf("query string does not parse"))
			return false
		}
		fields := func(name string) []string { return headerValues(h, name) }
		if ok, why := l7.Check(v.Endpoint, &l7.Request{Method: h.Method, Path: &path, Query: q, Field: fields}); !ok {
			if !v.Audit {
				rec.Reason = why
				p.deny(c, rec, OutcomePolicyDenied)
				return false
			}
			p.log.Warn("L7 rule violation allowed by enforcement: audit", "host", canon, "method", h.Method, "reason", why, "entry", v.Entry)
		}
	}

	if rec.Kind == KindHTTP && !p.forwardCredentials(c, br, rec, &req, v.Endpoint) {
		return false
	}

	// Only now may the name be resolved: policy allowed it.
	up, err := p.dialUpstream(rec, v.Scope, nil)
	if err != nil {
		p.dialFailed(c, rec, err)
		return false
	}
	untrack := p.trackUpstream(up)
	defer func() {
		untrack()
		up.Close()
	}()
	rec.Outcome = OutcomeAllowed
	if rec.Kind == KindConnect {
		p.tunnel(c, br, up, rec, v, release, true)
		return false
	}
	return p.forward(c, br, up, rec, req)
}

// partialRecord fills a malformed head's record with what can be read of
// it (partialRequestLine): the method, and the CONNECT authority or the
// forwarded URL when they parse, so its event names them.
func (p *Proxy) partialRecord(rec *Record, raw []byte) {
	method, target := partialRequestLine(raw)
	rec.Method = method
	var host string
	var err error
	switch {
	case method == "":
		return
	case method == http.MethodConnect:
		rec.Kind = KindConnect
		host, rec.Port, err = ParseAuthority(target)
	default:
		rec.Kind = KindHTTP
		var u *url.URL
		if u, host, rec.Port, err = ParseForwardTarget(target); err == nil {
			if path, perr := l7.ParsePath(targetPath(target)); perr == nil {
				u.Path, u.RawPath = path.Decoded, path.Escaped
			}
			rec.URL = u
		}
	}
	if err == nil {
		if canon, cerr := p.cfg.Canonicalize(host); cerr == nil {
			rec.Host = canon
		}
	}
}

// dialUpstream connects to the record's host and port for the matched
// scope and records the address reached. A CONNECT tunnel goes through
// the Dialer's TunnelDialer when it has one (an upstream proxy may chain
// it; rec.Route says how), and so does a transparent connection, to the
// addresses its policy DNS mapping pinned (pinned non-nil; nothing is
// resolved); a forwarded http:// request always dials directly.
func (p *Proxy) dialUpstream(rec *Record, scope Scope, pinned []netip.Addr) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Limits.ConnectTimeout)
	defer cancel()
	var up net.Conn
	var addr netip.AddrPort
	var err error
	td, tunnels := p.cfg.Dialer.(TunnelDialer)
	if tunnels && (pinned != nil || rec.Kind == KindConnect) {
		var r Route
		if pinned != nil {
			up, r, err = td.DialPinned(ctx, rec.Host, rec.Port, scope, pinned)
		} else {
			up, r, err = td.DialTunnel(ctx, rec.Host, rec.Port, scope)
		}
		if r.Proxy != "" {
			rec.Route = &r
		}
		addr = r.Addr
	} else if pinned != nil {
		up, addr, err = p.dialMapped(ctx, pinned, rec.Port, scope)
	} else {
		up, addr, err = p.cfg.Dialer.DialContext(ctx, rec.Host, rec.Port, scope)
	}
	if addr.IsValid() && (err == nil || rec.Route != nil) {
		rec.Upstream = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	}
	return up, err
}

// dialFailed answers a failed dial: 403 for an SSRF refusal, 502 or 504
// for an upstream (or upstream proxy) that could not be reached.
func (p *Proxy) dialFailed(c *net.TCPConn, rec *Record, err error) {
	var de *DenyError
	var ue *UpstreamProxyError
	switch {
	case errors.As(err, &de):
		rec.Reason = de.Reason
		p.deny(c, rec, OutcomeSSRFDenied)
	case errors.As(err, &ue):
		status := http.StatusBadGateway
		if ue.Timeout {
			status = http.StatusGatewayTimeout
		}
		p.upstreamFailedDetail(c, rec, status, ue.Reason, ue.Detail, err)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		p.upstreamFailed(c, rec, http.StatusGatewayTimeout, ReasonConnectTimeout, err)
	default:
		p.upstreamFailed(c, rec, http.StatusBadGateway, ReasonConnectFailed, err)
	}
}

// redial opens another upstream connection for the record's tunnel (an
// inspected tunnel's overlapping requests): along the same route when an
// upstream proxy chained it, else directly to the checked address.
func (p *Proxy) redial(ctx context.Context, rec *Record) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Limits.ConnectTimeout)
	defer cancel()
	if td, ok := p.cfg.Dialer.(TunnelDialer); ok && rec.Route != nil {
		return td.Redial(ctx, rec.Host, *rec.Route)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", rec.Upstream.String())
}

// tunnel serves an allowed tunnel to rec's host and port — a CONNECT
// (reply set: the 200 goes first) or a transparent connection to a
// synthetic address (the client believes it is connected already) — the
// same way: an inspected endpoint's TLS is terminated and each request
// decided on its own (inspect); any other endpoint's bytes are relayed,
// after a check of the ClientHello's server name unless tls: skip
// (connect).
func (p *Proxy) tunnel(c *net.TCPConn, br *bufio.Reader, up net.Conn, rec *Record, v Verdict, release func(), reply bool) {
	if inspects(v.Endpoint) {
		p.inspect(c, br, up, rec, v, reply)
		return
	}
	p.connect(c, br, up, rec, release, v.Endpoint == nil || v.Endpoint.TLS != policy.TLSSkip, reply)
}

// admit is the one decision every connection gets, whichever way it
// came: an explicit CONNECT or forwarded request, or a transparent
// connection to a policy DNS synthetic address (handleTransparent). With
// attribute set (a connection's first request) the caller is attributed
// and its binary pin checked (identify); then generation g decides on
// rec's host and port for the caller, its ancestors and its socket's
// recorded connector (decideConn). It sets the record's generation,
// entry, reason and L7 flag. On a refusal the record's outcome is
// policy_denied, and nothing has been resolved or dialled: the caller
// answers the refusal its own way (a 403, a reset). One case is not a
// refusal: a client that closed its end before it could be attributed
// (the process exited mid-request: no process holds the socket any
// more) is client_gone. Nothing was decided, and the caller closes the
// connection without writing; a client still there gets the refusal of
// a failed attribution, so closing early gains a client nothing.
func (p *Proxy) admit(c *net.TCPConn, rec *Record, g *Generation, attribute bool) (Verdict, bool) {
	if g == nil {
		rec.Outcome, rec.Reason = OutcomePolicyDenied, ReasonAttributionFailed
		return Verdict{}, false
	}
	rec.Generation, rec.PolicySHA = g.Number, g.SHA256
	if attribute && !p.identify(c, rec) {
		rec.Outcome = OutcomePolicyDenied
		if rec.Reason == ReasonAttributionFailed && peerGone(c) {
			rec.Outcome, rec.Reason = OutcomeClientGone, ReasonClientClosed
		}
		return Verdict{}, false
	}
	v, ok := decideConn(g.Decider, rec)
	rec.L7Rules = v.L7Rules
	if !ok {
		rec.Outcome = OutcomePolicyDenied
	}
	return v, ok
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
// (with the record's reason set) when the connection must be denied.
// rec.Local must be the address the client connected to.
func (p *Proxy) identify(c *net.TCPConn, rec *Record) bool {
	if p.cfg.Attributor == nil {
		return true // standalone: unknown caller, binary-scoped entries never match
	}
	ctx, cancel := context.WithTimeout(context.Background(), attributionTimeout)
	id, err := p.cfg.Attributor.Lookup(ctx, rec.Client, rec.Local)
	cancel()
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
		return false
	}
	rec.Identity = id
	if !p.guard(c, rec) {
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

// deny answers 403 with the structured JSON body and closes.
func (p *Proxy) deny(c *net.TCPConn, rec *Record, outcome string) {
	rec.Outcome = outcome
	rec.Status = http.StatusForbidden
	body := DenialBody{
		Error:  outcome,
		Host:   rec.Host,
		Port:   rec.Port,
		Binary: rec.binary(),
		PID:    p.agentPID(rec),
		Policy: rec.Entry,
		Reason: rec.Reason,
	}
	if rec.L7Checked && rec.URL != nil {
		body.Method, body.Path = rec.Method, rec.URL.EscapedPath()
	}
	writeDenial(c, &body)
	lingerClose(c, 500*time.Millisecond)
}

// badRequest answers a malformed request. A *HeadError's message (fixed
// text naming what is wrong, never echoing the request) goes to the
// client as the detail.
func (p *Proxy) badRequest(c *net.TCPConn, rec *Record, status int, reason string, err error) {
	rec.Outcome, rec.Reason, rec.Status = OutcomeBadRequest, reason, status
	body := errorBody{Error: OutcomeBadRequest, Reason: reason}
	var he *HeadError
	if errors.As(err, &he) {
		body.Detail = he.Msg
		rec.Cause = he.Msg
	}
	writeJSONResponse(c, status, body)
	lingerClose(c, 500*time.Millisecond)
}

func (p *Proxy) upstreamFailed(c *net.TCPConn, rec *Record, status int, reason string, err error) {
	p.upstreamFailedDetail(c, rec, status, reason, "", err)
}

// upstreamFailedDetail is upstreamFailed with a sentence for the client
// (which must hold nothing the client may not know).
func (p *Proxy) upstreamFailedDetail(c *net.TCPConn, rec *Record, status int, reason, detail string, err error) {
	rec.Outcome, rec.Reason, rec.Status = OutcomeUpstreamFailed, reason, status
	if err != nil {
		rec.Cause = err.Error()
	}
	writeJSONResponse(c, status, errorBody{Error: OutcomeUpstreamFailed, Reason: reason, Detail: detail})
	lingerClose(c, 500*time.Millisecond)
}

// established answers a CONNECT with 200; false when it cannot be sent.
func established(c *net.TCPConn, rec *Record) bool {
	c.SetWriteDeadline(time.Now().Add(responseWriteTimeout))
	if _, err := c.Write(connectEstablished); err != nil {
		return false
	}
	c.SetWriteDeadline(time.Time{})
	rec.Status = http.StatusOK
	return true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// connect answers an allowed CONNECT (with reply) and relays bytes both
// ways. Bytes the client pipelined after the head are sent upstream
// first. With sni set, the client's first bytes are looked at before
// they go anywhere: a TLS ClientHello naming another host than the
// tunnel's (the CONNECT target, or the name of a transparent
// connection's synthetic address) closes the tunnel (domain fronting).
// Server-first protocols are unaffected: the server's bytes flow while
// the proxy waits for the client's.
func (p *Proxy) connect(c *net.TCPConn, br *bufio.Reader, up net.Conn, rec *Record, release func(), sni, reply bool) {
	// Counted before the 200 goes out: a client that sees it sees the
	// tunnel in the counters too.
	p.m.activeTunnels.Add(1)
	defer p.m.activeTunnels.Add(-1)
	if reply && !established(c, rec) {
		c.Close()
		return
	}
	var first []byte
	if !sni {
		if n := br.Buffered(); n > 0 {
			first, _ = br.Peek(n)
		}
	}
	pre := func() bool {
		if sni {
			var ok bool
			if first, ok = p.checkSNI(c, br, up, rec); !ok {
				return false
			}
		}
		if len(first) > 0 {
			up.SetWriteDeadline(time.Now().Add(p.cfg.Limits.IdleTimeout))
			w, err := up.Write(first)
			up.SetWriteDeadline(time.Time{})
			rec.BytesUp += int64(w)
			if err != nil {
				return false
			}
		}
		release() // the tunnel needs no buffer
		return true
	}
	up1, down := p.relay(c, up, pre)
	rec.BytesUp += up1
	rec.BytesDown += down
}
