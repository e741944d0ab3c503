package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/l7/websocket"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Reasons of the inspection path.
const (
	ReasonSNIMismatch         = "sni_mismatch"             // ClientHello names another host than CONNECT
	ReasonBadClientHello      = "client_hello_unreadable"  // a TLS record began that is no readable ClientHello
	ReasonClientHelloNotFirst = "client_hello_not_first"   // a TLS record other than a handshake came before the ClientHello
	ReasonNotHTTP             = "l7_protocol_unrecognized" // an inspected tunnel carried neither TLS nor HTTP
	ReasonTLSUnavailable      = "tls_inspection_unavailable"
	ReasonClientTLS           = "client_tls_failed" // the client's handshake with the proxy failed
	ReasonUpstreamTLS         = "upstream_tls"      // the upstream certificate or handshake failed
	ReasonAuthorityMismatch   = "authority_mismatch"
	ReasonInvalidPath         = "invalid_path"
	ReasonInvalidQuery        = "invalid_query"
	ReasonH2CUpgrade          = "h2c_upgrade"
	ReasonUnsupportedUpgrade  = "unsupported_upgrade"
	ReasonDuplicateHost       = "duplicate_host"
	// ReasonWebSocketHandshake: the upstream's 101 is no WebSocket
	// handshake answering the client's key (502, nothing relayed).
	ReasonWebSocketHandshake = "websocket_handshake_invalid"
	// ReasonWebSocketFrame: after the 101 the client sent bytes that are
	// not a well-formed masked WebSocket frame (both sides closed).
	ReasonWebSocketFrame = "websocket_frame_invalid"
)

// ErrorUpstreamTLS is the "error" of the 502 answered when the upstream's
// certificate does not verify or its handshake fails.
const ErrorUpstreamTLS = "upstream_tls"

// inspects reports whether a CONNECT tunnel to ep is terminated and its
// requests decided one by one: endpoints with protocol rest or L7 rules,
// unless tls: skip.
func inspects(ep *policy.Endpoint) bool {
	return ep != nil && ep.TLS != policy.TLSSkip && ep.Inspected()
}

// bufConn reads through a bufio.Reader that may hold bytes already read
// from the connection.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// inspect serves an allowed tunnel to an inspected endpoint: after the
// 200 (reply: a CONNECT; a transparent connection gets none) it looks at
// the client's first bytes — a TLS ClientHello is terminated with a leaf
// from the sandbox CA for the tunnel's host, plaintext HTTP is read as
// it is, anything else is refused — and then decides every request on
// the connection on its own.
func (p *Proxy) inspect(c *net.TCPConn, br *bufio.Reader, up net.Conn, rec *Record, v Verdict, reply bool) {
	p.m.activeTunnels.Add(1)
	defer p.m.activeTunnels.Add(-1)
	if reply && !established(c, rec) {
		return
	}
	rec.L7Checked = true
	c.SetReadDeadline(time.Now().Add(p.cfg.Limits.HeadTimeout))
	first, err := br.Peek(1)
	if err != nil {
		return // the client went away without a byte
	}
	ix := &inspector{p: p, conn: rec, host: rec.Host, port: rec.Port, events: rec.sharedEvents(p.src.Sandbox)}
	ix.verdict.Store(&genVerdict{gen: rec.Generation, sha: rec.PolicySHA, v: v})
	switch b := first[0]; {
	case b == tlsRecordHandshake:
		ix.serveTLS(c, br, up)
	case b >= 'A' && b <= 'Z':
		c.SetReadDeadline(time.Time{})
		ix.scheme, ix.defPort = "http", 80
		t := ix.h1Transport(nil)
		defer t.CloseIdleConnections()
		ix.rt, ix.ws = newConnRT(up, t, p.cfg.Limits.IdleTimeout), t
		p.serveH1(c, br, ix, c)
	default:
		rec.Outcome, rec.Reason = OutcomePolicyDenied, ReasonNotHTTP
		c.SetLinger(0)
	}
}

