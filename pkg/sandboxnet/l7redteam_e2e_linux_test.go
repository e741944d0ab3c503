//go:build linux

package sandboxnet

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/palisade-sandbox/palisade/pkg/l7/websocket"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Issue #25's regressions, each from inside a real sandbox against an
// upstream in the test internet that records what it receives:
//  1. a Go crypto/tls server that ignores warning alerts, behind a
//     passthrough tunnel allowed for pass.test;
//  2. a Python wsgiref app with X-HTTP-Method-Override middleware;
//  3. an upstream that answers a WebSocket upgrade with 101 and keeps
//     speaking HTTP;
//  4. an h2 upstream that records request trailers;
//  5. an HTTPS app behind deny rules, for the spellings servers fold;
//  6. denial events: a burst of different denials on one keep-alive
//     connection, an h2 stream the proxy's HTTP/2 server refuses, a
//     malformed head, a flood of refused policy DNS names.
// Against the build before the fixes each of them fails.

const (
	rtPassPort = 8444 // the alert-ignoring TLS server (passthrough)
	rtAppPort  = 8445 // the recording HTTPS app (inspected, h2 and HTTP/1.1)
	rtWSGIPort = 8081 // the wsgiref app (inspected, plaintext)
)

const rtNetwork = `  passthrough:
    endpoints:
      - host: pass.test
        port: 8444
    binaries:
      - path: @HELPER@
  app:
    endpoints:
      - host: app.test
        port: 8445
        protocol: rest
        access: read-only
        deny_rules:
          - {method: GET, path: /admin/**}
          - {method: GET, path: /secret}
          - {method: GET, path: "/api/**", query: {debug: "true"}}
          - {method: GET, path: "/php/**", query: {debug_: "true"}}
      - host: wsgi.test
        port: 8081
        protocol: rest
        access: read-only
    binaries:
      - path: /usr/bin/curl
      - path: /usr/bin/python3*
      - path: @HELPER@
  tcpecho:
    endpoints:
      - host: echo.test
        port: 7007
        protocol: tcp
    binaries:
      - path: /usr/bin/python3*
`

// redLab is the lab with the recording upstreams and the helper client.
type redLab struct {
	*lab
	helper, helperDir string
	mu                sync.Mutex
	seen              []string // what the upstreams received, in order
}

func (l *redLab) record(s string) {
	l.mu.Lock()
	l.seen = append(l.seen, s)
	l.mu.Unlock()
}

func (l *redLab) received() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

func (l *redLab) reset() {
	l.mu.Lock()
	l.seen = nil
	l.mu.Unlock()
	os.Remove(l.events)
}

func newRedLab(t *testing.T) *redLab {
	t.Helper()
	testutil.RequireCommand(t, "python3")
	testutil.RequireCommand(t, "nsenter")
	l := &redLab{lab: newLab(t, "")}
	d, err := os.MkdirTemp("/var/tmp", "palisade-rt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	l.helperDir, l.helper = d, filepath.Join(d, "rtclient")
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.helper, self, 0o755); err != nil {
		t.Fatal(err)
	}
	server := l.inet.V4[0].String()
	l.hosts = l.inet.HostsFile(map[string]string{
		"pass.test": server, "evil.test": server, "app.test": server, "wsgi.test": server, "echo.test": server,
	})
	head := labPolicy[:strings.Index(labPolicy, "  web:")]
	head = strings.Replace(head, "/etc]", "/etc, "+l.helperDir+"]", 1)
	l.write(head + strings.ReplaceAll(rtNetwork, "@HELPER@", l.helper))
	l.servePassthrough()
	l.serveApp()
	l.serveWSGI()
	return l
}

// servePassthrough is a Go crypto/tls server for any name: it ignores a
// warning alert before the ClientHello (as crypto/tls does) and records
// the server name of every handshake it completes.
func (l *redLab) servePassthrough() {
	ln, err := l.inet.Listen("tcp", fmt.Sprintf(":%d", rtPassPort))
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { ln.Close() })
	cfg := l.inet.TLSConfig()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				tc := tls.Server(c, cfg)
				if tc.Handshake() == nil {
					l.record("handshake " + tc.ConnectionState().ServerName)
					io.WriteString(tc, "hello\n")
				}
			}()
		}
	}()
}

