package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/l7"
)

func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// serveH1 serves HTTP/1.1 requests on an inspected connection (TLS
// terminated, or plaintext inside a tunnel; responses go to out, which
// writes to c) until the client closes, a
// request asks to close, or one is malformed. Every head goes through the
// proxy's strict parser and framing checks (obs-fold, invalid characters,
// Content-Length with Transfer-Encoding: 400 and close), then the
// inspector decides it on its own.
func (p *Proxy) serveH1(c net.Conn, br *bufio.Reader, ix *inspector, out io.Writer) {
	lim := &p.cfg.Limits
	ix.proto = "HTTP/1.1"
	bw := bufio.NewWriterSize(out, 64<<10)
	buf := make([]byte, 0, 1024)
	hdr := http.Header{} // the response header, emptied for each request
	for n := 0; ; n++ {
		if n > 0 {
			c.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
			if _, err := br.Peek(1); err != nil {
				return
			}
		}
		c.SetReadDeadline(time.Now().Add(lim.HeadTimeout))
		raw, err := readHead(br, lim.MaxHeadBytes, buf[:0])
		buf = raw[:0]
		if err != nil {
			if len(raw) > 0 {
				ix.headFailure(c, err, raw)
			}
			return
		}
		h, err := ParseHead(raw)
		if err != nil {
			ix.headFailure(c, err, raw)
			return
		}
		c.SetReadDeadline(time.Time{})
		req, fr, err := ix.buildRequest(h, br)
		if err != nil {
			ix.headFailure(c, err, raw)
			return
		}
		clear(hdr)
		w := &h1Writer{c: c, bw: bw, br: br, req: req, hdr: hdr}
		if fr.expect100 && req.Body != http.NoBody {
			req.Body = &continueReader{r: req.Body, w: w}
		}
		ix.ServeHTTP(w, req)
		if w.hijacked {
			p.finish(w.record)
			return
		}
		err = w.finish()
		p.finish(w.record)
		if err != nil {
			return
		}
		if w.close || req.Close || !bodyDone(req.Body) {
			lingerClose(c, 500*time.Millisecond)
			return
		}
	}
}

// headFailure answers a malformed head with 400 (431/408 for size and
// time) and records it as one request, naming the method and path it
// could read of raw (partialRequestLine).
func (ix *inspector) headFailure(c net.Conn, err error, raw []byte) {
	method, target := partialRequestLine(raw)
	rr := ix.requestRecord(&http.Request{Method: method})
	rr.URL = ix.partialURL(target)
	defer ix.p.finish(rr)
	status, reason := http.StatusBadRequest, ReasonMalformed
	switch {
	case errors.Is(err, ErrHeadTooLarge):
		status, reason = http.StatusRequestHeaderFieldsTooLarge, ReasonHeadTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		status, reason = http.StatusRequestTimeout, ReasonHeadTimeout
	}
	rr.Outcome, rr.Reason, rr.Status = OutcomeBadRequest, reason, status
	body := errorBody{Error: OutcomeBadRequest, Reason: reason}
	var he *HeadError
	if errors.As(err, &he) {
		body.Detail, rr.Cause = he.Msg, he.Msg
	}
	writeJSONResponse(c, status, body)
	lingerClose(c, 500*time.Millisecond)
}

// partialURL is the URL of a malformed request's target, for its
// event: its path when it reads as one (origin or absolute form), nil
// otherwise.
func (ix *inspector) partialURL(target string) *url.URL {
	if hasPrefixFold(target, "http://") || hasPrefixFold(target, "https://") {
		rest := target[strings.Index(target, "//")+2:]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			target = rest[i:]
		} else {
			target = "/"
		}
	}
	p, err := l7.ParsePath(target)
	if err != nil {
		return nil
	}
	return &url.URL{Scheme: ix.scheme, Host: ix.host, Path: p.Decoded, RawPath: p.Escaped}
}