// inspector decides and relays the requests of one inspected tunnel.
type inspector struct {
	p       *Proxy
	conn    *Record
	verdict atomic.Pointer[genVerdict] // the L4 verdict of the newest generation seen
	host    string
	port    int
	scheme  string
	defPort int
	proto   string // HTTP/1.1 or HTTP/2.0 on the client leg
	rt      http.RoundTripper
	// ws relays WebSocket upgrades: over HTTP/1.1 on a new connection to
	// the checked address (an h2 client's extended CONNECT included).
	ws     http.RoundTripper
	upErr  error            // upstream handshake failure: every request gets 502
	events *sharedEventConn // what every request's event shares
	h2     *h2Watch         // an h2 client leg's frame watch (nil on HTTP/1.1)
}

func (ix *inspector) serveTLS(c *net.TCPConn, br *bufio.Reader, up net.Conn) {
	p, rec := ix.p, ix.conn
	if p.cfg.CA == nil {
		rec.Outcome, rec.Reason = OutcomePolicyDenied, ReasonTLSUnavailable
		c.SetLinger(0)
		return
	}
	sniBad := false
	bc := &batchConn{Conn: &bufConn{Conn: c, r: br}}
	tc := tls.Server(bc, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hi.ServerName != "" && !sameHost(hi.ServerName, ix.host) {
				sniBad = true
				return nil, errors.New("server name differs from the CONNECT host")
			}
			return p.cfg.CA.Leaf(ix.host)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Limits.HeadTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	c.SetReadDeadline(time.Time{})
	if err != nil {
		if sniBad {
			rec.Outcome, rec.Reason = OutcomePolicyDenied, ReasonSNIMismatch
		} else {
			rec.Outcome, rec.Reason = OutcomeBadRequest, ReasonClientTLS
		}
		rec.Cause = err.Error()
		return
	}
	alpn := tc.ConnectionState().NegotiatedProtocol
	upProtos := []string{"http/1.1"}
	if alpn == "h2" {
		upProtos = []string{"h2", "http/1.1"}
	}
	// ServerName is the CONNECT host: a name is sent as SNI and verified
	// against the DNS SANs, an IP literal against the IP SANs.
	ucfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.cfg.UpstreamRoots, NextProtos: upProtos, ServerName: ix.host}
	ix.scheme, ix.defPort = "https", 443
	big := &bigReadConn{Conn: up}
	utc := tls.Client(big, ucfg)
	ctx, cancel = context.WithTimeout(context.Background(), p.cfg.Limits.ConnectTimeout)
	err = utc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		ix.upErr = err
		rec.Outcome, rec.Reason, rec.Cause = OutcomeUpstreamFailed, ReasonUpstreamTLS, err.Error()
	} else if utc.ConnectionState().NegotiatedProtocol == "h2" {
		cc, err := (&http2.Transport{}).NewClientConn(utc)
		if err != nil {
			ix.upErr = err
		} else {
			defer cc.Close()
			ix.rt = cc
		}
		t := ix.h1Transport(ucfg)
		defer t.CloseIdleConnections()
		ix.ws = t
	} else {
		t := ix.h1Transport(ucfg)
		defer t.CloseIdleConnections()
		crt := newConnRT(utc, t, p.cfg.Limits.IdleTimeout)
		crt.pend = big.pending
		ix.rt, ix.ws = crt, t
	}
	if alpn == "h2" {
		ix.proto = "HTTP/2.0"
		ix.h2 = newH2Watch(func(method, path, cause string) { p.finish(ix.h2RefusedRecord(method, path, cause)) })
		serveH2(tc, bc, ix, p.cfg.Limits.IdleTimeout, ix.h2)
		if code := ix.h2.goAwayCode(); code != http2.ErrCodeNo {
			rec.Outcome, rec.Reason, rec.Cause = OutcomeBadRequest, ReasonH2Refused, "GOAWAY "+code.String()
		}
		return
	}
	p.serveH1(tc, bufio.NewReaderSize(tc, 4096), ix, tlsBatchWriter{tc: tc, bc: bc})
}

