package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

func TestConnectAllowedTunnelsAndReportsOnce(t *testing.T) {
	checkSocketLeaks(t)
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""))
	c, resp, br := env.connect(fmt.Sprintf("Allowed.TEST.:%d", echo.port))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("echo = %q, %v", line, err)
	}
	c.CloseWrite()
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after half-close: %q, %v", rest, err)
	}
	c.Close()
	evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
	if len(evs) != 1 {
		t.Fatalf("want exactly one network event for one connection, got %d", len(evs))
	}
	ev := evs[0]
	checks := map[string]any{
		"activity_id":                float64(ocsf.NetworkOpen),
		"status_code":                OutcomeAllowed,
		"action":                     "Allowed",
		"dst_endpoint.hostname":      "allowed.test",
		"dst_endpoint.ip":            "127.0.0.1",
		"dst_endpoint.port":          float64(echo.port),
		"actor.process.pid":          float64(4242),
		"actor.process.file.path":    curlExe,
		"firewall_rule.name":         "web",
		"firewall_rule.type":         FirewallRuleType,
		"unmapped.egress_proxy.kind": KindConnect,
	}
	for path, want := range checks {
		if got := get(ev, strings.Split(path, ".")...); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if got := get(ev, "actor", "process", "parent_process", "file", "path"); got != shellExe {
		t.Errorf("parent chain: %v", got)
	}
	if up := num(get(ev, "unmapped", "egress_proxy", "bytes_up")); up != 5 {
		t.Errorf("bytes_up = %d, want 5", up)
	}
	if got := env.dialer.Lookups(); len(got) != 1 || got[0] != "allowed.test" {
		t.Errorf("lookups = %v, want exactly [allowed.test] (canonical, once)", got)
	}
}

// denyCase is one way a request is refused.
type denyCase struct {
	name     string
	target   func(port int) string
	identity *Identity
	attrErr  error
	pin      map[string]string
	status   int
	body     func(port int) string
}

