package proxy

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net/http"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/l7/websocket"
)

// Reasons of a WebSocket connection ended after its upgrade.
const (
	// ReasonWebSocketExtension: the upstream's 101 names an extension
	// the proxy did not offer it (it offers none when it reads the
	// messages: permessage-deflate is negotiated away).
	ReasonWebSocketExtension = "websocket_extension_not_offered"
)

// upgrade relays an allowed WebSocket upgrade (out, built by relay) and
// then the connection, over a new HTTP/1.1 connection to the checked
// address. An HTTP/2 client's extended CONNECT (RFC 8441) becomes an
// HTTP/1.1 upgrade with the proxy's own key, and the 101 it gets
// becomes the client's 200. With message rules (msgs), the client's
// offer of extensions is dropped (permessage-deflate negotiated away:
// the proxy reads messages uncompressed) and an upstream that answers
// with one anyway gets 502; rw (messageCredentials) then sees each text
// message the rules allow.
func (ix *inspector) upgrade(w http.ResponseWriter, r *http.Request, rr *Record, out *http.Request, msgs l7.Messages, rw websocket.Rewrite) {
	h2 := isExtendedConnect(r)
	key := r.Header.Get("Sec-WebSocket-Key")
	out.Header.Set("Connection", "Upgrade")
	out.Header.Set("Upgrade", "websocket")
	if h2 {
		key = newWebSocketKey()
		out.Method, out.Body, out.ContentLength = http.MethodGet, http.NoBody, 0
		out.Header.Del(":protocol")
		out.Header.Set("Sec-WebSocket-Key", key)
	}
	if msgs != nil {
		out.Header.Del("Sec-WebSocket-Extensions")
	}
	rt := ix.ws
	if rt == nil {
		rt = ix.rt
	}
	resp, err := rt.RoundTrip(out)
	if err != nil {
		ix.upstreamFailed(w, rr, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		ix.respond(w, rr, resp) // a refusal: relayed as it is
		return
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	detail := checkWebSocketAccept(resp.Header, key)
	reason := ReasonWebSocketHandshake
	if !ok {
		detail = "101 without a connection to hand over"
	}
	if detail == "" && msgs != nil && len(resp.Header.Values("Sec-WebSocket-Extensions")) > 0 {
		detail, reason = "101 names an extension that was not offered", ReasonWebSocketExtension
	}
	if detail != "" {
		rr.Outcome, rr.Reason, rr.Status, rr.Cause = OutcomeUpstreamFailed, reason, http.StatusBadGateway, detail
		writeHTTPJSON(w, http.StatusBadGateway, errorBody{Error: OutcomeUpstreamFailed, Reason: reason, Detail: detail})
		return
	}
	rr.Outcome, rr.Status = OutcomeAllowed, resp.StatusCode
	chk := &websocket.Checker{Client: true, RSV1: hasToken(resp.Header.Values("Sec-WebSocket-Extensions"), "permessage-deflate")}
	var cl wsClient
	if h2 {
		cl, ok = ix.acceptH2(w, r, resp)
	} else {
		cl, ok = ix.accept101(w, resp)
	}
	if !ok {
		return
	}
	if h2 {
		rr.Status = http.StatusOK
	}
	// The upgrade's answer is a result of its own; the connection's end
	// (a refused message) may be another.
	ix.p.observeResult(rr, ResultHTTPResponse, ix.p.now())
	ix.relayWebSocket(cl, rwc, chk, msgs, rw, rr)
}

// newWebSocketKey is a fresh Sec-WebSocket-Key.
func newWebSocketKey() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// wsBuffer is the size of the buffers an upgraded connection's frames
// are read through, each way: a message in one frame that fits is
// decided where it lies (websocket.RelayMessages), and the frames read
// in one go are written upstream in one go (net/http's 4 KiB reader
// that a hijacked connection comes with, read through this one, is
// bypassed once empty).
const wsBuffer = 32 << 10

// wsClient is the client's side of an upgraded connection: its bytes,
// where the upstream's go, and how to end it.
type wsClient struct {
	r     *bufio.Reader
	w     io.Writer
	close func()
}

// accept101 relays the 101 to an HTTP/1.1 client and takes its
// connection over.
func (ix *inspector) accept101(w http.ResponseWriter, resp *http.Response) (wsClient, bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return wsClient{}, false
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return wsClient{}, false
	}
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	stripResponseHeader(resp.Header)
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", "websocket")
	resp.Header.Write(brw)
	brw.WriteString("\r\n")
	if err := brw.Flush(); err != nil {
		c.Close()
		return wsClient{}, false
	}
	return wsClient{r: bufio.NewReaderSize(brw.Reader, wsBuffer), w: c, close: func() { c.Close() }}, true
}

// acceptH2 answers an HTTP/2 client's extended CONNECT with 200 and the
// upstream's subprotocol and extensions; the stream carries the frames
// from then on.
func (ix *inspector) acceptH2(w http.ResponseWriter, r *http.Request, resp *http.Response) (wsClient, bool) {
	h := w.Header()
	for _, k := range []string{"Sec-WebSocket-Protocol", "Sec-WebSocket-Extensions"} {
		if vv := resp.Header.Values(k); len(vv) > 0 {
			h[k] = vv
		}
	}
	w.WriteHeader(http.StatusOK)
	f, ok := w.(http.Flusher)
	if !ok {
		return wsClient{}, false
	}
	f.Flush()
	return wsClient{r: bufio.NewReaderSize(r.Body, wsBuffer), w: flushingWriter{w: w, f: f}, close: func() { r.Body.Close() }}, true
}

// flushingWriter flushes every write (an h2 stream's frames go out as
// they come).
type flushingWriter struct {
	w io.Writer
	f http.Flusher
}

func (fw flushingWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	fw.f.Flush()
	return n, err
}

// relayWebSocket relays an upgraded connection both ways. The client's
// bytes go upstream only as well-formed masked frames (websocket.Relay),
// and with message rules only as messages they allow
// (websocket.RelayMessages, their credential placeholders through rw).
// A refused message closes both sides: the upstream gets a close frame
// with the code (1008, or 1007/1009), the client too when the
// upstream's frames to it ended whole, and the request's event names
// the reason and rule; a placeholder refused in a message is recorded
// as a request's is (a misbound one adds the Credential Misuse
// finding). Without message rules the
// upstream's bytes are relayed as they come; with them, frame by frame
// (so a close frame can follow).
func (ix *inspector) relayWebSocket(cl wsClient, up io.ReadWriteCloser, chk *websocket.Checker, msgs l7.Messages, rw websocket.Rewrite, rr *Record) {
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		var n int64
		var err error
		if msgs == nil {
			n, err = websocket.Relay(up, cl.r, chk)
		} else {
			n, err = websocket.RelayMessages(up, cl.r, chk, msgs, ix.auditMessage(rr), rw)
		}
		done <- result{n, err} // before the close frame ends the other side
		var ref *websocket.Refusal
		if errors.As(err, &ref) {
			up.Write(websocket.CloseFrame(ref.Code, true))
		}
		up.Close()
	}()
	aligned := false
	if msgs == nil {
		rr.BytesDown, _ = io.Copy(cl.w, up)
	} else {
		rr.BytesDown, aligned, _ = websocket.RelayFrames(cl.w, bufio.NewReaderSize(up, wsBuffer), &websocket.Checker{})
	}
	// The upstream's side ended: it closed, or a refusal closed it
	// (and its result is waiting). Otherwise the client's side is
	// ended here.
	var res result
	select {
	case res = <-done:
	default:
		cl.close()
		res = <-done
	}
	var ref *websocket.Refusal
	if errors.As(res.err, &ref) && aligned {
		cl.w.Write(websocket.CloseFrame(ref.Code, false))
	}
	cl.close()
	rr.BytesUp += res.n
	switch {
	case ref != nil && ref.Code == websocket.ClosePolicyViolation:
		rr.Outcome, rr.Reason, rr.Rule = OutcomePolicyDenied, ref.Decision.Reason, ref.Decision.Rule
		if credentialReason(ref.Decision.Reason) {
			rr.CredentialRefused, rr.CredentialMisuse = true, ref.Decision.Reason == credentials.ReasonEndpointMismatch
		}
	case ref != nil:
		rr.Outcome, rr.Reason = OutcomeBadRequest, ref.Decision.Reason
	case errors.Is(res.err, websocket.ErrFrame):
		rr.Outcome, rr.Reason, rr.Cause = OutcomeBadRequest, ReasonWebSocketFrame, res.err.Error()
	}
}

// auditMessage is what a refused message does under enforcement: audit
// (relayed, and logged), nil under enforce.
func (ix *inspector) auditMessage(rr *Record) func(l7.Decision) {
	if !rr.Audit {
		return nil
	}
	return func(d l7.Decision) {
		ix.p.log.Warn("WebSocket message rule violation allowed by enforcement: audit", "host", ix.host, "reason", d.Reason, "rule", d.Rule, "entry", rr.Entry)
	}
}
