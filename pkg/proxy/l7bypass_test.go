package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Forwarded http:// requests to a rest endpoint are held to the same
// reading as inspected ones: a query that does not parse is refused (it
// was matched with its unparsable pairs dropped, and sent upstream as it
// was, so "?x=1;action=delete" passed a deny rule on action=delete for
// servers that split on ";"), and a POST is a git fetch only when shaped
// like one.
func TestForwardL7QueryAndGitShape(t *testing.T) {
	spy := newHeaderSpy(t)
	env := newEnv(t, restPolicy(spy.port, "read-only",
		"        deny_rules:\n          - method: GET\n            path: /api/**\n            query:\n              action: delete\n"))
	for _, c := range []struct {
		name, req string
		status    int
		reason    string
	}{
		{"semicolon-separated query", "GET http://allowed.test:{P}/api/x?x=1;action=delete HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonInvalidQuery},
		{"bad escape beside a denied pair", "GET http://allowed.test:{P}/api/x?y=%zz&action=delete HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonInvalidQuery},
		{"repeated parameter", "GET http://allowed.test:{P}/api/x?action=list&action=delete HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 403, policy.L7DeniedByRule},
		{"method override field", "GET http://allowed.test:{P}/x HTTP/1.1\r\nHost: allowed.test\r\nX-HTTP-Method: DELETE\r\n\r\n", 403, policy.L7AccessDenied},
		{"git-upload-pack suffix on an API POST", "POST http://allowed.test:{P}/api/v4/projects/1/repository/files/git-upload-pack HTTP/1.1\r\nHost: allowed.test\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", 403, policy.L7AccessDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectRefusal(t, env.dial(), strings.ReplaceAll(c.req, "{P}", fmt.Sprint(spy.port)), c.status, c.reason)
		})
	}
	spy.mu.Lock()
	n := spy.count
	spy.mu.Unlock()
	if n != 0 {
		t.Fatalf("refused requests reached the upstream: %d", n)
	}
	// git's own fetch POST still goes through.
	conn := env.dial()
	fmt.Fprintf(conn, "POST http://allowed.test:%d/r.git/git-upload-pack HTTP/1.1\r\nHost: allowed.test\r\nContent-Type: %s\r\nContent-Length: 4\r\n\r\n0000",
		spy.port, policy.GitUploadPackRequestType)
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("git fetch POST: %v %v", resp, err)
	}
}

// expectRefusal sends one raw request on c and checks the answer's
// status and JSON reason.
func expectRefusal(t *testing.T, c io.ReadWriter, req string, status int, reason string) {
	t.Helper()
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != status || body["reason"] != reason {
		t.Fatalf("%d %v, want %d %s", resp.StatusCode, body, status, reason)
	}
}

// clientHello returns the first flight of a Go TLS client asking for
// serverName: one record holding its ClientHello.
func clientHello(t *testing.T, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		tls.Client(b, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
		b.Close()
	}()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(a, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	if _, err := io.ReadFull(a, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// twoNameHello rewrites a one-record ClientHello for first so that its
// server_name list holds first and then second. Go's parser refuses a
// second host_name; OpenSSL reads the first and ignores the rest.
func twoNameHello(t *testing.T, first, second string) []byte {
	t.Helper()
	rec := clientHello(t, first)
	u16 := func(b []byte) int { return int(binary.BigEndian.Uint16(b)) }
	put16 := func(b []byte, v int) { binary.BigEndian.PutUint16(b, uint16(v)) }
	i := 5 + 4 + 2 + 32 // record header, handshake header, version, random
	i += 1 + int(rec[i])
	i += 2 + u16(rec[i:])
	i += 1 + int(rec[i])
	extLenAt := i
	i += 2
	for i < len(rec) {
		typ, l := u16(rec[i:]), u16(rec[i+2:])
		if typ != 0 {
			i += 4 + l
			continue
		}
		add := append([]byte{0, 0, 0}, second...)
		put16(add[1:], len(second))
		end := i + 4 + l
		out := append(append(append([]byte{}, rec[:end]...), add...), rec[end:]...)
		put16(out[i+2:], l+len(add))                        // extension length
		put16(out[i+4:], u16(out[i+4:])+len(add))           // server_name list length
		put16(out[extLenAt:], u16(out[extLenAt:])+len(add)) // extensions length
		put16(out[3:], u16(out[3:])+len(add))               // record length
		hl := int(out[6])<<16 | int(out[7])<<8 | int(out[8]) + len(add)
		out[6], out[7], out[8] = byte(hl>>16), byte(hl>>8), byte(hl)
		return out
	}
	t.Fatal("no server_name extension")
	return nil
}

// A passthrough tunnel checks the ClientHello's server name before a
// byte goes upstream. A ClientHello the proxy cannot read, or one that
// does not arrive in time, must close the tunnel too: before, both were
// relayed unchecked, so a server name list [fronted, allowed] (which
// OpenSSL servers read as "fronted") or a stall after the first byte
// followed by a fronted ClientHello reached the upstream.
func TestPassthroughUnreadableClientHelloRefused(t *testing.T) {
	echo := newEchoServer(t)
	for _, c := range []struct {
		name  string
		send  func(net.Conn)
		limit time.Duration
	}{
		{"two server names", func(c net.Conn) { c.Write(twoNameHello(t, "fronted.example", "allowed.test")) }, 0},
		{"stall after the first byte", func(c net.Conn) {
			h := clientHello(t, "fronted.example")
			c.Write(h[:1])
			time.Sleep(600 * time.Millisecond)
			c.Write(h[1:])
		}, 300 * time.Millisecond},
		{"not a ClientHello", func(c net.Conn) { c.Write([]byte("\x16\x03\x01\x00\x04\x01\x00\x00\x00GET / HTTP/1.1\r\n\r\n")) }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := newEnv(t, policyYAML(echo.port, ""), func(cfg *Config) {
				if c.limit > 0 {
					cfg.Limits.HeadTimeout = c.limit
				}
			})
			conn, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			c.send(conn)
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, _ := br.Read(make([]byte, 1)); n != 0 {
				t.Fatal("the upstream received the ClientHello (its echo came back)")
			}
			evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(evs) != 1 || evs[0]["status_code"] != OutcomePolicyDenied || get(evs[0], "unmapped", "egress_proxy", "reason") != ReasonBadClientHello {
				t.Fatalf("events %v", evs)
			}
		})
	}
}

// h2Raw is a hand-driven HTTP/2 client on an inspected tunnel: it sends
// header blocks a library client would not (pseudo-header tricks) and
// reads each stream's status, or its reset.
type h2Raw struct {
	t   *testing.T
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
	id  uint32
}

func newH2Raw(t *testing.T, c net.Conn) *h2Raw {
	t.Helper()
	io.WriteString(c, http2.ClientPreface)
	h := &h2Raw{t: t, fr: http2.NewFramer(c, c), id: 1}
	h.enc = hpack.NewEncoder(&h.buf)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return h
}

// do sends one stream's headers (pairs of name, value; END_STREAM) and
// returns its :status, or -1 when the stream or connection was reset.
func (h *h2Raw) do(fields ...string) int {
	h.t.Helper()
	h.buf.Reset()
	for i := 0; i < len(fields); i += 2 {
		h.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	id := h.id
	h.id += 2
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return -1
	}
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return -1
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				n, _ := strconv.Atoi(f.PseudoValue("status"))
				return n
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return -1
			}
		case *http2.GoAwayFrame:
			return -1
		case *http2.PingFrame:
			if !f.IsAck() {
				h.fr.WritePing(true, f.Data)
			}
		}
	}
}