// serveApp is the recording HTTPS app: every request it reads (method,
// path, raw query, trailers), the WebSocket endpoints, and a GET answer.
func (l *redLab) serveApp() {
	ln, err := l.inet.Listen("tcp", fmt.Sprintf(":%d", rtAppPort))
	if err != nil {
		l.t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws/", func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		accept := websocket.AcceptKey(r.Header.Get("Sec-WebSocket-Key"))
		if r.URL.Path == "/ws/liar" {
			accept = "x"
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n")
		brw.Flush()
		// It never switches: it goes on reading HTTP requests.
		c.SetDeadline(time.Now().Add(20 * time.Second))
		for {
			req, err := http.ReadRequest(brw.Reader)
			if err != nil {
				return
			}
			l.record("after-101 " + req.Method + " " + req.URL.Path)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s := r.Method + " " + r.URL.EscapedPath()
		if r.URL.RawQuery != "" {
			s += "?" + r.URL.RawQuery
		}
		for k, vv := range r.Trailer {
			s += " trailer:" + k + "=" + strings.Join(vv, ",")
		}
		l.record(s)
		io.WriteString(w, "ok")
	})
	srv := &http.Server{Handler: mux, TLSConfig: l.inet.TLSConfig(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(ln, srv.TLSConfig))
	l.t.Cleanup(func() { srv.Close() })
}

// wsgiApp is a WSGI app behind the usual method-override middleware
// (the one the red team used): it runs the method the override
// names and records what it ran.
const wsgiApp = `import socketserver, sys
from wsgiref.simple_server import make_server, WSGIRequestHandler, WSGIServer
log = open(sys.argv[3], "a", buffering=1)
def override(app):
    def mw(environ, start):
        m = environ.get("HTTP_X_HTTP_METHOD_OVERRIDE")
        if m:
            environ["REQUEST_METHOD"] = m.upper()
        return app(environ, start)
    return mw
def app(environ, start):
    log.write("%s %s\n" % (environ["REQUEST_METHOD"], environ["PATH_INFO"]))
    start("200 OK", [("Content-Type", "text/plain")])
    return [environ["REQUEST_METHOD"].encode()]
class Quiet(WSGIRequestHandler):
    def log_message(self, *a):
        pass
class Server(WSGIServer):
    def server_bind(self):  # without HTTPServer's reverse lookup of its address
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]
        self.setup_environ()
make_server(sys.argv[1], int(sys.argv[2]), override(app), server_class=Server, handler_class=Quiet).serve_forever()
`

func (l *redLab) serveWSGI() {
	dir := l.t.TempDir()
	app := filepath.Join(dir, "app.py")
	os.WriteFile(app, []byte(wsgiApp), 0o644)
	logf := filepath.Join(dir, "wsgi.log")
	cmd := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(os.Getpid())+"/fd/"+strconv.Itoa(int(l.inet.Netns())),
		"--", "python3", app, l.inet.V4[0].String(), strconv.Itoa(rtWSGIPort), logf)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	stop := make(chan struct{})
	l.t.Cleanup(func() { close(stop); cmd.Process.Kill(); cmd.Wait() })
	// Its log is what the app ran; it joins the recorded list on read.
	go func() {
		var off int64
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			b, _ := os.ReadFile(logf)
			if int64(len(b)) > off {
				for _, line := range strings.Split(strings.TrimSpace(string(b[off:])), "\n") {
					l.record("wsgi " + line)
				}
				off = int64(len(b))
			}
		}
	}()
	waitListening(l.t, l.inet.V4[0].String(), rtWSGIPort, l.inet.Do)
}

// waitListening waits (bounded) until the namespace's port accepts.
func waitListening(t *testing.T, host string, port int, do func(func() error) error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if do(func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}) == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s:%d never listened", host, port)
}

