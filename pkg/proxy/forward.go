package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/l7"
)

// framing is how a forwarded request's body is delimited.
type framing struct {
	chunked   bool
	length    int64 // when !chunked; 0 means no body
	expect100 bool
}

// requestFraming reads the body framing of a request head the way RFC
// 9112 §6 prescribes, refusing the ambiguous cases request smuggling
// lives on: Transfer-Encoding together with Content-Length, any transfer
// coding but a single "chunked", Transfer-Encoding on HTTP/1.0,
// Content-Length values that disagree or do not parse, and a field the
// proxy reads spelt with "_" for "-" ("Transfer_Encoding": an upstream
// that folds it would frame the request differently).
func requestFraming(h *Head) (framing, error) {
	var fr framing
	var te []string
	cl := ""
	seenCL := false
	for _, f := range h.Fields {
		if l7.CheckFieldName(f.Name) != nil {
			return fr, headErrorf("header %s spells a field the proxy reads, with '_' for '-'", f.Name)
		}
		switch {
		case strings.EqualFold(f.Name, "Transfer-Encoding"):
			for _, t := range strings.Split(f.Value, ",") {
				if t = strings.TrimSpace(t); t != "" {
					te = append(te, t)
				}
			}
		case strings.EqualFold(f.Name, "Content-Length"):
			for _, v := range strings.Split(f.Value, ",") {
				v = strings.TrimSpace(v)
				if seenCL && v != cl {
					return fr, headErrorf("conflicting Content-Length values")
				}
				cl, seenCL = v, true
			}
		case strings.EqualFold(f.Name, "Expect"):
			if !strings.EqualFold(strings.TrimSpace(f.Value), "100-continue") {
				return fr, headErrorf("unsupported Expect value")
			}
			fr.expect100 = true
		}
	}
	if len(te) > 0 {
		switch {
		case seenCL:
			return fr, headErrorf("both Transfer-Encoding and Content-Length")
		case h.Proto == "HTTP/1.0":
			return fr, headErrorf("Transfer-Encoding in an HTTP/1.0 request")
		case len(te) != 1 || !strings.EqualFold(te[0], "chunked"):
			return fr, headErrorf("unsupported Transfer-Encoding (only chunked)")
		}
		fr.chunked = true
		return fr, nil
	}
	if seenCL {
		if cl == "" || len(cl) > 18 {
			return fr, headErrorf("invalid Content-Length")
		}
		for i := 0; i < len(cl); i++ {
			if cl[i] < '0' || cl[i] > '9' {
				return fr, headErrorf("invalid Content-Length")
			}
		}
		fr.length, _ = strconv.ParseInt(cl, 10, 64)
	}
	return fr, nil
}

