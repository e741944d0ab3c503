package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/palisade-sandbox/palisade/pkg/l7/websocket"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// wsUpstream is a WebSocket echo server over TLS (HTTP/1.1): every data
// message it reads is recorded and sent back as a text frame; the
// extensions each upgrade offered are recorded too.
type wsUpstream struct {
	port int
	ca   *tlsca.Authority
	mu   sync.Mutex
	msgs []string // messages received, in order
	exts []string // Sec-WebSocket-Extensions of each upgrade
	code []int    // close codes received
}

func newWSUpstream(t testing.TB) *wsUpstream {
	t.Helper()
	u := &wsUpstream{}
	u.ca, _ = tlsca.New(tlsca.Options{Name: "ws-upstream"})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	leaf, _ := u.ca.Leaf("allowed.test")
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u.port = srv.Listener.Addr().(*net.TCPAddr).Port
	return u
}

func (u *wsUpstream) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "websocket" {
		http.Error(w, "want an upgrade", 400)
		return
	}
	u.mu.Lock()
	u.exts = append(u.exts, r.Header.Get("Sec-WebSocket-Extensions"))
	u.mu.Unlock()
	c, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", websocket.AcceptKey(r.Header.Get("Sec-WebSocket-Key")))
	brw.Flush()
	var msg []byte
	for {
		op, fin, pay, err := readWSFrame(brw.Reader)
		if err != nil {
			return
		}
		switch op {
		case websocket.OpClose:
			u.mu.Lock()
			if len(pay) >= 2 {
				u.code = append(u.code, int(binary.BigEndian.Uint16(pay)))
			}
			u.mu.Unlock()
			return
		case websocket.OpPing, websocket.OpPong:
			continue
		}
		msg = append(msg, pay...)
		if !fin {
			continue
		}
		u.mu.Lock()
		u.msgs = append(u.msgs, string(msg))
		u.mu.Unlock()
		c.Write(wsFrame(websocket.OpText, true, false, msg))
		msg = nil
	}
}

func (u *wsUpstream) received() ([]string, []string, []int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.msgs...), append([]string(nil), u.exts...), append([]int(nil), u.code...)
}