// run runs script in a sandbox with a fresh events file and returns its
// results once the sandbox (and its proxy, which flushes the folded
// denials) ended.
func (l *redLab) run(script string) map[string]string {
	l.t.Helper()
	l.reset()
	cmd := exec.Command(l.sup, "run", "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--upstream-ca-bundle", l.inet.CAFile(), "--workdir", l.wd,
		"--env", "RT_HELPER="+l.helper, "--", "/bin/sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	l.t.Logf("sandbox output:\n%s", out)
	if err != nil {
		l.t.Logf("sandbox stderr:\n%s", stderr.String())
		l.t.Fatalf("sandbox run: %v", err)
	}
	return results(out)
}

// reasons counts the events of each unmapped reason (any class).
func (l *redLab) eventsWhere(match func(map[string]any) bool) []map[string]any {
	var out []map[string]any
	for _, ev := range l.eventLines() {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func reasonIs(reason string) func(map[string]any) bool {
	return func(ev map[string]any) bool {
		u, _ := ev["unmapped"].(map[string]any)
		p, _ := u["egress_proxy"].(map[string]any)
		return p["reason"] == reason
	}
}

func (l *redLab) expectNotReceived(substr ...string) {
	l.t.Helper()
	for _, got := range l.received() {
		for _, s := range substr {
			if strings.Contains(got, s) {
				l.t.Errorf("the upstream received %q", got)
			}
		}
	}
}

// TestHelperRedTeamClient is the Go client the red-team scripts run in
// the sandbox (a copy of this test binary); it does nothing unless
// RT_CASE is set, and prints "name=value" results.
func TestHelperRedTeamClient(t *testing.T) {
	c := os.Getenv("RT_CASE")
	if c == "" {
		return
	}
	switch c {
	case "sni-alert":
		fmt.Printf("sni_alert=%s\n", rtSNIAlert())
	case "ws-nonswitch":
		fmt.Printf("ws=%s\n", rtWebSocket("/ws/chat"))
		fmt.Printf("ws_liar=%s\n", rtWebSocket("/ws/liar"))
	case "h2":
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: sandboxRoots()}}
		if err := http2.ConfigureTransport(tr); err != nil {
			fmt.Printf("h2_trailer=error %v\n", err)
			return
		}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
		fmt.Printf("h2_trailer=%s\n", rtH2(cl, "/upload", http.Header{"X-Http-Method-Override": {"DELETE"}}))
		fmt.Printf("h2_after=%s\n", rtH2(cl, "/after", nil))
		fmt.Printf("h2_refused=%s\n", rtH2Refused())
	}
}

func proxyURL() *url.URL {
	u, _ := url.Parse(os.Getenv("HTTPS_PROXY"))
	return u
}

// rtConnect opens a CONNECT tunnel to target through the sandbox's proxy.
func rtConnect(target string) (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", proxyURL().Host, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT %s: %v %v", target, resp, err)
	}
	return c, br, nil
}

// rtSNIAlert sends a TLS warning alert, then a ClientHello for
// evil.test, on a tunnel allowed for pass.test.
func rtSNIAlert() string {
	c, br, err := rtConnect(fmt.Sprintf("pass.test:%d", rtPassPort))
	if err != nil {
		return "error " + err.Error()
	}
	defer c.Close()
	c.Write([]byte{0x15, 3, 3, 0, 2, 1, 90}) // warning: user_canceled
	tc := tls.Client(&rtConn{Conn: c, r: br}, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		return "refused"
	}
	return "handshake " + tc.ConnectionState().ServerName
}

type rtConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *rtConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func sandboxRoots() *x509.CertPool {
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(os.Getenv("SSL_CERT_FILE"))
	pool.AppendCertsFromPEM(b)
	return pool
}

// rtWebSocket upgrades path on the recording app and, after a 101,
// sends raw HTTP requests as an upstream that never switched would read
// them.
func rtWebSocket(path string) string {
	c, br, err := rtConnect(fmt.Sprintf("app.test:%d", rtAppPort))
	if err != nil {
		return "error " + err.Error()
	}
	defer c.Close()
	tc := tls.Client(&rtConn{Conn: c, r: br}, &tls.Config{ServerName: "app.test", RootCAs: sandboxRoots(), NextProtos: []string{"http/1.1"}})
	fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: app.test:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path, rtAppPort)
	tbr := bufio.NewReader(tc)
	resp, err := http.ReadResponse(tbr, nil)
	if err != nil {
		return "error " + err.Error()
	}
	if resp.StatusCode != 101 {
		return strconv.Itoa(resp.StatusCode)
	}
	fmt.Fprintf(tc, "DELETE /item HTTP/1.1\r\nHost: app.test\r\n\r\nGET /admin/x HTTP/1.1\r\nHost: app.test\r\n\r\n")
	n, _ := io.Copy(io.Discard, tbr)
	return fmt.Sprintf("101 then %d bytes", n)
}