// serveH2 serves the client leg of a terminated tunnel that negotiated
// h2. The HTTP/2 server's writes go through a tlsBatchWriter: each write
// (a frame, or the frames its 4 KiB buffer gathered) leaves in one
// socket write, not one per TLS record (a full 16 KiB DATA frame and its
// header are two records; crypto/tls starts a connection with small
// records). Gathering everything up to the server's flush would need a
// hook golang.org/x/net/http2 does not have.
func serveH2(tc *tls.Conn, bc *batchConn, h http.Handler, idle time.Duration, watch *h2Watch) {
	srv := &http2.Server{IdleTimeout: idle, MaxConcurrentStreams: 250}
	srv.ServeConn(&batchedTLSConn{Conn: tc, w: tlsBatchWriter{tc: tc, bc: bc}, watch: watch}, &http2.ServeConnOpts{Handler: h, BaseConfig: &http.Server{ErrorLog: log.New(io.Discard, "", 0)}})
}

// batchedTLSConn is a tls.Conn (ConnectionState included: the HTTP/2
// server checks the TLS version and cipher) whose writes are batched,
// and whose bytes both ways an h2Watch follows.
type batchedTLSConn struct {
	*tls.Conn
	w     tlsBatchWriter
	watch *h2Watch
}

func (c *batchedTLSConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.watch != nil && n > 0 {
		c.watch.clientBytes(p[:n])
	}
	return n, err
}

func (c *batchedTLSConn) Write(p []byte) (int, error) {
	if c.watch != nil {
		c.watch.serverBytes(p)
	}
	return c.w.Write(p)
}

// maxUpstreamConns bounds the extra upstream connections one inspected
// tunnel opens for overlapping requests (an h2 client's streams to an
// HTTP/1.1 upstream); further requests wait for one.
const maxUpstreamConns = 32

// h1Transport relays HTTP/1.1 requests upstream over new connections to
// the checked address of the CONNECT (never resolved again): for
// requests that overlap (an h2 client's streams to an HTTP/1.1 upstream)
// or after the first connection closed. tcfg is nil for plaintext.
func (ix *inspector) h1Transport(tcfg *tls.Config) *http.Transport {
	dialRaw := func(ctx context.Context) (net.Conn, error) { return ix.p.redial(ctx, ix.conn) }
	t := &http.Transport{
		Proxy:                  nil,
		DisableCompression:     true,
		MaxIdleConnsPerHost:    4,
		MaxConnsPerHost:        maxUpstreamConns,
		IdleConnTimeout:        ix.p.cfg.Limits.IdleTimeout,
		MaxResponseHeaderBytes: 64 << 10,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	if tcfg == nil {
		t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dialRaw(ctx) }
		return t
	}
	t.DialTLSContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		raw, err := dialRaw(ctx)
		if err != nil {
			return nil, err
		}
		cfg := tcfg.Clone()
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(&bigReadConn{Conn: raw}, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, &upstreamTLSError{err}
		}
		return tc, nil
	}
	return t
}

// genVerdict is the tunnel's host/port/binary verdict under one policy
// generation.
type genVerdict struct {
	gen int64
	sha string
	v   Verdict
}

// current is the verdict under the generation in force now: a request on
// a long-lived connection is held to the policy of its own time (a
// reload that tightens the entry applies to the next request), not to
// the one the connection started with.
func (ix *inspector) current() *genVerdict {
	gv := ix.verdict.Load()
	g := ix.p.gen.Load()
	if g == nil || g.Number == gv.gen {
		return gv
	}
	ngv := &genVerdict{gen: g.Number, sha: g.SHA256, v: g.Decider.Decide(decideRequest(ix.conn))}
	ix.verdict.Store(ngv)
	return ngv
}

type upstreamTLSError struct{ err error }

func (e *upstreamTLSError) Error() string { return "upstream TLS: " + e.err.Error() }
func (e *upstreamTLSError) Unwrap() error { return e.err }

func isTLSError(err error) bool {
	var ue *upstreamTLSError
	var ve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &ue) || errors.As(err, &ve) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}