// buildRequest turns a strictly parsed head into an *http.Request whose
// RequestURI is origin-form ("/path?query") and whose Host is the
// authority the request named (absolute-form target or Host field).
func (ix *inspector) buildRequest(h *Head, br *bufio.Reader) (*http.Request, framing, error) {
	fr, err := requestFraming(h)
	if err != nil {
		return nil, fr, err
	}
	r := &http.Request{Method: h.Method, Proto: h.Proto, ProtoMajor: 1, ProtoMinor: 1, Header: make(http.Header, len(h.Fields))}
	if h.Proto == "HTTP/1.0" {
		r.ProtoMinor = 0
	}
	for _, f := range h.Fields {
		k := textproto.CanonicalMIMEHeaderKey(f.Name)
		r.Header[k] = append(r.Header[k], f.Value)
	}
	hosts := r.Header.Values("Host")
	switch {
	case len(hosts) > 1:
		return nil, fr, headErrorf("more than one Host field")
	case len(hosts) == 1:
		r.Host = strings.TrimSpace(hosts[0])
	case r.ProtoMinor == 1:
		return nil, fr, headErrorf("HTTP/1.1 request without Host")
	}
	switch t := h.Target; {
	case strings.HasPrefix(t, "/"):
		r.RequestURI = t
	case hasPrefixFold(t, "http://") || hasPrefixFold(t, "https://"):
		// Absolute form: its authority must be the tunnel's, and so must
		// Host (checked by the inspector).
		i := strings.Index(t, "//") + 2
		rest := t[i:]
		j := strings.IndexAny(rest, "/?")
		auth, pathq := rest, "/"
		if j >= 0 {
			auth, pathq = rest[:j], rest[j:]
			if pathq[0] == '?' {
				pathq = "/" + pathq
			}
		}
		if r.Host != "" && !strings.EqualFold(auth, r.Host) {
			return nil, fr, headErrorf("absolute request target and Host disagree")
		}
		r.Host, r.RequestURI = auth, pathq
	default:
		return nil, fr, headErrorf("request target must be origin-form (/path) inside a tunnel")
	}
	if strings.IndexByte(r.RequestURI, '#') >= 0 {
		return nil, fr, headErrorf("request target carries a fragment")
	}
	conn := connectionTokens(r.Header.Values("Connection"))
	for _, t := range conn {
		if strings.EqualFold(t, "close") {
			r.Close = true
		}
	}
	if r.ProtoMinor == 0 {
		r.Close = true
	}
	switch {
	case fr.chunked:
		r.Body, r.ContentLength = newChunkedBody(br), -1
		r.TransferEncoding = []string{"chunked"}
	case fr.length > 0:
		r.Body, r.ContentLength = newSizedBody(br, fr.length), fr.length
	default:
		r.Body = http.NoBody
	}
	return r, fr, nil // no context: r.Context() is context.Background()
}

// trackedBody knows whether it was read to the end, so the connection
// is reused only after a fully consumed request body. A sized body is
// done when its last byte was read (a reader need not come back for the
// EOF); a chunked one when its last chunk and trailer section were read
// (trailers are dropped, not forwarded), so the next head starts clean.
type trackedBody struct {
	r        io.Reader
	trailers *bufio.Reader // chunked: where the trailer section is read from
	remain   int64         // sized: bytes still to come
	sized    bool
	// eof is read by the connection's goroutine while a transport's
	// writer may still be returning from Read: atomic, so seeing it set
	// orders every read of the connection's buffer before it.
	eof atomic.Bool
}

func newChunkedBody(br *bufio.Reader) *trackedBody {
	return &trackedBody{r: httputil.NewChunkedReader(br), trailers: br}
}

func newSizedBody(br *bufio.Reader, n int64) *trackedBody {
	return &trackedBody{r: io.LimitReader(br, n), remain: n, sized: true}
}

// maxTrailerBytes bounds a chunked body's trailer section.
const maxTrailerBytes = 8 << 10

