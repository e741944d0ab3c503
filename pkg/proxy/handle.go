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

// request is a forwarded request as serveForward read it.
type request struct {
	head    *Head
	url     *url.URL
	framing framing
	body    *reqBody // the body as received; never nil (noBody)
	// header is the header sent upstream, credentials resolved.
	header http.Header
	// scrub removes the credential values resolved into the request
	// from what is reported about it (nil: none were).
	scrub func(string) string
	// prepared, when set, is the request's body, read and its
	// placeholders resolved (or hashed to sign it) before the dial
	// (forwardCredentials); it goes upstream instead of body.
	prepared []byte
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

// serveRequest reads one request head and serves it by its method: a
// CONNECT tunnel (serveConnect) or a forwarded http:// request
// (serveForward). It reports whether the connection may carry another
// request.
func (p *Proxy) serveRequest(c *net.TCPConn, br *bufio.Reader, rec *Record, release func(), first bool) bool {
	h, ok := p.readRequest(c, br, rec, first)
	if !ok {
		return false
	}
	rec.Method = h.Method
	if h.Method == http.MethodConnect {
		p.serveConnect(c, br, rec, h, release, first)
		return false
	}
	return p.serveForward(c, br, rec, h, first)
}

// serveConnect serves a CONNECT request, in this order: the authority
// parsed and canonicalised (target); the caller attributed on the
// connection's first request and the destination decided for it
// (admit), before any DNS lookup, so a denied name is never resolved;
// only then the name resolved and the checked address dialled (dial,
// chained through an upstream proxy when one is configured); then the
// tunnel (tunnel, shared with transparent connections): an inspected
// endpoint's TLS is terminated and each request inside decided on its
// own (inspect), any other endpoint's bytes are relayed, after a check
// of the ClientHello's server name unless tls: skip (connect).
func (p *Proxy) serveConnect(c *net.TCPConn, br *bufio.Reader, rec *Record, h *Head, release func(), first bool) {
	rec.Kind = KindConnect
	host, port, err := ParseAuthority(h.Target)
	rec.Port = port
	if !p.target(c, rec, host, err) {
		return
	}
	v, ok := p.admit(c, rec, p.gen.Load(), first)
	if !ok {
		p.refused(c, rec)
		return
	}
	up, done, ok := p.dial(c, rec, v.Scope)
	if !ok {
		return
	}
	defer done()
	rec.Outcome = OutcomeAllowed
	p.tunnel(c, br, up, rec, v, release, true)
}

// serveForward serves a forwarded (absolute-form http://) request, in
// this order: the target and the body's framing parsed, the host
// canonicalised (target); the caller attributed on the connection's
// first request and the destination decided for it (admit); the
// request held to its endpoint's protocol rules (inspectForward): a
// forwarded request is visible in full, so nothing of it reaches
// upstream before the decision; its credential placeholders resolved
// and, on a credential_signing endpoint, the request re-signed
// (forwardCredentials), still before anything is dialled; only then
// the name resolved and the checked address dialled (dial, always
// directly), and the request relayed (forward). It reports whether the
// connection may carry another request.
func (p *Proxy) serveForward(c *net.TCPConn, br *bufio.Reader, rec *Record, h *Head, first bool) bool {
	rec.Kind = KindHTTP
	u, host, port, err := ParseForwardTarget(h.Target)
	rec.URL, rec.Port = u, port
	req := request{head: h, url: u}
	if err == nil {
		req.framing, err = requestFraming(h)
	}
	if !p.target(c, rec, host, err) {
		return false
	}
	v, ok := p.admit(c, rec, p.gen.Load(), first)
	if !ok {
		p.refused(c, rec)
		return false
	}
	req.body = p.forwardBody(c, br, req.framing)
	if !p.inspectForward(c, rec, &req, &v) || !p.forwardCredentials(c, rec, &req, v.Endpoint) {
		return false
	}
	up, done, ok := p.dial(c, rec, v.Scope)
	if !ok {
		return false
	}
	defer done()
	rec.Outcome = OutcomeAllowed
	return p.forward(c, br, up, rec, req)
}

// readRequest reads and parses one request head (after waiting, between
// requests of a keep-alive connection, for the next one) and answers one
// that is too large, too slow or malformed. ok is false when there is
// no request to serve.
func (p *Proxy) readRequest(c *net.TCPConn, br *bufio.Reader, rec *Record, first bool) (h *Head, ok bool) {
	lim := &p.cfg.Limits
	if !first {
		c.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
		if _, err := br.Peek(1); err != nil {
			rec.silent = true // the client closed its keep-alive connection
			return nil, false
		}
	}
	c.SetReadDeadline(time.Now().Add(lim.HeadTimeout))
	hb := headPool.Get().(*[]byte)
	raw, err := readHead(br, lim.MaxHeadBytes, (*hb)[:0])
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
		return nil, false
	}
	c.SetReadDeadline(time.Time{})
	return h, true
}