// requestRecord starts the record of one request on an inspected
// connection: the connection's identity and decision, this request's own
// method, path and verdict.
func (ix *inspector) requestRecord(r *http.Request) *Record {
	c := ix.conn
	return &Record{
		ConnID: c.ConnID, Listener: c.Listener, Kind: KindHTTP, Start: ix.p.now(),
		Client: c.Client, Local: c.Local, Host: c.Host, Port: c.Port, Upstream: c.Upstream, Route: c.Route, EndpointID: c.EndpointID,
		Identity: c.Identity, Generation: c.Generation, PolicySHA: c.PolicySHA, Mapping: c.Mapping,
		Entry: c.Entry, Audit: c.Audit, L7Rules: true, L7Checked: true,
		Method: r.Method, Proto: ix.proto, PerRequest: true, shared: ix.events,
	}
}

// ServeHTTP decides one request of an inspected connection and relays
// it. Its event is written once the response is: on HTTP/1.1 serveH1
// does that after the last byte is flushed, so the event costs the
// client no latency.
func (ix *inspector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ix.h2 != nil {
		ix.h2.seen(r.Method, r.RequestURI)
	}
	rr := ix.requestRecord(r)
	ix.serve(w, r, rr)
	if hw, ok := w.(*h1Writer); ok {
		hw.record = rr
		return
	}
	ix.p.finish(rr)
}

// serve decides one request of an inspected tunnel, HTTP/1.x (serveH1)
// or HTTP/2 (serveH2), in this order: what every protocol shares
// (checkHead: one Host naming the tunnel's authority, no "_" spelling
// of a field the proxy reads, no upgrade but a WebSocket's; the path's
// readings and the query parsed); the connection's verdict under the
// generation in force now (current); the endpoint's protocol rules (its
// l7.Inspector, which may read the body); then the request is relayed
// (relay).
func (ix *inspector) serve(w http.ResponseWriter, r *http.Request, rr *Record) {
	p := ix.p
	rawPath, rawQuery, _ := strings.Cut(r.RequestURI, "?")
	rr.URL = &url.URL{Scheme: ix.scheme, Host: r.Host, Path: "/"}
	if ok := ix.checkHead(w, r, rr); !ok {
		return
	}
	path, err := l7.ParsePath(rawPath)
	switch {
	case errors.Is(err, l7.ErrAmbiguousPath):
		ix.deny(w, r, rr, policy.L7AmbiguousPath, "")
		return
	case err != nil:
		ix.bad(w, rr, ReasonInvalidPath, "request path is not a valid origin-form path")
		return
	}
	rr.URL.Path, rr.URL.RawPath = path.Decoded, path.Escaped
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		ix.bad(w, rr, ReasonInvalidQuery, "query string does not parse")
		return
	}
	gv := ix.current()
	rr.Generation, rr.PolicySHA, rr.Entry, rr.Audit, rr.EndpointID = gv.gen, gv.sha, gv.v.Entry, gv.v.Audit, gv.v.EndpointID
	if !gv.v.Allowed {
		ix.deny(w, r, rr, gv.v.Reason, path.Escaped)
		return
	}
	body := newReqBody(r.Body, r.ContentLength)
	method := r.Method
	if isExtendedConnect(r) {
		method, body = http.MethodGet, noBody // RFC 8441: the stream carries the frames
	}
	req := &l7.Request{
		Method: method, Path: &path, Query: q, RawQuery: rawQuery, Proto: r.Proto,
		Field: l7.FieldValues(r.Header), Upgrade: upgradeOf(r), Body: body,
	}
	in := gv.v.inspector()
	d := in.Request(req)
	rr.Call = d.Call
	switch {
	case d.Allow:
	case !d.Policy():
		rr.protocolRefused = true // a request its protocol cannot accept: a policy result for the endpoint's status
		ix.refuse(w, rr, d.Status, d.Reason, d.Detail)
		return
	case !gv.v.Audit:
		rr.Rule = d.Rule
		ix.deny(w, r, rr, d.Reason, path.Escaped)
		return
	default:
		rr.Reason, rr.Rule = d.Reason, d.Rule
		p.log.Warn("L7 rule violation allowed by enforcement: audit", "host", ix.host, "method", r.Method, "path", path.Escaped, "reason", d.Reason, "entry", rr.Entry)
	}
	ep := gv.v.Endpoint
	if ep == nil {
		ep = &policy.Endpoint{} // a decider without endpoints: nothing to prepare
	}
	var msgs l7.Messages
	if u, ok := in.(l7.Upgrader); ok && req.Upgrade != "" {
		msgs = u.Upgrade(req)
	}
	ix.relay(w, r, rr, &path, rawQuery, body, ep, msgs)
}