// wsFrame is one frame; masked as a client sends it.
func wsFrame(op byte, fin, masked bool, pay []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	var mbit byte
	if masked {
		mbit = 0x80
	}
	switch n := len(pay); {
	case n < 126:
		out = append(out, mbit|byte(n))
	case n < 1<<16:
		out = append(out, mbit|126, byte(n>>8), byte(n))
	default:
		out = append(out, mbit|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	if !masked {
		return append(out, pay...)
	}
	key := [4]byte{0x11, 0x22, 0x33, 0x44}
	out = append(out, key[:]...)
	p := append([]byte(nil), pay...)
	websocket.Unmask(p, key, 0)
	return append(out, p...)
}

func readWSFrame(r *bufio.Reader) (op byte, fin bool, pay []byte, err error) {
	h, _, err := websocket.ReadHeader(r)
	if err != nil {
		return 0, false, nil, err
	}
	pay = make([]byte, h.Length)
	if _, err := io.ReadFull(r, pay); err != nil {
		return 0, false, nil, err
	}
	if h.Masked {
		websocket.Unmask(pay, h.Mask, 0)
	}
	return h.Opcode, h.Fin, pay, nil
}

func wsPolicy(port int, enforcement string) string {
	return fmt.Sprintf(`version: 1
network_policies:
  ws:
    endpoints:
      - host: allowed.test
        port: %d
        protocol: websocket
        enforcement: %s
        rules: [{allow: {method: GET, path: /stream}}]
        websocket:
          text:
            - json: {type: subscribe, channel: "ticker.*"}
            - exact: ping
          deny_text:
            - json: {channel: "ticker.secret*"}
          max_message_bytes: 1024
    binaries:
      - path: /usr/bin/curl
`, port, enforcement)
}

// wsConn is a client's upgraded connection, over HTTP/1.1 or HTTP/2.
type wsConn struct {
	r     *bufio.Reader
	w     io.Writer
	close func()
}

func newWSEnv(t *testing.T, enforcement string) (*inspectEnv, *wsUpstream) {
	up := newWSUpstream(t)
	ca, _ := tlsca.New(tlsca.Options{Name: "proxytest"})
	env := newEnv(t, wsPolicy(up.port, enforcement), func(c *Config) { c.CA, c.UpstreamRoots = ca, poolOf(up.ca) })
	return &inspectEnv{testEnv: env, ca: ca, up: &upstreamTLS{port: up.port}}, up
}

// dialWS upgrades path over HTTP/1.1 (h2 false) or an HTTP/2 extended
// CONNECT; status is the answer's (101 or 200 when upgraded).
func dialWS(t *testing.T, e *inspectEnv, h2 bool, path, ext string) (*wsConn, int) {
	t.Helper()
	if !h2 {
		tc := e.rawTLS("http/1.1")
		tc.SetDeadline(time.Now().Add(20 * time.Second))
		extH := ""
		if ext != "" {
			extH = "Sec-WebSocket-Extensions: " + ext + "\r\n"
		}
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: allowed.test:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n", path, e.up.port, extH)
		br := bufio.NewReader(tc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &wsConn{r: br, w: tc, close: func() { tc.Close() }}, resp.StatusCode
	}
	tc := e.rawTLS("h2")
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Scheme: "https", Host: fmt.Sprintf("allowed.test:%d", e.up.port), Path: path},
		Host: fmt.Sprintf("allowed.test:%d", e.up.port), Header: http.Header{":protocol": {"websocket"}, "Sec-Websocket-Version": {"13"}}, Body: pr}
	if ext != "" {
		req.Header.Set("Sec-WebSocket-Extensions", ext)
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("extended CONNECT: %v", err)
	}
	return &wsConn{r: bufio.NewReader(resp.Body), w: pw, close: func() { pw.Close(); resp.Body.Close(); cc.Close(); tc.Close() }}, resp.StatusCode
}

// expectClose reads frames until a close frame and returns its code
// (0 when the connection ended without one).
func (c *wsConn) expectClose() int {
	for {
		op, _, pay, err := readWSFrame(c.r)
		if err != nil {
			return 0
		}
		if op == websocket.OpClose && len(pay) >= 2 {
			return int(binary.BigEndian.Uint16(pay))
		}
	}
}

// A protocol: websocket endpoint relays the text messages its rules
// allow and closes the connection with 1008 at the first it refuses
// (nothing of it reaches the upstream; the event names the rule), over
// HTTP/1.1 and over HTTP/2 extended CONNECT alike. Fragments are
// reassembled (up to max_message_bytes: 1009 above), binary messages
// are refused when not allowed, and permessage-deflate is negotiated
// away. Mutation-checked: with RelayMessages's decision skipped (every
// message written) the refused messages reach the upstream and this
// fails.
func TestWebSocketMessageRules(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1.1", true: "h2"}[h2], func(t *testing.T) {
			e, up := newWSEnv(t, "enforce")
			cases := []struct {
				name   string
				frames [][]byte
				code   int
				reason string
				rule   string
			}{
				{"no rule", [][]byte{wsFrame(websocket.OpText, true, true, []byte(`{"type":"unsubscribe","channel":"ticker.btc"}`))}, 1008, websocket.ReasonNoRule, ""},
				{"deny rule", [][]byte{wsFrame(websocket.OpText, true, true, []byte(`{"type":"subscribe","channel":"ticker.secret.x"}`))}, 1008, websocket.ReasonDenyRule, "websocket.deny_text[0]"},
				{"duplicate key", [][]byte{wsFrame(websocket.OpText, true, true, []byte(`{"type":"subscribe","channel":"ticker.a","channel":"ticker.secret"}`))}, 1008, websocket.ReasonAmbiguousJSON, ""},
				{"binary", [][]byte{wsFrame(websocket.OpBinary, true, true, []byte("ping"))}, 1008, websocket.ReasonBinaryDenied, "websocket.binary"},
				{"fragmented too big", [][]byte{wsFrame(websocket.OpText, false, true, bytes.Repeat([]byte("a"), 1000)), wsFrame(websocket.OpContinuation, true, true, bytes.Repeat([]byte("a"), 100))}, 1009, websocket.ReasonTooBig, ""},
				{"not utf-8", [][]byte{wsFrame(websocket.OpText, true, true, []byte{'p', 0xff})}, 1007, websocket.ReasonInvalidUTF8, ""},
			}
			for i, tc := range cases {
				c, status := dialWS(t, e, h2, "/stream", "permessage-deflate; client_max_window_bits")
				if status != 101 && status != 200 {
					t.Fatalf("%s: upgrade answered %d", tc.name, status)
				}
				allowed := []string{`{"type":"subscribe","channel":"ticker.btc"}`, "ping"}
				// One allowed message in three fragments with a ping between.
				c.w.Write(append(append(append(wsFrame(websocket.OpText, false, true, []byte(allowed[0][:10])),
					wsFrame(websocket.OpPing, true, true, nil)...),
					wsFrame(websocket.OpContinuation, false, true, []byte(allowed[0][10:20]))...),
					wsFrame(websocket.OpContinuation, true, true, []byte(allowed[0][20:]))...))
				c.w.Write(wsFrame(websocket.OpText, true, true, []byte(allowed[1])))
				for _, want := range allowed {
					if op, _, pay, err := readWSFrame(c.r); err != nil || op != websocket.OpText || string(pay) != want {
						t.Fatalf("%s: echo of an allowed message: %d %q %v", tc.name, op, pay, err)
					}
				}
				for _, f := range tc.frames {
					c.w.Write(f)
				}
				if code := c.expectClose(); code != tc.code {
					t.Errorf("%s: close code %d, want %d", tc.name, code, tc.code)
				}
				c.close()
				waitFor(t, tc.name+"'s event", func() bool {
					for _, ev := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
						if get(ev, "unmapped", "egress_proxy", "reason") == tc.reason {
							r, _ := get(ev, "unmapped", "egress_proxy", "l7_rule").(string)
							if r != tc.rule {
								t.Errorf("%s: event rule %q, want %q", tc.name, r, tc.rule)
							}
							return true
						}
					}
					return false
				})
				// The codes are compared in order below: the next case
				// starts only once the upstream has this one's close (the
				// event can come first, and a starved upstream goroutine
				// recorded two cases' codes swapped, 2 runs in 40 under load).
				waitFor(t, tc.name+"'s close upstream", func() bool { _, _, codes := up.received(); return len(codes) == i+1 })
			}
			waitFor(t, "the upstream's close codes", func() bool { _, _, codes := up.received(); return len(codes) == len(cases) })
			msgs, exts, codes := up.received()
			for _, m := range msgs {
				if m != `{"type":"subscribe","channel":"ticker.btc"}` && m != "ping" {
					t.Errorf("the upstream received a refused message %q", m)
				}
			}
			if len(msgs) != 2*len(cases) {
				t.Errorf("the upstream received %d messages, want %d", len(msgs), 2*len(cases))
			}
			for i, x := range exts {
				if x != "" {
					t.Errorf("upgrade %d offered the upstream extensions %q: permessage-deflate must be negotiated away", i, x)
				}
			}
			for i, code := range codes {
				if code != cases[i].code {
					t.Errorf("upstream close %d: code %d, want %d", i, code, cases[i].code)
				}
			}
		})
	}
}