// rtH2 GETs path over h2, with a body and the given trailers when there
// are trailers (read-only allows a GET; a body rides on any method).
func rtH2(cl *http.Client, path string, trailer http.Header) string {
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://app.test:%d%s", rtAppPort, path), nil)
	if trailer != nil {
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader("body")), -1
		req.Trailer = trailer
	}
	resp, err := cl.Do(req)
	if err != nil {
		return "error"
	}
	resp.Body.Close()
	return fmt.Sprintf("%d %s", resp.StatusCode, resp.Proto)
}

// rtH2Refused sends, on one h2 connection, a DELETE whose header name is
// in upper case (a protocol error the proxy's HTTP/2 server answers with
// RST_STREAM, calling no handler) and then a GET; it returns whether the
// first was reset and the second's status.
func rtH2Refused() string {
	c, br, err := rtConnect(fmt.Sprintf("app.test:%d", rtAppPort))
	if err != nil {
		return "error " + err.Error()
	}
	defer c.Close()
	tc := tls.Client(&rtConn{Conn: c, r: br}, &tls.Config{ServerName: "app.test", RootCAs: sandboxRoots(), NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		return fmt.Sprintf("error %v", err)
	}
	io.WriteString(tc, http2.ClientPreface)
	fr := http2.NewFramer(tc, tc)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	send := func(id uint32, method, path string, extra ...string) {
		hb.Reset()
		f := append([]string{":method", method, ":path", path, ":scheme", "https", ":authority", fmt.Sprintf("app.test:%d", rtAppPort)}, extra...)
		for i := 0; i < len(f); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: f[i], Value: f[i+1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	}
	send(1, "DELETE", "/refused?token=querysecret", "X-Bad", "1")
	send(3, "GET", "/after-refused")
	dec := hpack.NewDecoder(4096, nil)
	reset, status := false, ""
	for status == "" {
		f, err := fr.ReadFrame()
		if err != nil {
			return fmt.Sprintf("error %v", err)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			reset = reset || f.StreamID == 1
		case *http2.HeadersFrame:
			if fields, _ := dec.DecodeFull(f.HeaderBlockFragment()); f.StreamID == 3 && len(fields) > 0 {
				status = fields[0].Value
			}
		}
	}
	return fmt.Sprintf("reset %v then %s", reset, status)
}

// 1. The passthrough SNI check reads records: an alert before the
// ClientHello does not let a handshake for another name through.
func TestRedTeamSNIAlertBeforeClientHello(t *testing.T) {
	l := newRedLab(t)
	r := l.run("RT_CASE=sni-alert $RT_HELPER -test.run='^TestHelperRedTeamClient$'")
	if r["sni_alert"] != "refused" {
		t.Errorf("alert then ClientHello for evil.test: %q, want refused", r["sni_alert"])
	}
	l.expectNotReceived("handshake")
	if n := len(l.eventsWhere(reasonIs("client_hello_not_first"))); n != 1 {
		t.Errorf("%d client_hello_not_first events, want 1", n)
	}
}

// 2. An override spelt with underscores reaches a wsgiref app as the
// dash spelling: it is decided as the method it names, forwarded and
// inside a tunnel.
func TestRedTeamUnderscoreMethodOverride(t *testing.T) {
	l := newRedLab(t)
	r := l.run(`
c() { n=$1; shift; printf '%s=' "$n"; curl -s -o /dev/null -w '%{http_code}' --max-time 20 "$@"; echo; }
c forwarded -H 'X_HTTP_Method_Override: DELETE' http://wsgi.test:8081/item
c tunnel --proxytunnel -H 'X_HTTP_Method_Override: DELETE' http://wsgi.test:8081/item
c lower -H 'x_http_method_override: delete' http://wsgi.test:8081/item
c plain http://wsgi.test:8081/ok
`)
	for _, k := range []string{"forwarded", "tunnel", "lower"} {
		if r[k] != "403" {
			t.Errorf("%s: %q, want 403", k, r[k])
		}
	}
	if r["plain"] != "200" {
		t.Errorf("plain GET: %q", r["plain"])
	}
	time.Sleep(200 * time.Millisecond) // the app's log is polled
	l.expectNotReceived("wsgi DELETE")
}

// 3. A 101 that does not answer the key is not relayed; after a real
// one, raw HTTP to an upstream that never switched does not reach it.
func TestRedTeamWebSocketWithoutSwitch(t *testing.T) {
	l := newRedLab(t)
	r := l.run("RT_CASE=ws-nonswitch $RT_HELPER -test.run='^TestHelperRedTeamClient$'")
	if r["ws"] != "101 then 0 bytes" {
		t.Errorf("raw HTTP after 101: %q, want the connection closed", r["ws"])
	}
	if r["ws_liar"] != "502" {
		t.Errorf("101 with a wrong accept: %q, want 502", r["ws_liar"])
	}
	l.expectNotReceived("after-101")
	if n := len(l.eventsWhere(reasonIs("websocket_frame_invalid"))); n != 1 {
		t.Errorf("%d websocket_frame_invalid events, want 1", n)
	}
	if n := len(l.eventsWhere(reasonIs("websocket_handshake_invalid"))); n != 1 {
		t.Errorf("%d websocket_handshake_invalid events, want 1", n)
	}
}

// 4 and 6 (h2): request trailers never reach the upstream; a stream the
// proxy's HTTP/2 server refuses is an event naming it, and the
// connection's next request works.
func TestRedTeamH2TrailersAndRefusedStreams(t *testing.T) {
	l := newRedLab(t)
	r := l.run("RT_CASE=h2 $RT_HELPER -test.run='^TestHelperRedTeamClient$'")
	if r["h2_trailer"] != "200 HTTP/2.0" || r["h2_after"] != "200 HTTP/2.0" || r["h2_refused"] != "reset true then 200" {
		t.Errorf("h2: trailer %q, after %q, refused %q", r["h2_trailer"], r["h2_after"], r["h2_refused"])
	}
	if got := l.received(); len(got) != 3 || got[0] != "GET /upload" {
		t.Errorf("the upstream received %q, want GET /upload without its trailer, /after and /after-refused", got)
	}
	l.expectNotReceived("trailer:", "/refused")
	refused := l.eventsWhere(reasonIs("h2_stream_refused"))
	if len(refused) != 1 {
		t.Fatalf("%d h2_stream_refused events, want 1", len(refused))
	}
	b, _ := json.Marshal(refused[0]["http_request"])
	if !strings.Contains(string(b), `"http_method":"DELETE"`) || !strings.Contains(string(b), `"path":"/refused"`) || strings.Contains(string(b), "querysecret") {
		t.Errorf("refused stream's event: %s", b)
	}
}

// 5. Spellings a server folds reach no upstream the rules deny.
func TestRedTeamFoldedSpellings(t *testing.T) {
	l := newRedLab(t)
	r := l.run(`
B=https://app.test:8445
c() { n=$1; shift; printf '%s=' "$n"; curl -s --path-as-is -o /tmp/b -w '%{http_code}' --max-time 20 "$@"; printf ' %s\n' "$(tr -d '\n' < /tmp/b)"; }
c trailing_dot "$B/admin./x"
c trailing_space "$B/admin%20/x"
c long_s "$B/%C5%BFecret"
c value_case "$B/api/x?debug=TRUE"
c php_dot "$B/php/x?debug.=true"
c php_plus "$B/php/x?debug+=true"
c service_case "$B/repo.git/info/refs?Service=git-receive-pack"
c allowed "$B/public/x?debug=false"
`)
	for _, k := range []string{"trailing_dot", "trailing_space", "long_s", "value_case", "php_dot", "php_plus", "service_case"} {
		if !strings.HasPrefix(r[k], `403 {"error":"policy_denied"`) {
			t.Errorf("%s: %q, want 403 policy_denied", k, r[k])
		}
	}
	if !strings.HasPrefix(r["allowed"], "200 ") {
		t.Errorf("allowed: %q", r["allowed"])
	}
	if got := l.received(); len(got) != 1 || !strings.HasPrefix(got[0], "GET /public/x") {
		t.Errorf("the upstream received %q, want the allowed request only", got)
	}
}

// 6. Denial events keep detail: different refused requests on one
// keep-alive connection are each named, the count event lists the
// folded ones, the connection stays usable; a malformed head names what
// parsed; a flood of refused policy DNS names is folded with a count.
func TestRedTeamDenialEventDetail(t *testing.T) {
	l := newRedLab(t)
	r := l.run(`python3 - <<'PY'
import http.client, os, socket, ssl, struct
u = os.environ["HTTPS_PROXY"].split("//")[1]
host, port = u.split(":")
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=20)
c.set_tunnel("app.test", 8445)
codes = []
for m, p in [("PROPFIND", "/x"), ("TRACE", "/x"), ("GET", "/admin/a"), ("DELETE", "/public/ok"),
             ("DELETE", "/public/ok"), ("GET", "/admin/a"), ("DELETE", "/public/ok"), ("GET", "/public/ok")]:
    c.request(m, p)
    resp = c.getresponse(); resp.read()
    codes.append(str(resp.status))
print("codes=" + " ".join(codes))
s = socket.create_connection((host, int(port)), timeout=20)
s.sendall(b"CONNECT app.test:8445 HTTP/1.1\r\nHost: app.test:8445\r\n\r\n")
s.recv(4096)
t = ctx.wrap_socket(s, server_hostname="app.test")
t.sendall(b"DELETE /items/7?token=querysecret HTTP/1.1\r\nHost: app.test:8445\r\nX-A: a\r\n b\r\n\r\n")
print("malformed=" + t.recv(4096).split(b"\r\n")[0].decode())
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
d.settimeout(2)
refused = 0
for i in range(300):
    name = b"".join(bytes([len(x)]) + x for x in [b"c%03d" % i, b"exfil", b"test"]) + b"\x00"
    d.sendto(struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) + name + b"\x00\x01\x00\x01", (ns, 53))
    try:
        if d.recv(512)[3] & 0xf == 3:
            refused += 1
    except OSError:
        pass
print("dns_refused=%d" % refused)
PY`)
	if r["codes"] != "403 403 403 403 403 403 403 200" {
		t.Errorf("codes on one keep-alive connection: %q", r["codes"])
	}
	if !strings.HasPrefix(r["malformed"], "HTTP/1.1 400") {
		t.Errorf("malformed: %q", r["malformed"])
	}
	if r["dns_refused"] != "300" {
		t.Errorf("refused (NXDOMAIN) DNS answers: %q", r["dns_refused"])
	}
	// Each distinct refused request is an event of its own; the folded
	// ones are listed in a count event written when the proxy stopped.
	var named []string
	var listed string
	for _, ev := range l.eventsWhere(func(ev map[string]any) bool { return ev["class_uid"] == float64(4002) && ev["action"] == "Denied" }) {
		req, _ := ev["http_request"].(map[string]any)
		u, _ := req["url"].(map[string]any)
		m := req["http_method"]
		if m == nil {
			m = ev["activity_name"]
		}
		if ev["count"] == nil {
			named = append(named, fmt.Sprintf("%v %v", m, u["path"]))
		} else {
			b, _ := json.Marshal(ev["unmapped"].(map[string]any)["egress_proxy"].(map[string]any)["denials"])
			listed = string(b)
		}
	}
	want := "[PROPFIND /x TRACE /x GET /admin/a DELETE /public/ok DELETE /items/7]"
	if fmt.Sprint(named) != want {
		t.Errorf("denials named %v, want %s", named, want)
	}
	if listed != `[{"count":2,"method":"DELETE","path":"/public/ok","reason":"l7_access_denied"},{"count":1,"method":"GET","path":"/admin/a","reason":"l7_deny_rule"}]` {
		t.Errorf("count event lists %s", listed)
	}
	// The flood of refused names: 16 named, one count for the rest.
	var dnsEvents, dnsCount int
	for _, ev := range l.eventLines() {
		if ev["status_code"] == policydns.StatusDenied {
			dnsEvents++
			if c, ok := ev["count"].(float64); ok {
				dnsCount += int(c)
			} else {
				dnsCount++
			}
		}
	}
	if dnsEvents != 17 || dnsCount != 300 {
		t.Errorf("refused DNS names: %d events counting %d, want 17 counting 300", dnsEvents, dnsCount)
	}
	for _, ev := range l.eventLines() {
		if b, _ := json.Marshal(ev); strings.Contains(string(b), "querysecret") {
			t.Errorf("an event carries a query: %s", b)
		}
	}
}
