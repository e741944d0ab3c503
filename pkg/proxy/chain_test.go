package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
	"github.com/palisade-sandbox/palisade/pkg/upstreamproxy"
)

// The chaining tests run the real SSRF dialer against TEST-NET names
// (198.51.100.0/24, which the guard admits) and a fake corporate proxy on
// loopback that, like squid, opens what a CONNECT names, but always to a
// loopback backend of the test. The dialer's Control hook refuses every
// direct connection that is not to loopback, so a tunnel that wrongly
// went direct fails at once and no packet leaves the host.

const chainPassword = "s3cret-Chain"

// corpProxy is the fake corporate proxy.
type corpProxy struct {
	ln      net.Listener
	backend string         // where every opened tunnel really goes (under mu)
	status  map[string]int // CONNECT target -> answer (200 when absent)
	mu      sync.Mutex
	targets []string
	auth    []string
}

func newCorpProxy(t *testing.T, backend string, status map[string]int) *corpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp := &corpProxy{ln: ln, backend: backend, status: status}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go cp.serve(c)
		}
	}()
	return cp
}

func (cp *corpProxy) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	cp.mu.Lock()
	cp.targets = append(cp.targets, req.Method+" "+req.RequestURI)
	cp.auth = append(cp.auth, req.Header.Get("Proxy-Authorization"))
	status, ok := cp.status[req.RequestURI]
	backend := cp.backend
	cp.mu.Unlock()
	if !ok {
		status = 200
	}
	if status != 200 {
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\n\r\n", status, http.StatusText(status))
		return
	}
	up, err := net.Dial("tcp", backend)
	if err != nil {
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	c.SetDeadline(time.Time{})
	go func() { io.Copy(up, br); up.(*net.TCPConn).CloseWrite() }()
	io.Copy(c, up)
}

func (cp *corpProxy) seen() ([]string, []string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.targets...), append([]string(nil), cp.auth...)
}

func (cp *corpProxy) url() string { return "http://" + cp.ln.Addr().String() }

// loopbackOnly is a dialer Control that refuses every connection but to
// loopback (the proxy's dials to the fake corporate proxy).
func loopbackOnly(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().IsLoopback() {
		return fmt.Errorf("test: direct connection to %s refused", address)
	}
	return nil
}

// chainEnv is a proxy with the real SSRF dialer chained through cp.
func chainEnv(t *testing.T, yaml string, cp *corpProxy, hosts string, flags []string, opts ...envOpt) *testEnv {
	t.Helper()
	d := chainDialer(t, cp, hosts, flags)
	return newEnv(t, yaml, append([]envOpt{func(c *Config) { c.Dialer = d }}, opts...)...)
}