// Pseudo-header tricks on h2 never reach the upstream: CONNECT (plain
// and extended), "*" and relative :path, a missing :authority with a Host
// of another name, lower-case methods; the connection keeps serving
// allowed streams after each refusal.
func TestInspectedH2PseudoHeaderTricks(t *testing.T) {
	e := newInspectEnv(t, true, func(port int) string {
		return restPolicy(port, "read-only", "        deny_rules:\n          - method: GET\n            path: /admin/**\n")
	}, true)
	good := fmt.Sprintf("allowed.test:%d", e.up.port)
	base := func(method, path string) []string {
		return []string{":method", method, ":scheme", "https", ":authority", good, ":path", path}
	}
	for _, c := range []struct {
		name   string
		fields []string
	}{
		{"CONNECT", []string{":method", "CONNECT", ":authority", good}},
		{"extended CONNECT", append(base("CONNECT", "/admin/x"), ":protocol", "websocket")},
		{"OPTIONS *", base("OPTIONS", "*")},
		{"relative path", base("GET", "admin/x")},
		{"no authority, other Host", []string{":method", "GET", ":scheme", "https", ":path", "/a", "host", "other.test"}},
		{"authority and another Host", append(base("GET", "/admin/x"), "host", "other.test")},
		{"lower-case post", base("post", "/a")},
		{"two paths", append(base("GET", "/a"), ":path", "/admin/x")},
		{"path with fragment", base("GET", "/a#/../admin/x")},
		{"deny rule via dot segment", base("GET", "/a/../admin/x")},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newH2Raw(t, e.rawTLS("h2"))
			got := h.do(c.fields...)
			if got == 200 || got == 101 {
				t.Fatalf("refused stream answered %d", got)
			}
			// Any connection that survived the refusal still decides
			// the next stream on its own.
			if got != -1 {
				if n := h.do(base("GET", "/after")...); n != 200 {
					t.Fatalf("next stream after the refusal: %d", n)
				}
			}
		})
	}
	for _, r := range e.up.requests() {
		if !strings.HasPrefix(r, "GET /after ") {
			t.Errorf("refused stream reached the upstream: %q", r)
		}
	}
}