// A compressed frame (RSV1) on a connection whose extensions were
// negotiated away is no valid frame: the connection closes, nothing
// reaches the upstream. A request to the endpoint that is no upgrade
// is refused (websocket_upgrade_required), and an upgrade outside the
// endpoint's REST rules is refused as before.
func TestWebSocketEndpointRefusals(t *testing.T) {
	e, up := newWSEnv(t, "enforce")
	c, _ := dialWS(t, e, false, "/stream", "permessage-deflate")
	f := wsFrame(websocket.OpText, true, true, []byte("ping"))
	f[0] |= 0x40 // RSV1
	c.w.Write(f)
	if n, _ := io.Copy(io.Discard, c.r); n != 0 {
		t.Errorf("%d bytes came back after a compressed frame", n)
	}
	c.close()
	if _, status := dialWS(t, e, false, "/other", ""); status != 403 {
		t.Errorf("upgrade outside the rules: %d, want 403", status)
	}
	cl := e.client(false)
	resp, err := cl.Get(e.url("/stream"))
	if err != nil {
		t.Fatal(err)
	}
	if d := readDenial(t, resp); resp.StatusCode != 403 || d.Reason != websocket.ReasonUpgradeRequired {
		t.Errorf("plain GET: %d %q, want 403 %s", resp.StatusCode, d.Reason, websocket.ReasonUpgradeRequired)
	}
	if msgs, _, _ := up.received(); len(msgs) != 0 {
		t.Errorf("the upstream received %q", msgs)
	}
}

// Under enforcement: audit a refused message is relayed (and logged).
func TestWebSocketAuditRelays(t *testing.T) {
	e, up := newWSEnv(t, "audit")
	c, _ := dialWS(t, e, true, "/stream", "")
	defer c.close()
	c.w.Write(wsFrame(websocket.OpText, true, true, []byte("not allowed")))
	if op, _, pay, err := readWSFrame(c.r); err != nil || op != websocket.OpText || string(pay) != "not allowed" {
		t.Fatalf("audit: %d %q %v", op, pay, err)
	}
	if msgs, _, _ := up.received(); len(msgs) != 1 || !strings.Contains(msgs[0], "not allowed") {
		t.Fatalf("upstream got %q", msgs)
	}
}

func poolOf(ca *tlsca.Authority) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Certificate())
	return p
}