// upgradeOf is the protocol an inspected request asks to switch to
// ("websocket"; checkHead refused any other upgrade), "" for none.
func upgradeOf(r *http.Request) string {
	if isWebSocket(r) {
		return "websocket"
	}
	return ""
}

// checkHead refuses requests a server could read differently from the
// proxy: a field the proxy reads spelt with "_" (an upstream that folds
// it would read what the proxy did not), an authority other than the
// tunnel's, h2c and other upgrades.
func (ix *inspector) checkHead(w http.ResponseWriter, r *http.Request, rr *Record) bool {
	if len(r.Header.Values("Host")) > 1 {
		ix.bad(w, rr, ReasonDuplicateHost, "more than one Host field")
		return false
	}
	for k := range r.Header {
		if k == ":protocol" {
			continue // RFC 8441's, checked below
		}
		if l7.CheckFieldName(k) != nil {
			ix.bad(w, rr, ReasonMalformed, "header "+k+" spells a field the proxy reads, with '_' for '-'")
			return false
		}
	}
	if err := l7.CheckAuthority(r.Host, ix.host, ix.port, ix.defPort); err != nil {
		ix.bad(w, rr, ReasonAuthorityMismatch, "request authority differs from the CONNECT host")
		return false
	}
	if r.ProtoMajor == 2 && r.Method == http.MethodConnect {
		if !isExtendedConnect(r) {
			ix.bad(w, rr, ReasonUnsupportedUpgrade, "only WebSocket extended CONNECT (RFC 8441) is proxied over HTTP/2")
			return false
		}
		if r.Header.Get("Sec-WebSocket-Version") != "13" {
			ix.bad(w, rr, ReasonUnsupportedUpgrade, "a WebSocket extended CONNECT needs Sec-WebSocket-Version: 13")
			return false
		}
		return true
	}
	if up := r.Header.Values("Upgrade"); len(up) > 0 {
		for _, u := range up {
			if strings.Contains(strings.ToLower(u), "h2c") {
				ix.bad(w, rr, ReasonH2CUpgrade, "Upgrade: h2c is not proxied")
				return false
			}
		}
		if !isWebSocket(r) {
			ix.bad(w, rr, ReasonUnsupportedUpgrade, "only WebSocket upgrades of GET requests are proxied")
			return false
		}
		if keys := r.Header.Values("Sec-WebSocket-Key"); len(keys) != 1 || !websocket.ValidKey(keys[0]) {
			ix.bad(w, rr, ReasonUnsupportedUpgrade, "a WebSocket upgrade needs one Sec-WebSocket-Key (base64 of 16 bytes)")
			return false
		}
	}
	return true
}

// isWebSocket reports whether r asks for a WebSocket: an HTTP/1.1 GET
// with Upgrade: websocket, or an HTTP/2 extended CONNECT (RFC 8441)
// with :protocol websocket.
func isWebSocket(r *http.Request) bool {
	if isExtendedConnect(r) {
		return true
	}
	if r.Method != http.MethodGet || r.ProtoMajor != 1 {
		return false
	}
	up := r.Header.Values("Upgrade")
	if len(up) != 1 || !strings.EqualFold(strings.TrimSpace(up[0]), "websocket") {
		return false
	}
	for _, t := range connectionTokens(r.Header.Values("Connection")) {
		if strings.EqualFold(t, "upgrade") {
			return true
		}
	}
	return false
}