// chainDialer is the real SSRF dialer (names from hosts, direct dials to
// loopback only) chained through cp with a credential and flags.
func chainDialer(t *testing.T, cp *corpProxy, hosts string, flags []string) SSRFDialer {
	t.Helper()
	auth := filepath.Join(t.TempDir(), "proxy-auth")
	if err := os.WriteFile(auth, []byte("alice:"+chainPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var s upstreamproxy.Settings
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	s.Register(fs)
	args := append([]string{"--upstream-proxy", cp.url(), "--upstream-proxy-auth-file", auth, "--upstream-proxy-allow-insecure"}, flags...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	chain, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	res, err := ssrf.ParseHosts(strings.NewReader(hosts))
	if err != nil {
		t.Fatal(err)
	}
	d := &ssrf.Dialer{Resolver: res, Timeout: 2 * time.Second, Control: loopbackOnly}
	return SSRFDialer{Dialer: d, Chain: chain}
}

// upstreamProxyOf is unmapped.egress_proxy.upstream_proxy of an event.
func upstreamProxyOf(ev map[string]any) map[string]any {
	u, _ := ev["unmapped"].(map[string]any)
	ep, _ := u["egress_proxy"].(map[string]any)
	up, _ := ep["upstream_proxy"].(map[string]any)
	return up
}

// noSecret fails when any event holds the credential, plain or encoded.
func noSecret(t *testing.T, env *testEnv) {
	t.Helper()
	b, _ := json.Marshal(env.rec.Events())
	for _, s := range []string{chainPassword, "YWxpY2U6czNjcmV0LUNoYWlu"} {
		if strings.Contains(string(b), s) {
			t.Errorf("an event holds the credential (%s)", s)
		}
	}
}

// TestChainedTunnel: an allowed CONNECT goes through the upstream proxy
// to the checked address (not the name) with the Basic credential, the
// bytes flow, and the event says it was chained and through which proxy.
// A 502 from the upstream proxy for one address moves on to the next.
func TestChainedTunnel(t *testing.T) {
	echo := newEchoServer(t)
	port := echo.port
	cp := newCorpProxy(t, echo.ln.Addr().String(), map[string]int{fmt.Sprintf("198.51.100.7:%d", port): 502})
	env := chainEnv(t, policyYAML(port, ""), cp, "198.51.100.7 allowed.test\n198.51.100.8 allowed.test\n", nil)
	c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo through the chain: %q %v", got, err)
	}
	c.Close()
	targets, auth := cp.seen()
	want := []string{fmt.Sprintf("CONNECT 198.51.100.7:%d", port), fmt.Sprintf("CONNECT 198.51.100.8:%d", port)}
	if strings.Join(targets, "|") != strings.Join(want, "|") {
		t.Errorf("the upstream proxy saw %q; want %q (the checked addresses in order, never the name)", targets, want)
	}
	for _, a := range auth {
		if a != "Basic YWxpY2U6czNjcmV0LUNoYWlu" {
			t.Errorf("Proxy-Authorization %q", a)
		}
	}
	ev := env.waitEvents(ocsf.ClassNetworkActivity, 1)[0]
	up := upstreamProxyOf(ev)
	if up["route"] != "chained" || up["proxy"] != cp.url() || up["connect_target"] != fmt.Sprintf("198.51.100.8:%d", port) {
		t.Errorf("unmapped.egress_proxy.upstream_proxy = %v", up)
	}
	if dst, _ := ev["dst_endpoint"].(map[string]any); dst["ip"] != "198.51.100.8" {
		t.Errorf("dst_endpoint %v; want the address reached", dst)
	}
	noSecret(t, env)
}

// TestChainedRefusals: the upstream proxy's 407 and 403, and a proxy
// that cannot be reached, are a 502 with a JSON reason for the client
// and an upstream-failure event naming the proxy (never the credential).
func TestChainedRefusals(t *testing.T) {
	echo := newEchoServer(t)
	port := echo.port
	cp := newCorpProxy(t, echo.ln.Addr().String(), map[string]int{
		fmt.Sprintf("198.51.100.7:%d", port): 407,
		fmt.Sprintf("198.51.100.9:%d", port): 403,
	})
	yaml := policyYAML(port, fmt.Sprintf(`  more:
    endpoints:
      - host: denied-by-corp.test
        port: %d
    binaries:
      - path: /usr/bin/curl
`, port))
	hosts := "198.51.100.7 allowed.test\n198.51.100.9 denied-by-corp.test\n"
	env := chainEnv(t, yaml, cp, hosts, nil)
	for i, c := range []struct {
		host, reason, detail string
	}{
		{"allowed.test", ReasonUpstreamProxyAuth, "the upstream proxy answered 407 Proxy Authentication Required"},
		{"denied-by-corp.test", ReasonUpstreamProxyDenied, "the upstream proxy answered 403 Forbidden"},
	} {
		conn, resp, _ := env.connect(fmt.Sprintf("%s:%d", c.host, port))
		var body errorBody
		if err := jsonBody(resp, &body); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if resp.StatusCode != 502 || body.Error != OutcomeUpstreamFailed || body.Reason != c.reason || body.Detail != c.detail {
			t.Errorf("%s: %d %+v; want 502 %s", c.host, resp.StatusCode, body, c.reason)
		}
		evs := env.waitEvents(ocsf.ClassNetworkActivity, i+1)
		ev := evs[i]
		detail, _ := ev["status_detail"].(string)
		if ev["status_code"] != OutcomeUpstreamFailed || !strings.Contains(detail, c.reason) || !strings.Contains(detail, "upstream proxy "+cp.url()) {
			t.Errorf("%s: event %v %q", c.host, ev["status_code"], detail)
		}
		if up := upstreamProxyOf(ev); up["route"] != "chained" {
			t.Errorf("%s: upstream_proxy %v", c.host, up)
		}
	}
	if n := echo.accepted.Load(); n != 0 {
		t.Errorf("the backend was reached %d times through refused tunnels", n)
	}
	noSecret(t, env)

	// An upstream proxy that is not there.
	dead := newCorpProxy(t, echo.ln.Addr().String(), nil)
	dead.ln.Close()
	env2 := chainEnv(t, policyYAML(port, ""), dead, hosts, nil)
	conn, resp, _ := env2.connect(fmt.Sprintf("allowed.test:%d", port))
	var body errorBody
	jsonBody(resp, &body)
	conn.Close()
	if resp.StatusCode != 502 || body.Reason != ReasonUpstreamProxyUnreachable {
		t.Errorf("unreachable upstream proxy: %d %+v", resp.StatusCode, body)
	}
}

// TestChainNoProxyGoesDirect: a NO_PROXY destination is dialled directly
// (here refused by the test's loopback-only Control, which shows it was
// direct), never offered to the upstream proxy; the event names the
// entry. An entry for another port does not apply.
func TestChainNoProxyGoesDirect(t *testing.T) {
	echo := newEchoServer(t)
	port := echo.port
	cp := newCorpProxy(t, echo.ln.Addr().String(), nil)
	env := chainEnv(t, policyYAML(port, ""), cp, "198.51.100.7 allowed.test\n",
		[]string{"--upstream-proxy-no-proxy", fmt.Sprintf("allowed.test:%d", port+1) + ",198.51.100.7/32:" + strconv.Itoa(port)})
	conn, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", port))
	var body errorBody
	jsonBody(resp, &body)
	conn.Close()
	if resp.StatusCode != 502 || body.Reason != ReasonConnectFailed {
		t.Errorf("NO_PROXY destination: %d %+v; want the direct dial's 502 connect_failed", resp.StatusCode, body)
	}
	if targets, _ := cp.seen(); len(targets) != 0 {
		t.Errorf("the upstream proxy saw %q for a NO_PROXY destination", targets)
	}
	ev := env.waitEvents(ocsf.ClassNetworkActivity, 1)[0]
	if up := upstreamProxyOf(ev); up["route"] != "direct" || up["no_proxy"] != "198.51.100.7/32:"+strconv.Itoa(port) || up["connect_target"] != nil {
		t.Errorf("upstream_proxy %v", up)
	}
}

// TestChainedInspectedTunnel: an inspected (TLS-terminated) tunnel is
// chained too, and so is every extra upstream connection it opens for
// overlapping requests (an h2 client's streams to an HTTP/1.1 upstream):
// each is a CONNECT to the checked address through the upstream proxy.
func TestChainedInspectedTunnel(t *testing.T) {
	up := newUpstreamTLS(t, false)
	cp := newCorpProxy(t, up.srv.Listener.Addr().String(), nil)
	ca, err := tlsca.New(tlsca.Options{Name: "proxytest"})
	if err != nil {
		t.Fatal(err)
	}
	env := chainEnv(t, restPolicy(up.port, "read-only", ""), cp, "198.51.100.7 allowed.test\n", nil,
		func(c *Config) { c.CA, c.UpstreamRoots = ca, up.pool() })
	e := &inspectEnv{testEnv: env, up: up, ca: ca}
	cl := e.client(true)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := cl.Get(e.url(fmt.Sprintf("/c/%d", i)))
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- errors.New(resp.Status)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	targets, _ := cp.seen()
	if len(targets) < 2 {
		t.Errorf("the upstream proxy saw %d CONNECTs for 12 overlapping requests; want the extra connections chained too", len(targets))
	}
	for _, tg := range targets {
		if tg != fmt.Sprintf("CONNECT 198.51.100.7:%d", up.port) {
			t.Errorf("CONNECT %q", tg)
		}
	}
	if n := len(up.requests()); n != 12 {
		t.Errorf("upstream saw %d requests", n)
	}
	for _, ev := range env.rec.ByClass(ocsf.ClassHTTPActivity) {
		if r := upstreamProxyOf(ev); r["route"] != "chained" {
			t.Errorf("request event upstream_proxy %v", r)
		}
	}
	noSecret(t, env)
}

// TestChainedTransparent: a transparent connection (a client that
// ignored the proxy and connected to allowed.test's synthetic address)
// is chained exactly as the CONNECT to allowed.test would be: through
// the upstream proxy to the mapping's pinned address (never the name,
// nothing resolved), its extra upstream connections too, with L7 rules
// still enforced (a read-only POST is 403 and never reaches the proxy);
// under NO_PROXY it is dialled directly (refused here by the test's
// loopback-only Control) and the upstream proxy sees nothing. Mutated:
// with the transparent path dialling the mapping directly (dialMapped,
// as before chaining) both cases fail.
func TestChainedTransparent(t *testing.T) {
	for _, noProxy := range []bool{false, true} {
		t.Run(fmt.Sprintf("no_proxy=%v", noProxy), func(t *testing.T) {
			var cp *corpProxy
			var flags []string
			if noProxy {
				flags = []string{"--upstream-proxy-no-proxy", "allowed.test"}
			}
			te := newTransparentEnv(t, func(port int) string { return restPolicy(port, "read-only", "") }, "198.51.100.7",
				func(c *Config) {
					cp = newCorpProxy(t, "", nil)
					c.Dialer = chainDialer(t, cp, "", flags)
				})
			cp.mu.Lock()
			cp.backend = te.up.srv.Listener.Addr().String()
			cp.mu.Unlock()
			cl := te.client(false)
			url := fmt.Sprintf("https://allowed.test:%d", te.up.port)
			resp, err := cl.Get(url + "/simple/pkg/")
			if noProxy {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("NO_PROXY destination reached: %d", resp.StatusCode)
				}
				if targets, _ := cp.seen(); len(targets) != 0 {
					t.Errorf("the upstream proxy saw %q for a NO_PROXY destination", targets)
				}
				ev := te.waitEvents(ocsf.ClassNetworkActivity, 1)[0]
				if up := upstreamProxyOf(ev); up["route"] != "direct" || up["no_proxy"] != "allowed.test" {
					t.Errorf("upstream_proxy %v", up)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET: %d", resp.StatusCode)
			}
			resp, err = cl.Post(url+"/upload/x", "application/octet-stream", strings.NewReader("payload"))
			if err != nil {
				t.Fatal(err)
			}
			if d := readDenial(t, resp); resp.StatusCode != 403 || d.Reason != policy.L7AccessDenied {
				t.Errorf("POST: %d %+v", resp.StatusCode, d)
			}
			if reqs := te.up.requests(); len(reqs) != 1 || !strings.HasPrefix(reqs[0], "GET /simple/pkg/") {
				t.Errorf("upstream saw %v, want the GET only", reqs)
			}
			targets, _ := cp.seen()
			if len(targets) == 0 {
				t.Fatal("the upstream proxy saw nothing: the transparent connection went direct")
			}
			for _, tg := range targets {
				if tg != fmt.Sprintf("CONNECT 198.51.100.7:%d", te.up.port) {
					t.Errorf("CONNECT %q; want the pinned address", tg)
				}
			}
			cl.Transport.(*http.Transport).CloseIdleConnections()
			ev := te.waitEvents(ocsf.ClassNetworkActivity, 1)[0]
			if up := upstreamProxyOf(ev); up["route"] != "chained" || get(ev, "unmapped", "egress_proxy", "listener") != ListenerTransparent {
				t.Errorf("transparent tunnel event: %v", ev["unmapped"])
			}
			noSecret(t, te.testEnv)
		})
	}
}