func TestDenialsAreStructuredAndNothingIsTunnelled(t *testing.T) {
	echo := newEchoServer(t)
	cases := []denyCase{
		{
			name:   "no endpoint",
			target: func(p int) string { return fmt.Sprintf("denied.test:%d", p) },
			status: 403,
			body: func(p int) string {
				return fmt.Sprintf(`{"error":"policy_denied","host":"denied.test","port":%d,"binary":"/usr/bin/curl","pid":242,"policy":"","reason":"no_matching_endpoint"}`, p)
			},
		},
		{
			name:   "wrong port",
			target: func(p int) string { return fmt.Sprintf("allowed.test:%d", p+1) },
			status: 403,
			body: func(p int) string {
				return fmt.Sprintf(`{"error":"policy_denied","host":"allowed.test","port":%d,"binary":"/usr/bin/curl","pid":242,"policy":"web","reason":"port_not_allowed"}`, p+1)
			},
		},
		{
			name:     "binary not allowed",
			target:   func(p int) string { return fmt.Sprintf("allowed.test:%d", p) },
			identity: identityOf(pythonExe, curlSHA, shellExe),
			status:   403,
			body: func(p int) string {
				return fmt.Sprintf(`{"error":"policy_denied","host":"allowed.test","port":%d,"binary":"/usr/bin/python3","pid":242,"policy":"web","reason":"binary_not_allowed"}`, p)
			},
		},
		{
			name:   "ssrf",
			target: func(p int) string { return fmt.Sprintf("internal.test:%d", p) },
			status: 403,
			body: func(p int) string {
				return fmt.Sprintf(`{"error":"ssrf_denied","host":"internal.test","port":%d,"binary":"/usr/bin/curl","pid":242,"policy":"web","reason":"loopback"}`, p)
			},
		},
		{
			name:   "identity mismatch",
			target: func(p int) string { return fmt.Sprintf("allowed.test:%d", p) },
			pin:    map[string]string{curlExe: otherSHA},
			status: 403,
			body: func(p int) string {
				return fmt.Sprintf(`{"error":"policy_denied","host":"allowed.test","port":%d,"binary":"/usr/bin/curl","pid":242,"policy":"","reason":"identity_mismatch"}`, p)
			},
		},
		{
			name:    "attribution failed",
			target:  func(p int) string { return fmt.Sprintf("allowed.test:%d", p) },
			attrErr: errors.New("no sandbox process holds the connection"),
			status:  403,
			body: func(p int) string {
				return fmt.Sprintf(`{"error":"policy_denied","host":"allowed.test","port":%d,"binary":"","pid":0,"policy":"","reason":"attribution_failed"}`, p)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := echo.accepted.Load()
			id := identityOf(curlExe, curlSHA, shellExe)
			if tc.identity != nil {
				id = tc.identity
			}
			attr := fixedIdentity(id)
			if tc.attrErr != nil {
				attr = &fakeAttributor{fn: func(_, _ netip.AddrPort) (*Identity, error) { return nil, tc.attrErr }}
			}
			pinner := &mapPinner{pins: tc.pin}
			env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Attributor = attr; c.Pinner = pinner })
			c, resp, br := env.connect(tc.target(echo.port))
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.body(echo.port) + "\n"; string(body) != want {
				t.Errorf("body\n got %s\nwant %s", body, want)
			}
			// Nothing follows the denial: the connection ends.
			c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
			if rest, _ := io.ReadAll(br); len(rest) != 0 {
				t.Errorf("bytes after the denial: %q", rest)
			}
			c.Close()
			if n := echo.accepted.Load() - before; n != 0 && tc.name != "ssrf" {
				t.Errorf("upstream saw %d connections for a denied request", n)
			}
			if n := echo.accepted.Load() - before; n != 0 {
				t.Errorf("upstream saw %d connections", n)
			}
			evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(evs) != 1 {
				t.Fatalf("network events: %d, want 1", len(evs))
			}
			var db DenialBody
			json.Unmarshal(body, &db)
			checkProxyStatus(t, resp, db)
			if got := get(evs[0], "status_code"); got != db.Error {
				t.Errorf("event status_code %v, body error %s", got, db.Error)
			}
			if got := get(evs[0], "action"); got != "Denied" {
				t.Errorf("event action %v", got)
			}
			if got, _ := get(evs[0], "status_detail").(string); !strings.Contains(got, db.Reason) {
				t.Errorf("event status_detail %q lacks reason %q", got, db.Reason)
			}
			findings := env.rec.ByClass(ocsf.ClassDetectionFinding)
			if tc.name == "identity mismatch" {
				findings = env.waitEvents(ocsf.ClassDetectionFinding, 1)
				if len(findings) != 1 || get(findings[0], "finding_info", "types") == nil {
					t.Fatalf("identity mismatch findings: %v", findings)
				}
				if got := get(findings[0], "actor", "process", "pid"); got != float64(4242) {
					t.Errorf("finding actor pid %v", got)
				}
			} else if len(findings) != 0 {
				t.Errorf("unexpected findings: %d", len(findings))
			}
		})
	}
}

func TestDeniedNameIsNeverResolved(t *testing.T) {
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""))
	for _, target := range []string{
		fmt.Sprintf("exfil-data-in-a-label.attacker.test:%d", echo.port),
		fmt.Sprintf("allowed.test:%d", echo.port+1), // allowed name, wrong port
	} {
		_, resp, _ := env.connect(target)
		if resp.StatusCode != 403 {
			t.Fatalf("%s: status %d", target, resp.StatusCode)
		}
	}
	c := env.dial()
	fmt.Fprintf(c, "GET http://exfil.attacker.test:%d/?q=1 HTTP/1.1\r\nHost: x\r\n\r\n", echo.port)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("forward deny: %v %v", resp, err)
	}
	if got := env.dialer.Lookups(); len(got) != 0 {
		t.Fatalf("denied names were looked up: %v", got)
	}
	// The spy does record lookups of allowed names.
	_, resp, _ = env.connect(fmt.Sprintf("a.wild.test:%d", echo.port))
	if resp.StatusCode != 200 {
		t.Fatalf("allowed wildcard: %d", resp.StatusCode)
	}
	if got := env.dialer.Lookups(); len(got) != 1 || got[0] != "a.wild.test" {
		t.Fatalf("lookups = %v", got)
	}
}