// isHopByHop reports whether a request or response field is never
// forwarded: the RFC 9110 §7.6.1 connection-specific fields, every
// Proxy-* field (credentials for this proxy, never for the origin), and
// fields the proxy regenerates (Host, Content-Length, Expect).
func isHopByHop(name string, connTokens []string) bool {
	if hasPrefixFold(name, "Proxy-") {
		return true
	}
	for _, h := range hopByHop {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	for _, t := range connTokens {
		if strings.EqualFold(name, t) {
			return true
		}
	}
	return false
}

var hopByHop = []string{"Connection", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Upgrade"}

// connectionTokens lists the field names a Connection header declares
// hop-by-hop.
func connectionTokens(values []string) []string {
	var out []string
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// forwardHeader is the header sent upstream: the client's fields minus
// hop-by-hop and Proxy-* fields and those the transport regenerates. No
// X-Forwarded-For or Via is added: the origin learns nothing about the
// sandbox.
func forwardHeader(h *Head) http.Header {
	var connVals []string
	for _, f := range h.Fields {
		if strings.EqualFold(f.Name, "Connection") {
			connVals = append(connVals, f.Value)
		}
	}
	tokens := connectionTokens(connVals)
	out := make(http.Header, len(h.Fields))
	for _, f := range h.Fields {
		if isHopByHop(f.Name, tokens) ||
			strings.EqualFold(f.Name, "Host") ||
			strings.EqualFold(f.Name, "Content-Length") ||
			strings.EqualFold(f.Name, "Expect") {
			continue
		}
		out.Add(f.Name, f.Value)
	}
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = []string{""} // keep the transport from adding its own
	}
	return out
}

// stripResponseHeader removes hop-by-hop fields from an upstream response.
func stripResponseHeader(h http.Header) {
	tokens := connectionTokens(h.Values("Connection"))
	for name := range h {
		if isHopByHop(name, tokens) {
			delete(h, name)
		}
	}
}

type connKey struct{}

// preDialed carries the SSRF-checked upstream connection to the shared
// transport, which uses it once and never dials by itself.
type preDialed struct {
	c    net.Conn
	used atomic.Bool
}

var errNoPreDialed = errors.New("proxy: forward transport has no checked upstream connection")

func newForwardTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			pd, _ := ctx.Value(connKey{}).(*preDialed)
			if pd == nil || !pd.used.CompareAndSwap(false, true) {
				return nil, errNoPreDialed
			}
			return pd.c, nil
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// forward relays one absolute-form http:// request to the checked
// upstream connection and streams the response back. It reports whether
// the client connection may carry another request: the request asked
// for no close, its body was read to the end and the response was
// delimited (Content-Length or chunked).
func (p *Proxy) forward(c *net.TCPConn, br *bufio.Reader, up net.Conn, rec *Record, rq request) bool {
	out := &http.Request{
		Method:     rq.head.Method,
		URL:        rq.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     rq.header,
		Host:       rq.url.Host,
	}
	if out.Header == nil {
		out.Header = forwardHeader(rq.head)
	}
	// The URL sent upstream carries no userinfo (ParseForwardTarget
	// refused it) and the transport writes only its path and query.
	var body *countingReader
	tb := rq.body.tb
	switch {
	case rq.prepared != nil && len(rq.prepared) == 0:
		out.Body, tb = http.NoBody, nil
	case rq.prepared != nil:
		// Read already: its placeholders resolved, or hashed to sign it
		// (forwardCredentials).
		body = &countingReader{r: bytes.NewReader(rq.prepared)}
		out.Body, out.ContentLength, tb = io.NopCloser(body), int64(len(rq.prepared)), nil
	case tb != nil:
		// The body as received, what an inspector read of it first.
		body = &countingReader{r: rq.body.reader()}
		out.Body, out.ContentLength = io.NopCloser(body), rq.body.length
		if err := rq.body.start(); err != nil { // 100 Continue, unless sent
			c.Close()
			return false
		}
	default:
		out.Body = http.NoBody
	}
	p.m.activeTunnels.Add(1)
	defer p.m.activeTunnels.Add(-1)
	w := p.watchIdle(c, up)
	defer w.stop()
	ctx := context.WithValue(context.Background(), connKey{}, &preDialed{c: up})
	resp, err := p.transport.RoundTrip(out.WithContext(ctx))
	if body != nil {
		rec.BytesUp = body.n
	}
	if err != nil {
		status, reason := http.StatusBadGateway, ReasonUpstreamError
		if w.fired.Load() || isTimeout(err) {
			status = http.StatusGatewayTimeout
		}
		if rq.scrub != nil {
			rec.scrub = rq.scrub
		}
		p.upstreamFailed(c, rec, status, reason, err)
		return false
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	stripResponseHeader(resp.Header)
	creq := &http.Request{Method: rq.head.Method, ProtoMinor: 1, Body: http.NoBody}
	if rq.head.Proto == "HTTP/1.0" {
		creq.ProtoMinor = 0
	}
	if tb != nil {
		creq.Body = tb
	}
	for _, t := range connectionTokens(headerValues(rq.head, "Connection")) {
		if strings.EqualFold(t, "close") {
			creq.Close = true
		}
	}
	bw := bufio.NewWriterSize(c, 4096)
	hw := &h1Writer{c: c, bw: bw, br: br, req: creq, hdr: resp.Header}
	if resp.ContentLength >= 0 {
		resp.Header.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	} else {
		resp.Header.Del("Content-Length")
	}
	hw.WriteHeader(resp.StatusCode)
	n := flushCopy(hw, resp.Body, resp.ContentLength < 0)
	rec.BytesDown = n
	if resp.ContentLength >= 0 && n < resp.ContentLength || hw.err != nil {
		// Headers are gone already: the client sees a truncated body
		// (or a short Content-Length), never a silent success.
		if hw.err != nil {
			rec.Cause = hw.err.Error()
		} else {
			rec.Cause = "upstream body shorter than its Content-Length"
		}
		c.SetLinger(0)
		c.Close()
		return false
	}
	if err := hw.finish(); err != nil {
		c.Close()
		return false
	}
	if hw.close || creq.Close {
		lingerClose(c, 500*time.Millisecond)
		return false
	}
	return true
}

// headerValues returns the values of every field named name, "_" and
// case folded (l7.FoldedEqual).
func headerValues(h *Head, name string) []string {
	var out []string
	for _, f := range h.Fields {
		if l7.FoldedEqual(f.Name, name) {
			out = append(out, f.Value)
		}
	}
	return out
}

// statusLine is "CODE REASON" with a reason phrase that is safe to echo.
func statusLine(resp *http.Response) string {
	code := strconv.Itoa(resp.StatusCode)
	reason := strings.TrimSpace(strings.TrimPrefix(resp.Status, code))
	for i := 0; i < len(reason); i++ {
		if c := reason[i]; (c < ' ' && c != '\t') || c == 0x7f {
			reason = ""
			break
		}
	}
	if reason == "" {
		reason = http.StatusText(resp.StatusCode)
	}
	return code + " " + reason
}