// pgTLSServer is a PostgreSQL-shaped TLS server: it answers an
// SSLRequest with 'S' and then runs a TLS handshake, recording the
// server names it was asked for (SNI-routing poolers pick the tenant
// database by that name).
type pgTLSServer struct {
	port  int
	mu    sync.Mutex
	names []string
}

func newPGTLSServer(t *testing.T) *pgTLSServer {
	t.Helper()
	ca, err := tlsca.New(tlsca.Options{Name: "pg-test"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &pgTLSServer{port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				req := make([]byte, 8)
				if _, err := io.ReadFull(c, req); err != nil || !bytes.Equal(req, pgSSLRequest) {
					return
				}
				c.Write([]byte{'S'})
				tc := tls.Server(c, &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
					s.mu.Lock()
					s.names = append(s.names, hi.ServerName)
					s.mu.Unlock()
					return ca.Leaf("allowed.test")
				}})
				if tc.Handshake() == nil {
					io.Copy(tc, tc)
				}
			}()
		}
	}()
	return s
}

func (s *pgTLSServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...)
}

// A passthrough tunnel's SNI check also covers TLS that starts after the
// client's first bytes: PostgreSQL's SSLRequest (eight bytes, then the
// server's 'S', then the ClientHello). Before, any first byte other than
// a handshake record turned the check off for the tunnel, so a
// ClientHello naming another tenant of an SNI-routed database service
// reached it.
func TestPassthroughSNIAfterPostgresSSLRequest(t *testing.T) {
	pg := newPGTLSServer(t)
	env := newEnv(t, policyYAML(pg.port, ""))
	open := func(sni string) error {
		conn, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", pg.port))
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		conn.Write(pgSSLRequest)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, err := br.ReadByte(); err != nil || b != 'S' {
			t.Fatalf("SSLRequest answer %q %v", b, err)
		}
		tc := tls.Client(&bufConn{Conn: conn, r: br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		defer tc.Close()
		return tc.Handshake()
	}
	if err := open("fronted.example"); err == nil {
		t.Fatal("TLS after an SSLRequest with a fronted server name was relayed")
	}
	evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
	if len(evs) != 1 || get(evs[0], "unmapped", "egress_proxy", "reason") != ReasonSNIMismatch {
		t.Fatalf("events %v", evs)
	}
	if err := open("allowed.test"); err != nil {
		t.Fatalf("TLS after an SSLRequest for the CONNECT host: %v", err)
	}
	if got := pg.seen(); len(got) != 1 || got[0] != "allowed.test" {
		t.Fatalf("server names the upstream saw: %q", got)
	}
}

// h2c with prior knowledge inside a plaintext inspected tunnel is not
// spoken: the preface is a malformed HTTP/1.1 head (400), and nothing
// reaches the upstream.
func TestInspectedPlaintextH2CPriorKnowledgeRefused(t *testing.T) {
	spy := newHeaderSpy(t)
	e := newEnv(t, restPolicy(spy.port, "read-only", ""), func(c *Config) { c.CA, _ = tlsca.New(tlsca.Options{}) })
	c, resp, br := e.connect(fmt.Sprintf("allowed.test:%d", spy.port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %d", resp.StatusCode)
	}
	fr := http2.NewFramer(c, nil)
	io.WriteString(c, http2.ClientPreface)
	fr.WriteSettings()
	r, err := http.ReadResponse(br, nil)
	if err != nil || r.StatusCode != 400 {
		t.Fatalf("h2c preface: %v %v", r, err)
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if spy.count != 0 {
		t.Fatalf("the upstream saw %d requests", spy.count)
	}
}