func TestBadRequests(t *testing.T) {
	env := newEnv(t, policyYAML(9, ""), func(c *Config) {
		c.Limits.MaxHeadBytes = 1024
		c.Limits.HeadTimeout = 300 * time.Millisecond
	})
	for _, tc := range []struct {
		name   string
		send   string
		status int
		reason string
		detail string
	}{
		{"head too large", "GET http://allowed.test/ HTTP/1.1\r\nX: " + strings.Repeat("a", 2000) + "\r\n\r\n", 431, ReasonHeadTooLarge, ""},
		{"https absolute form", "GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonMalformed, "use CONNECT"},
		{"origin form", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonMalformed, "origin-form"},
		{"connect without port", "CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonMalformed, "has no port"},
		{"connect in origin form", "CONNECT / HTTP/1.1\r\n\r\n", 400, ReasonMalformed, "host:port"},
		{"invalid host", "CONNECT bad!host:443 HTTP/1.1\r\n\r\n", 400, ReasonInvalidHost, ""},
		{"smuggling framing", "POST http://allowed.test:9/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400, ReasonMalformed, "both Transfer-Encoding and Content-Length"},
		{"http/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, ReasonMalformed, "protocol version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := env.dial()
			io.WriteString(c, tc.send)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			var eb errorBody
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error != OutcomeBadRequest || eb.Reason != tc.reason {
				t.Errorf("body %s, want error bad_request, reason %s", body, tc.reason)
			}
			if !strings.Contains(eb.Detail, tc.detail) {
				t.Errorf("detail %q, want it to mention %q", eb.Detail, tc.detail)
			}
		})
	}
	if got := env.dialer.Lookups(); len(got) != 0 {
		t.Errorf("bad requests caused lookups: %v", got)
	}
}

func TestSlowHeadersAreCutAtTheTimeout(t *testing.T) {
	checkSocketLeaks(t)
	const timeout = 300 * time.Millisecond
	env := newEnv(t, policyYAML(9, ""), func(c *Config) { c.Limits.HeadTimeout = timeout })
	var wg sync.WaitGroup
	const clients = 200
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The proxy's clock starts between these two: the cut
			// comes no sooner than the timeout after dialled, and no
			// later than a second past it after connected (a clock
			// restarted per byte would cut at about 1.9 s).
			dialled := time.Now()
			c, err := net.Dial("tcp", env.addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			connected := time.Now()
			// A slowloris client: one byte at a time, never finishing.
			go func() {
				for _, b := range []byte("GET http://allowed.test/ HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaa") {
					if _, err := c.Write([]byte{b}); err != nil {
						return
					}
					time.Sleep(30 * time.Millisecond)
				}
			}()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			sinceDial, sinceConnect := time.Since(dialled), time.Since(connected)
			if err != nil {
				errs <- fmt.Errorf("read response: %v", err)
				return
			}
			if resp.StatusCode != 408 {
				errs <- fmt.Errorf("status %d, want 408", resp.StatusCode)
			}
			if sinceDial < timeout-10*time.Millisecond || sinceConnect > timeout+time.Second {
				errs <- fmt.Errorf("cut %v after the dial, %v after connected, want about %v", sinceDial, sinceConnect, timeout)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, "connections to end", func() bool { return env.p.Counters().ActiveConnections == 0 })
	if got := env.p.Counters().BadRequests; got != clients {
		t.Errorf("bad requests counted %d, want %d", got, clients)
	}
}

// headerSpy is an upstream HTTP server that records what it received.
type headerSpy struct {
	mu     sync.Mutex
	header http.Header
	host   string
	uri    string
	body   string
	port   int
	count  int // requests served
}

func newHeaderSpy(t *testing.T) *headerSpy {
	t.Helper()
	s := &headerSpy{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.header, s.host, s.uri, s.body = r.Header.Clone(), r.Host, r.RequestURI, string(b)
		s.count++
		s.mu.Unlock()
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		if r.URL.Path == "/stream" {
			w.Write([]byte("part1\n"))
			w.(http.Flusher).Flush()
			w.Write([]byte("part2\n"))
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "got %s %s %d bytes\n", r.Method, r.URL.Path, len(b))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func TestForwardHTTPStripsHopByHopAndProxyHeaders(t *testing.T) {
	checkSocketLeaks(t)
	spy := newHeaderSpy(t)
	env := newEnv(t, policyYAML(spy.port, ""))
	c := env.dial()
	body := "hello body"
	fmt.Fprintf(c, "POST http://allowed.test:%d/submit?token=SECRET123 HTTP/1.1\r\n"+
		"Host: evil.example\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\n"+
		"Proxy-Connection: keep-alive\r\n"+
		"Connection: keep-alive, X-Hop\r\n"+
		"X-Hop: drop me\r\n"+
		"Keep-Alive: timeout=5\r\n"+
		"TE: trailers\r\n"+
		"Upgrade: websocket\r\n"+
		"X-Keep: kept\r\n"+
		"User-Agent: curl/8.0\r\n"+
		"Content-Length: %d\r\n\r\n%s", spy.port, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(got) != "got POST /submit 10 bytes\n" {
		t.Fatalf("response %d %q", resp.StatusCode, got)
	}
	if resp.Header.Get("X-Upstream") != "yes" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("Proxy-Authenticate") != "" {
		t.Errorf("response headers not filtered: %v", resp.Header)
	}
	if resp.Close {
		t.Errorf("a keep-alive request was answered with Connection: close")
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Keep-Alive", "Te", "Upgrade", "X-Forwarded-For", "Via", "Forwarded"} {
		if v := spy.header.Values(h); len(v) != 0 {
			t.Errorf("upstream received %s: %v", h, v)
		}
	}
	if spy.header.Get("X-Keep") != "kept" || spy.header.Get("User-Agent") != "curl/8.0" {
		t.Errorf("end-to-end headers lost: %v", spy.header)
	}
	if spy.host != fmt.Sprintf("allowed.test:%d", spy.port) {
		t.Errorf("upstream Host %q: the URL's authority must replace the client's Host", spy.host)
	}
	if spy.uri != "/submit?token=SECRET123" || spy.body != body {
		t.Errorf("upstream got %q %q", spy.uri, spy.body)
	}
	evs := env.waitEvents(ocsf.ClassHTTPActivity, 1)
	if len(evs) != 1 {
		t.Fatalf("http events: %d", len(evs))
	}
	if n := len(env.rec.ByClass(ocsf.ClassNetworkActivity)); n != 0 {
		t.Errorf("a forwarded request must yield one HTTP event, not also %d network events", n)
	}
	line, _ := json.Marshal(evs[0])
	for _, secret := range []string{"SECRET123", "c2VjcmV0", "hello body"} {
		if strings.Contains(string(line), secret) {
			t.Errorf("event leaks %q: %s", secret, line)
		}
	}
	if got := get(evs[0], "http_response", "code"); got != float64(200) {
		t.Errorf("http_response.code %v", got)
	}
	if got := get(evs[0], "http_request", "url", "path"); got != "/submit" {
		t.Errorf("url.path %v", got)
	}
}

func TestForwardHTTPChunkedBodyAndStreamedResponse(t *testing.T) {
	spy := newHeaderSpy(t)
	env := newEnv(t, policyYAML(spy.port, ""))
	c := env.dial()
	fmt.Fprintf(c, "PUT http://allowed.test:%d/stream HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", spy.port)
	br := bufio.NewReader(c)
	cont, err := http.ReadResponse(br, nil)
	if err != nil || cont.StatusCode != 100 {
		t.Fatalf("want 100 Continue first: %v %v", cont, err)
	}
	io.WriteString(c, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if string(got) != "part1\npart2\n" {
		t.Fatalf("streamed body %q", got)
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if spy.body != "hello world" {
		t.Errorf("upstream body %q", spy.body)
	}
	if spy.header.Get("Expect") != "" {
		t.Errorf("Expect forwarded")
	}
}

func TestHalfCloseBothDirections(t *testing.T) {
	checkSocketLeaks(t)
	// Upstream reads everything until EOF, then answers and closes: the
	// request only completes if the client's half-close travels upstream
	// while the upstream→client direction stays open.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				fmt.Fprintf(c, "read %d bytes", len(b))
			}()
		}
	}()
	env := newEnv(t, policyYAML(port, ""))
	c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	payload := strings.Repeat("x", 100000)
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "read 100000 bytes" {
		t.Fatalf("got %q", got)
	}
	c.Close()
	evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
	if len(evs) != 1 {
		t.Fatalf("events %d", len(evs))
	}
	if up, down := num(get(evs[0], "unmapped", "egress_proxy", "bytes_up")), num(get(evs[0], "unmapped", "egress_proxy", "bytes_down")); up != 100000 || down != len("read 100000 bytes") {
		t.Errorf("bytes up %d down %d", up, down)
	}
	waitFor(t, "tunnel gauge to drop", func() bool { return env.p.Counters().ActiveTunnels == 0 })
}

func TestPipelinedBytesAfterConnectReachUpstream(t *testing.T) {
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""))
	c := env.dial()
	// Head and first tunnel bytes in one write, as TLS clients do with
	// TCP fast open or eager writes.
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\n\r\nearly bytes", echo.port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	c.CloseWrite()
	got, _ := io.ReadAll(br)
	if string(got) != "early bytes" {
		t.Fatalf("echo %q", got)
	}
}

func TestTunnelIdleTimeout(t *testing.T) {
	echo := newEchoServer(t)
	const idle = time.Second
	env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Limits.IdleTimeout = idle })
	c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	// Activity keeps it open past the timeout...
	for i := 0; i < 6; i++ {
		time.Sleep(idle / 4)
		fmt.Fprintf(c, "%d\n", i)
		if l, err := br.ReadString('\n'); err != nil || l != strconv.Itoa(i)+"\n" {
			t.Fatalf("round %d: %q %v", i, l, err)
		}
	}
	// ...silence closes it.
	start := time.Now()
	_, err := br.ReadByte()
	if err == nil {
		t.Fatal("tunnel still open")
	}
	if e := time.Since(start); e < idle-100*time.Millisecond || e > idle+3*time.Second {
		t.Fatalf("idle close after %v, want about %v", e, idle)
	}
}

func TestConnectTimeoutIs504AndAFailEvent(t *testing.T) {
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Limits.ConnectTimeout = 200 * time.Millisecond })
	env.dialer.delay = 5 * time.Second
	start := time.Now()
	_, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	if resp.StatusCode != 504 {
		t.Fatalf("status %d, want 504", resp.StatusCode)
	}
	if e := time.Since(start); e > 2*time.Second {
		t.Fatalf("took %v", e)
	}
	evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
	if len(evs) != 1 || get(evs[0], "activity_id") != float64(ocsf.NetworkFail) || get(evs[0], "status_code") != OutcomeUpstreamFailed {
		t.Fatalf("want one Fail event: %v", evs)
	}
	// A refused upstream is a 502.
	env.dialer.delay = 0
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	env2 := newEnv(t, policyYAML(closedPort, ""))
	_, resp, _ = env2.connect(fmt.Sprintf("allowed.test:%d", closedPort))
	if resp.StatusCode != 502 {
		t.Fatalf("refused upstream: %d, want 502", resp.StatusCode)
	}
}