// isExtendedConnect reports whether r is an HTTP/2 extended CONNECT for
// a WebSocket (RFC 8441). golang.org/x/net/http2 passes :protocol as a
// header field (package xconnect turns the server's support on).
func isExtendedConnect(r *http.Request) bool {
	p := r.Header.Values(":protocol")
	return r.ProtoMajor == 2 && r.Method == http.MethodConnect && len(p) == 1 && p[0] == "websocket"
}

// deny answers a refused request with 403 and the denial body; on HTTP/2
// only the stream ends, on HTTP/1.1 the connection stays usable when the
// request had no unread body. git prints an error body to its user only
// when it is text/plain, so git gets the same JSON as text/plain.
func (ix *inspector) deny(w http.ResponseWriter, r *http.Request, rr *Record, reason, path string) {
	rr.Outcome, rr.Reason, rr.Status = OutcomePolicyDenied, reason, http.StatusForbidden
	ctype := "application/json"
	if strings.HasPrefix(r.UserAgent(), "git/") {
		ctype = "text/plain; charset=utf-8"
	}
	d := DenialBody{
		Error: OutcomePolicyDenied, Host: rr.Host, Port: rr.Port, Binary: rr.binary(), PID: ix.p.agentPID(rr),
		Policy: rr.Entry, Reason: reason, Method: r.Method, Path: path,
	}
	if pw, ok := w.(interface{ setPhrase(string) }); ok {
		pw.setPhrase(d.reasonPhrase()) // HTTP/2 has no status text
	}
	writeHTTPBody(w, http.StatusForbidden, ctype, d.ProxyStatus(), d)
}

func (ix *inspector) bad(w http.ResponseWriter, rr *Record, reason, detail string) {
	ix.refuse(w, rr, http.StatusBadRequest, reason, detail)
}

// refuse answers a request that is not relayed with status (a 4xx),
// and closes an HTTP/1.1 connection after it.
func (ix *inspector) refuse(w http.ResponseWriter, rr *Record, status int, reason, detail string) {
	rr.Outcome, rr.Reason, rr.Status, rr.Cause = OutcomeBadRequest, reason, status, detail
	if cw, ok := w.(interface{ closeAfter() }); ok {
		cw.closeAfter()
	}
	writeHTTPJSON(w, status, errorBody{Error: OutcomeBadRequest, Reason: reason, Detail: detail})
}

func (ix *inspector) upstreamFailed(w http.ResponseWriter, rr *Record, err error) {
	rr.Outcome, rr.Status, rr.Cause = OutcomeUpstreamFailed, http.StatusBadGateway, err.Error()
	body := errorBody{Error: OutcomeUpstreamFailed, Reason: ReasonUpstreamError}
	if isTLSError(err) || ix.upErr != nil {
		rr.Reason = ReasonUpstreamTLS
		detail := tlsDetail(err)
		if rr.scrub != nil {
			detail = rr.scrub(detail)
		}
		body = errorBody{Error: ErrorUpstreamTLS, Reason: "certificate_or_handshake_failed", Detail: detail}
	} else {
		rr.Reason = ReasonUpstreamError
	}
	writeHTTPJSON(w, http.StatusBadGateway, body)
}