// target canonicalises the request's host into rec.Host. A target that
// did not parse (perr) or whose host is no valid name or address is
// answered with 400; it reports whether to go on.
func (p *Proxy) target(c *net.TCPConn, rec *Record, host string, perr error) bool {
	canon, err := p.cfg.Canonicalize(host)
	if perr != nil {
		if err == nil {
			rec.Host = canon
		}
		p.badRequest(c, rec, http.StatusBadRequest, ReasonMalformed, perr)
		return false
	}
	if err != nil {
		rec.Host = ""
		p.badRequest(c, rec, http.StatusBadRequest, ReasonInvalidHost, nil)
		return false
	}
	rec.Host = canon
	return true
}

// inspectForward holds a forwarded request to its endpoint's protocol
// rules when the endpoint has L7 rules (a CONNECT tunnel's requests are
// held to them inside the tunnel: inspect). The path the upstream gets
// is the one decided (Path.Escaped), and a path or query that does not
// parse is refused. It answers a refusal and reports whether to go on.
func (p *Proxy) inspectForward(c *net.TCPConn, rec *Record, req *request, v *Verdict) bool {
	if v.Endpoint == nil || !v.Endpoint.Inspected() {
		return true
	}
	h := req.head
	rec.L7Checked = true
	path, err := l7.ParsePath(targetPath(h.Target))
	switch {
	case errors.Is(err, l7.ErrAmbiguousPath):
		rec.Reason = policy.L7AmbiguousPath
		req.url.Path, req.url.RawPath = "/", ""
		p.deny(c, rec, OutcomePolicyDenied)
		return false
	case err != nil:
		p.badRequest(c, rec, http.StatusBadRequest, ReasonInvalidPath, headErrorf("request path is not a valid path"))
		return false
	}
	req.url.Path, req.url.RawPath = path.Decoded, path.Escaped
	// The query goes upstream as sent: one that does not parse (a ";"
	// separator, a bad escape) is refused, not matched with its
	// unparsable pairs dropped (servers that split on ";" read them).
	q, err := url.ParseQuery(req.url.RawQuery)
	if err != nil {
		p.badRequest(c, rec, http.StatusBadRequest, ReasonInvalidQuery, headErrorf("query string does not parse"))
		return false
	}
	d := v.inspector().Request(&l7.Request{
		Method: h.Method, Path: &path, Query: q, RawQuery: req.url.RawQuery, Proto: h.Proto,
		Field: func(name string) []string { return headerValues(h, name) }, Body: req.body,
	})
	rec.Call = d.Call
	switch {
	case d.Allow:
		return true
	case !d.Policy():
		rec.protocolRefused = true
		p.badRequest(c, rec, d.Status, d.Reason, headErrorf("%s", d.Detail))
		return false
	case !v.Audit:
		rec.Reason, rec.Rule = d.Reason, d.Rule
		p.deny(c, rec, OutcomePolicyDenied)
		return false
	}
	p.log.Warn("L7 rule violation allowed by enforcement: audit", "host", rec.Host, "method", h.Method, "reason", d.Reason, "entry", v.Entry)
	return true
}

// dial resolves the record's host (only now: policy allowed it) and
// connects to a checked address within the matched endpoint's scope,
// recording the address reached (dialUpstream: a CONNECT tunnel may be
// chained through an upstream proxy). A failure is answered (dialFailed:
// 403 for an SSRF refusal, 502 or 504) and ok is false; done untracks
// and closes the connection.
func (p *Proxy) dial(c *net.TCPConn, rec *Record, sc Scope) (up net.Conn, done func(), ok bool) {
	up, err := p.dialUpstream(rec, sc, nil)
	if err != nil {
		p.dialFailed(c, rec, err)
		return nil, nil, false
	}
	untrack := p.trackUpstream(up)
	return up, func() {
		untrack()
		up.Close()
	}, true
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