func TestConcurrentConnectionCap(t *testing.T) {
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Limits.MaxConns = 2 })
	var held []*net.TCPConn
	for i := 0; i < 2; i++ {
		c, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		held = append(held, c)
	}
	_, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	if resp.StatusCode != 503 {
		t.Fatalf("over the cap: %d, want 503", resp.StatusCode)
	}
	if got := env.p.Counters().OverCapacity; got != 1 {
		t.Errorf("over_capacity %d", got)
	}
	held[0].Close()
	waitFor(t, "a slot to free", func() bool { return env.p.Counters().ActiveConnections < 2 })
	_, resp, _ = env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	if resp.StatusCode != 200 {
		t.Fatalf("after a slot freed: %d", resp.StatusCode)
	}
}

func TestRepeatedDenialsAreRateLimitedWithCounts(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	env := newEnv(t, policyYAML(9, ""), func(c *Config) { c.Now = clock; c.Limits.DenyWindow = time.Hour })
	deny := func(host string) {
		t.Helper()
		c, resp, _ := env.connect(host + ":443")
		if resp.StatusCode != 403 {
			t.Fatalf("%s: %d", host, resp.StatusCode)
		}
		c.Close()
		waitFor(t, "connection end", func() bool { return env.p.Counters().ActiveConnections == 0 })
	}
	for i := 0; i < 25; i++ {
		deny("loop.test")
	}
	deny("other.test")
	evs := env.rec.ByClass(ocsf.ClassNetworkActivity)
	if len(evs) != 2 {
		t.Fatalf("25 denials of one key and 1 of another: %d events, want 2", len(evs))
	}
	if c := env.p.Counters(); c.EventsSuppressed != 24 || c.DeniedByReason["policy_denied/no_matching_endpoint"] != 26 {
		t.Fatalf("counters: suppressed %d, denied %v (every denial is counted even when not reported)", c.EventsSuppressed, c.DeniedByReason)
	}
	// After the window the next denial carries the count.
	advance(time.Hour)
	deny("loop.test")
	evs = env.rec.ByClass(ocsf.ClassNetworkActivity)
	if len(evs) != 3 {
		t.Fatalf("events %d, want 3", len(evs))
	}
	last := evs[2]
	if got := num(get(last, "count")); got != 25 {
		t.Fatalf("count %d, want 25 (24 suppressed + this one)", got)
	}
	if st, et := num(get(last, "start_time")), num(get(last, "end_time")); et-st != int(time.Hour.Milliseconds()) {
		t.Errorf("start_time..end_time spans %d ms, want the hour since the first suppressed denial", et-st)
	}
	// Suppressed denials with no later one are flushed with their count.
	deny("loop.test")
	deny("loop.test")
	advance(time.Hour)
	env.p.flushDenials(clock())
	evs = env.rec.ByClass(ocsf.ClassNetworkActivity)
	if len(evs) != 4 || num(get(evs[3], "count")) != 2 {
		t.Fatalf("flush: %d events, last count %v", len(evs), get(evs[len(evs)-1], "count"))
	}
}