// tlsDetail is the operator-facing part of a TLS error (names and
// verification failures; no secrets).
func tlsDetail(err error) string {
	s := err.Error()
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

func writeHTTPJSON(w http.ResponseWriter, status int, body any) {
	writeHTTPBody(w, status, "application/json", "", body)
}

// writeHTTPBody answers with body as one line of JSON, and the
// Proxy-Status field when proxyStatus is not empty.
func writeHTTPBody(w http.ResponseWriter, status int, ctype, proxyStatus string, body any) {
	b, _ := jsonLine(body)
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", ctype)
	if proxyStatus != "" {
		h.Set("Proxy-Status", proxyStatus)
	}
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// relay sends an allowed request upstream, with the path as decided
// (Path.Escaped), and streams the response back (flushing as it arrives,
// trailers included, so gRPC and server-sent events work). Its
// credential placeholders are resolved first, and on a
// credential_signing endpoint (ep) it is re-signed; body is what the
// inspector read of it first, then the rest. A WebSocket upgrade goes
// on in upgrade, with msgs the connection's message rules (nil: framing
// checks only); its stream is no body to prepare.
func (ix *inspector) relay(w http.ResponseWriter, r *http.Request, rr *Record, path *l7.Path, rawQuery string, body *reqBody, ep *policy.Endpoint, msgs l7.Messages) {
	if ix.upErr != nil {
		ix.upstreamFailed(w, rr, ix.upErr)
		return
	}
	hostport := ix.host
	if strings.IndexByte(hostport, ':') >= 0 {
		hostport = "[" + hostport + "]"
	}
	if ix.port != ix.defPort {
		hostport += ":" + strconv.Itoa(ix.port)
	}
	header := requestHeader(r.Header)
	var prepared []byte
	if ix.p.preparesOutgoing(ep) {
		in := io.Reader(r.Body)
		if body.read {
			in = body.reader()
		}
		o := &outgoing{method: r.Method, host: ix.host, port: ix.port, hostHeader: hostport, path: path.Escaped, query: rawQuery,
			header: header, ep: ep, paths: pathReadings(path), hasBody: r.Body != http.NoBody && r.ContentLength != 0 && !isExtendedConnect(r),
			length: r.ContentLength, body: in}
		if rf := ix.p.prepareOutgoing(o); rf != nil {
			rr.CredentialRefused = true
			switch {
			case rf.deny:
				rr.CredentialMisuse = rf.misuse
				ix.deny(w, r, rr, rf.reason, path.Escaped)
			default:
				ix.refuse(w, rr, rf.status, rf.reason, rf.detail)
			}
			return
		}
		rr.scrub, rawQuery, prepared = o.scrub, o.query, o.read
	}
	out := &http.Request{
		Method:     r.Method,
		URL:        &url.URL{Scheme: ix.scheme, Host: hostport, Path: path.Decoded, RawPath: path.Escaped, RawQuery: rawQuery},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1,
		Header:        header,
		Host:          hostport,
		ContentLength: r.ContentLength,
		Body:          r.Body,
		// Request trailers are dropped (HTTP/1.1 chunked ones when the
		// body is read, h2 ones here): a trailer is a header the upstream
		// may read after the decision, and no rule admits one.
	}
	if r.ContentLength == 0 {
		out.Body = http.NoBody
	} else if body.read {
		out.Body = io.NopCloser(body.reader()) // what the inspector read first
	}
	if prepared != nil {
		// Read already (its placeholders resolved, or hashed to sign it):
		// sent with its own length (a chunked request's trailers are not
		// sent on).
		out.Body, out.ContentLength, out.Trailer = io.NopCloser(bytes.NewReader(prepared)), int64(len(prepared)), nil
		if len(prepared) == 0 {
			out.Body = http.NoBody
		}
	}
	if ctx := r.Context(); ctx != context.Background() {
		out = out.WithContext(ctx) // an h2 stream's: it ends with the stream
	}
	if isWebSocket(r) {
		var rw websocket.Rewrite
		if msgs != nil {
			rw = ix.p.messageCredentials(ix.host, ix.port, ep, pathReadings(path))
		}
		ix.upgrade(w, r, rr, out, msgs, rw)
		return
	}
	counted := &countingReader{r: out.Body}
	if out.Body != nil && out.Body != http.NoBody {
		out.Body = io.NopCloser(counted)
	}
	resp, err := ix.rt.RoundTrip(out)
	rr.BytesUp = counted.n
	if err != nil {
		ix.upstreamFailed(w, rr, err)
		return
	}
	defer resp.Body.Close()
	ix.respond(w, rr, resp)
}

// respond relays an upstream's response to a request that asked for no
// upgrade (a 101 to one is answered 502).
func (ix *inspector) respond(w http.ResponseWriter, rr *Record, resp *http.Response) {
	rr.Outcome, rr.Status = OutcomeAllowed, resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols {
		rr.Outcome, rr.Reason, rr.Status = OutcomeUpstreamFailed, ReasonUpstreamError, http.StatusBadGateway
		writeHTTPJSON(w, http.StatusBadGateway, errorBody{Error: OutcomeUpstreamFailed, Reason: ReasonUpstreamError, Detail: "unexpected 101 Switching Protocols"})
		return
	}
	stripResponseHeader(resp.Header)
	h := w.Header()
	for k, vv := range resp.Header {
		h[k] = vv
	}
	for k := range resp.Trailer {
		h.Add("Trailer", k)
	}
	w.WriteHeader(resp.StatusCode)
	rr.BytesDown = flushCopy(w, resp.Body, resp.ContentLength < 0)
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
}

// checkWebSocketAccept says what is wrong with an upstream's 101 to a
// WebSocket upgrade ("" when nothing is).
func checkWebSocketAccept(h http.Header, key string) string {
	switch {
	case !strings.EqualFold(strings.TrimSpace(h.Get("Upgrade")), "websocket"):
		return "101 without Upgrade: websocket"
	case !hasToken(h.Values("Connection"), "upgrade"):
		return "101 without Connection: upgrade"
	case len(h.Values("Sec-WebSocket-Accept")) != 1 || strings.TrimSpace(h.Get("Sec-WebSocket-Accept")) != websocket.AcceptKey(key):
		return "101 whose Sec-WebSocket-Accept does not answer the client's key"
	}
	return ""
}

// hasToken reports whether a comma-separated field holds token (in any
// case; parameters after ";" ignored).
func hasToken(values []string, token string) bool {
	for _, t := range connectionTokens(values) {
		if name, _, _ := strings.Cut(t, ";"); strings.EqualFold(strings.TrimSpace(name), token) {
			return true
		}
	}
	return false
}

// requestHeader is the header sent upstream: the client's fields minus
// hop-by-hop and Proxy-* fields and Expect (the proxy answers it; "TE:
// trailers" stays: gRPC needs it).
func requestHeader(in http.Header) http.Header {
	tokens := connectionTokens(in.Values("Connection"))
	out := make(http.Header, len(in))
	for k, vv := range in {
		if k == "Host" || k == "Content-Length" || k == "Expect" {
			continue
		}
		if strings.EqualFold(k, "TE") {
			for _, v := range vv {
				if strings.EqualFold(strings.TrimSpace(v), "trailers") {
					out["Te"] = []string{"trailers"}
				}
			}
			continue
		}
		if isHopByHop(k, tokens) {
			continue
		}
		out[k] = vv
	}
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = []string{""}
	}
	return out
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// bulkCopySize is the largest write of a sized response read from the
// tunnel's own upstream connection (see flushCopy).
const bulkCopySize = 256 << 10

var bulkCopyBufs = sync.Pool{New: func() any { b := make([]byte, bulkCopySize); return &b }}

// pendingReader is a response body that can tell whether its next read
// is served from bytes already received (connBody).
type pendingReader interface{ pending() bool }

// flushCopy copies src to w. A streamed response (no Content-Length:
// gRPC, server-sent events, chunked downloads) is flushed after every
// read so it reaches the client as it arrives; a sized one is flushed
// when the writer's buffer fills and at the end, like
// httputil.ReverseProxy does. A sized body that reports what it has
// already received (from the tunnel's own upstream connection, one
// response at a time) is gathered into writes of up to bulkCopySize
// while more is already there, and written as soon as it is not, so a
// download leaves the proxy in large batches and a slow upstream's
// bytes wait no longer than before.
func flushCopy(w http.ResponseWriter, src io.Reader, streamed bool) int64 {
	var f http.Flusher
	if streamed {
		f, _ = w.(http.Flusher)
	}
	pr, _ := src.(pendingReader)
	pool := &copyBufs
	if pr != nil && !streamed {
		pool = &bulkCopyBufs
	} else {
		pr = nil
	}
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	buf := *bp
	var n int64
	k := 0
	for {
		m, err := src.Read(buf[k:])
		k += m
		if k > 0 && (err != nil || k == len(buf) || pr == nil || !pr.pending()) {
			wn, werr := w.Write(buf[:k])
			n += int64(wn)
			k = 0
			if werr != nil {
				return n
			}
			if f != nil {
				f.Flush()
			}
		}
		if err != nil {
			return n
		}
	}
}