func (b *trackedBody) Read(p []byte) (int, error) {
	if b.eof.Load() {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if b.sized {
		b.remain -= int64(n)
		if b.remain <= 0 {
			b.eof.Store(true)
		}
		if err == io.EOF && b.remain > 0 {
			err = io.ErrUnexpectedEOF
		}
		return n, err
	}
	if err == io.EOF {
		total := 0
		for {
			line, lerr := b.trailers.ReadSlice('\n')
			total += len(line)
			if lerr != nil || total > maxTrailerBytes {
				return n, errors.New("bad chunked trailer section")
			}
			if len(line) == 1 || len(line) == 2 && line[0] == '\r' {
				break
			}
		}
		b.eof.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { return nil }

func bodyDone(b io.ReadCloser) bool {
	switch t := b.(type) {
	case *trackedBody:
		return t.eof.Load()
	case *continueReader:
		return bodyDone(t.r)
	}
	return b == http.NoBody
}

// continueReader sends "100 Continue" when the handler first reads the
// body: a denied request is answered without the client sending it.
type continueReader struct {
	r    io.ReadCloser
	w    *h1Writer
	sent bool
}

func (c *continueReader) Read(p []byte) (int, error) {
	if !c.sent {
		c.sent = true
		if !c.w.wrote {
			c.w.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := c.w.bw.Flush(); err != nil {
				return 0, err
			}
		}
	}
	return c.r.Read(p)
}
func (c *continueReader) Close() error { return c.r.Close() }

// h1Writer is the http.ResponseWriter of one HTTP/1.1 request on an
// inspected connection: a known Content-Length is kept, anything else is
// sent chunked (so the connection survives the response), trailers go
// after the last chunk.
type h1Writer struct {
	c        net.Conn
	bw       *bufio.Writer
	br       *bufio.Reader
	req      *http.Request
	hdr      http.Header
	wrote    bool
	status   int
	bodyless bool
	chunked  bool
	remain   int64
	sized    bool
	close    bool
	hijacked bool
	err      error
	record   *Record // the request's record, finished after the response
	phrase   string  // the status line's text ("": the status's standard text)
}

func (w *h1Writer) Header() http.Header     { return w.hdr }
func (w *h1Writer) closeAfter()             { w.close = true }
func (w *h1Writer) setPhrase(phrase string) { w.phrase = phrase }

func (w *h1Writer) WriteHeader(code int) {
	if w.wrote || code < 100 || code > 999 {
		return
	}
	w.wrote, w.status = true, code
	w.bodyless = w.req.Method == http.MethodHead || code < 200 || code == http.StatusNoContent || code == http.StatusNotModified
	h := w.hdr
	if cl := h.Get("Content-Length"); cl != "" && !w.bodyless {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 {
			h.Del("Content-Length")
		} else {
			w.sized, w.remain = true, n
		}
	}
	if !w.bodyless && !w.sized {
		if w.req.ProtoMinor == 0 {
			w.close = true // HTTP/1.0: the body ends with the connection
		} else {
			w.chunked = true
		}
	}
	if w.req.Close || !bodyDone(w.req.Body) {
		w.close = true // an unread request body cannot be skipped safely
	}
	w.bw.WriteString("HTTP/1.1 ")
	w.bw.WriteString(strconv.Itoa(code))
	w.bw.WriteByte(' ')
	if w.phrase != "" {
		w.bw.WriteString(w.phrase)
	} else {
		w.bw.WriteString(http.StatusText(code))
	}
	w.bw.WriteString("\r\n")
	for k, vv := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) || k == "Transfer-Encoding" || k == "Connection" {
			continue
		}
		if k == "Trailer" && !w.chunked {
			continue
		}
		for _, v := range vv {
			w.bw.WriteString(k)
			w.bw.WriteString(": ")
			w.bw.WriteString(headerValue(v))
			w.bw.WriteString("\r\n")
		}
	}
	if w.chunked {
		w.bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.close {
		w.bw.WriteString("Connection: close\r\n")
	}
	w.bw.WriteString("\r\n")
}

// headerValue drops CR and LF so an upstream value cannot split the head.
func headerValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		return strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	return v
}

func (w *h1Writer) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.bodyless || len(b) == 0 {
		return len(b), nil
	}
	if w.sized {
		if int64(len(b)) > w.remain {
			w.err = errors.New("response body longer than its Content-Length")
			return 0, w.err
		}
		w.remain -= int64(len(b))
		_, w.err = w.bw.Write(b)
		return len(b), w.err
	}
	if w.chunked {
		w.bw.WriteString(strconv.FormatInt(int64(len(b)), 16))
		w.bw.WriteString("\r\n")
		w.bw.Write(b)
		_, w.err = w.bw.WriteString("\r\n")
		return len(b), w.err
	}
	_, w.err = w.bw.Write(b)
	return len(b), w.err
}

func (w *h1Writer) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil {
		w.c.SetWriteDeadline(time.Now().Add(5 * time.Minute))
		w.err = w.bw.Flush()
	}
}

// finish ends the response: the last chunk and trailers, or a
// connection close when a sized body came up short.
func (w *h1Writer) finish() error {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	if w.chunked {
		w.bw.WriteString("0\r\n")
		for k, vv := range w.hdr {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, v := range vv {
					w.bw.WriteString(name + ": " + headerValue(v) + "\r\n")
				}
			}
		}
		w.bw.WriteString("\r\n")
	}
	if w.sized && w.remain > 0 {
		w.close = true
	}
	w.c.SetWriteDeadline(time.Now().Add(5 * time.Minute))
	w.err = w.bw.Flush()
	w.c.SetWriteDeadline(time.Time{})
	return w.err
}

// Hijack hands the connection over (for a WebSocket after its 101).
func (w *h1Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.wrote {
		return nil, nil, errors.New("response already started")
	}
	w.hijacked = true
	return w.c, bufio.NewReadWriter(w.br, w.bw), nil
}