func TestFenceRefusesAttributesAndResets(t *testing.T) {
	checkSocketLeaks(t)
	orig := netip.MustParseAddrPort("198.51.100.7:443")
	env := newEnv(t, policyYAML(9, ""), func(c *Config) {
		c.OriginalDst = func(*net.TCPConn) (netip.AddrPort, error) { return orig, nil }
	})
	attr := env.cfg.Attributor.(*fakeAttributor)
	var sawLocal netip.AddrPort
	var mu sync.Mutex
	inner := attr.fn
	attr.fn = func(client, local netip.AddrPort) (*Identity, error) {
		mu.Lock()
		sawLocal = local
		mu.Unlock()
		return inner(client, local)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- env.p.ServeFence(ln) }()
	start := time.Now()
	// The reset may arrive before connect(2) reports completion, so the
	// dial itself can fail with it; otherwise the first read does.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err == nil {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("want a reset, got %v", err)
	}
	if e := time.Since(start); e > time.Second {
		t.Fatalf("client failed after %v, want well under a second", e)
	}
	mu.Lock()
	if sawLocal != orig {
		t.Errorf("attribution asked about %v, want the original destination %v", sawLocal, orig)
	}
	mu.Unlock()
	refuse := env.waitEvents(ocsf.ClassNetworkActivity, 1)
	finding := env.waitEvents(ocsf.ClassDetectionFinding, 1)
	if len(refuse) != 1 || len(finding) != 1 {
		t.Fatalf("refuse %d, finding %d", len(refuse), len(finding))
	}
	if get(refuse[0], "activity_id") != float64(ocsf.NetworkRefuse) || get(refuse[0], "dst_endpoint", "ip") != "198.51.100.7" ||
		get(refuse[0], "actor", "process", "pid") != float64(4242) || get(refuse[0], "actor", "process", "file", "path") != curlExe {
		t.Errorf("refuse event: %v", refuse[0])
	}
	if get(finding[0], "actor", "process", "pid") != float64(4242) {
		t.Errorf("finding actor: %v", finding[0])
	}
	if got := env.p.Counters().Bypass; got != 1 {
		t.Errorf("bypass counter %d", got)
	}
}
