package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// The transparent listener serves connections to policy DNS synthetic
// addresses of every endpoint kind exactly as a CONNECT to the name: the
// tests below mirror the CONNECT ones (inspect_test.go, connector_test.go,
// identity_test.go) with a client that knows nothing of the proxy.

// transparentEnv is a proxy (with a sandbox CA, in front of an HTTPS
// upstream on loopback) serving a transparent listener, and a mapping of
// allowed.test to real addresses.
type transparentEnv struct {
	*inspectEnv
	ln    net.Listener
	table *policydns.Table
	m     policydns.Mapping

	mu   sync.Mutex
	orig netip.AddrPort // what OriginalDst reports
}

func newTransparentEnv(t *testing.T, yaml func(port int) string, real string, opts ...envOpt) *transparentEnv {
	t.Helper()
	te := &transparentEnv{}
	opts = append(opts, func(c *Config) {
		c.OriginalDst = func(*net.TCPConn) (netip.AddrPort, error) {
			te.mu.Lock()
			defer te.mu.Unlock()
			return te.orig, nil
		}
	})
	up := newUpstreamTLS(t, true)
	ie := newInspectEnvFor(t, up, yaml, opts...)
	te.inspectEnv = ie
	tb, err := policydns.NewTable(30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	te.table = tb
	ie.p.SetMappings(tb)
	te.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ie.p.ServeTransparent(te.ln) }()
	t.Cleanup(func() { ie.p.Close(); <-done })
	ports, gen, ok := ie.p.DNSEligibility("allowed.test")
	if !ok {
		t.Fatal("allowed.test is not eligible for policy DNS")
	}
	te.m, err = tb.Map("allowed.test", []netip.Addr{netip.MustParseAddr(real)}, ports, gen)
	if err != nil {
		t.Fatal(err)
	}
	te.setOrig(netip.AddrPortFrom(te.m.Synthetic, uint16(up.port)))
	return te
}

// setOrig sets what OriginalDst reports (the listener's goroutines read it).
func (te *transparentEnv) setOrig(ap netip.AddrPort) {
	te.mu.Lock()
	te.orig = ap
	te.mu.Unlock()
}

// newInspectEnvFor is newInspectEnv around a given upstream, trusting it.
func newInspectEnvFor(t *testing.T, up *upstreamTLS, yaml func(port int) string, opts ...envOpt) *inspectEnv {
	t.Helper()
	ca, err := tlsca.New(tlsca.Options{Name: "proxytest"})
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, yaml(up.port), append([]envOpt{func(c *Config) {
		c.CA = ca
		c.UpstreamRoots = up.pool()
	}}, opts...)...)
	return &inspectEnv{testEnv: env, up: up, ca: ca}
}

// dialT opens a connection to the transparent listener, as the nftables
// redirect of a connection to the synthetic address would.
func (te *transparentEnv) dialT() (net.Conn, error) {
	c, err := net.DialTimeout("tcp", te.ln.Addr().String(), 2*time.Second)
	if err == nil {
		c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	return c, err
}

// client is an HTTP client without a proxy (Transport.Proxy nil) whose
// every connection goes to the transparent listener, trusting the
// sandbox CA: a proxy-unaware client after policy DNS.
func (te *transparentEnv) client(h2 bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(te.ca.Certificate())
	tr := &http.Transport{
		Proxy:             nil,
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return te.dialT() },
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: h2,
		MaxConnsPerHost:   1,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	te.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// Transparent HTTPS to an inspected endpoint: the proxy terminates TLS
// with a leaf for the mapping's name, GET passes and POST is refused
// under access: read-only with the JSON denial, on HTTP/1.1 and h2, and
// every event is marked transparent (listener and mapping).
func TestTransparentInspectedHTTPS(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			te := newTransparentEnv(t, func(port int) string { return restPolicy(port, "read-only", "") }, "127.0.0.1")
			cl := te.client(h2)
			url := fmt.Sprintf("https://allowed.test:%d", te.up.port)
			resp, err := cl.Get(url + "/simple/pkg/")
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if resp.StatusCode != 200 || got["method"] != "GET" || got["host"] != fmt.Sprintf("allowed.test:%d", te.up.port) {
				t.Fatalf("GET: %d %v", resp.StatusCode, got)
			}
			resp, err = cl.Post(url+"/upload/x", "application/octet-stream", strings.NewReader("payload"))
			if err != nil {
				t.Fatal(err)
			}
			d := readDenial(t, resp)
			if resp.StatusCode != 403 || d.Error != OutcomePolicyDenied || d.Reason != policy.L7AccessDenied || d.Method != "POST" || d.Binary != curlExe {
				t.Fatalf("POST: %d %+v", resp.StatusCode, d)
			}
			if reqs := te.up.requests(); len(reqs) != 1 || !strings.HasPrefix(reqs[0], "GET /simple/pkg/") {
				t.Errorf("upstream saw %v, want the GET only", reqs)
			}
			cl.Transport.(*http.Transport).CloseIdleConnections()
			https := te.waitEvents(ocsf.ClassHTTPActivity, 2)
			nets := te.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(https) != 2 || len(nets) != 1 {
				t.Fatalf("%d HTTP and %d network events, want 2 and 1", len(https), len(nets))
			}
			for _, ev := range append(https, nets...) {
				if get(ev, "unmapped", "egress_proxy", "listener") != ListenerTransparent ||
					get(ev, "unmapped", "egress_proxy", "transparent", "mapping_id") != te.m.ID ||
					get(ev, "unmapped", "egress_proxy", "transparent", "name") != "allowed.test" {
					b, _ := json.Marshal(ev)
					t.Errorf("event not marked transparent: %s", b)
				}
			}
			if get(nets[0], "unmapped", "egress_proxy", "kind") != KindConnect || get(nets[0], "unmapped", "egress_proxy", "l7") != "enforced" {
				t.Errorf("tunnel event: %v", nets[0]["unmapped"])
			}
		})
	}
}

// Plaintext HTTP to an inspected endpoint's port is read and decided
// request by request, as inside a CONNECT tunnel; bytes that are neither
// TLS nor HTTP are refused.
func TestTransparentInspectedPlaintext(t *testing.T) {
	spy := newHeaderSpy(t)
	te := newTransparentEnv(t, func(int) string { return restPolicy(spy.port, "read-only", "") }, "127.0.0.1")
	te.setOrig(netip.AddrPortFrom(te.m.Synthetic, uint16(spy.port)))
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return te.dialT() }}}
	url := fmt.Sprintf("http://allowed.test:%d/x", spy.port)
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	// (Before the POST: the denial limiter folds a second denial of one
	// outcome, host, port and binary into a later count.)
	c, err := te.dialT()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0x00, 0x01, 0x02})
	if _, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("bytes neither TLS nor HTTP: %v, want a reset", err)
	}
	waitFor(t, "the "+ReasonNotHTTP+" event", func() bool {
		for _, ev := range te.rec.ByClass(ocsf.ClassNetworkActivity) {
			if get(ev, "unmapped", "egress_proxy", "reason") == ReasonNotHTTP {
				return true
			}
		}
		return false
	})
	resp, err = cl.Post(url, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	if d := readDenial(t, resp); resp.StatusCode != 403 || d.Reason != policy.L7AccessDenied {
		t.Fatalf("POST: %d %+v", resp.StatusCode, d)
	}
}

// A ClientHello naming another host than the mapping's name (domain
// fronting) is refused on the transparent path as on CONNECT, inspected
// or not, and reaches no upstream; the matching name passes through an
// uninspected endpoint untouched (the client sees the upstream's own
// certificate).
func TestTransparentSNIMismatchRefused(t *testing.T) {
	for _, rest := range []bool{true, false} {
		t.Run(fmt.Sprintf("inspected=%v", rest), func(t *testing.T) {
			te := newTransparentEnv(t, func(port int) string {
				if rest {
					return restPolicy(port, "read-only", "")
				}
				return policyYAML(port, "")
			}, "127.0.0.1")
			c, err := te.dialT()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc := tls.Client(c, &tls.Config{ServerName: "fronted.example", InsecureSkipVerify: true})
			if err := tc.Handshake(); err == nil {
				t.Fatal("handshake with a fronted SNI succeeded")
			}
			evs := te.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(evs) != 1 || evs[0]["status_code"] != OutcomePolicyDenied || get(evs[0], "unmapped", "egress_proxy", "reason") != ReasonSNIMismatch ||
				get(evs[0], "unmapped", "egress_proxy", "listener") != ListenerTransparent {
				t.Fatalf("events %v", evs)
			}
			if len(te.up.requests()) != 0 {
				t.Fatal("the upstream was reached")
			}
		})
	}
	te := newTransparentEnv(t, func(port int) string { return policyYAML(port, "") }, "127.0.0.1")
	c, err := te.dialT()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: te.up.pool()})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("passthrough handshake: %v", err)
	}
	tc.Close()
}

// The refusals a CONNECT gets before any byte is relayed, the transparent
// path gets too, from the same decision: for each caller the CONNECT's
// 403 and the transparent connection's event carry the same outcome and
// reason, and the transparent one is reset with nothing dialled (the
// SSRF guard's refusal of a mapping's real address included).
func TestTransparentDecidesLikeConnect(t *testing.T) {
	foreign := identityOf(curlExe, curlSHA, shellExe)
	foreign.Code = &ForeignCode{Reasons: []string{"writable_path"}, File: "/work/evil.so"}
	handed := identityOf(curlExe, curlSHA, shellExe)
	handed.Backend, handed.Connector = "bpf", &Ancestor{PID: 17, Exe: "/usr/bin/nc"}
	for _, tc := range []struct {
		name   string
		id     *Identity
		err    error
		real   string // the mapping's real address
		reason string // "" allowed
	}{
		{"allowed", identityOf(curlExe, curlSHA, shellExe), nil, "127.0.0.1", ""},
		{"binary not allowed", identityOf(pythonExe, curlSHA, shellExe), nil, "127.0.0.1", "binary_not_allowed"},
		{"foreign code", foreign, nil, "127.0.0.1", ReasonForeignCode},
		{"handed on by an unlisted connector", handed, nil, "127.0.0.1", ReasonConnectorDenied},
		{"attribution incomplete", nil, &IncompleteError{Err: errors.New("no record")}, "127.0.0.1", ReasonAttributionIncomplete},
		{"ssrf", identityOf(curlExe, curlSHA, shellExe), nil, ssrfDenied.String(), "loopback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo := newEchoServer(t)
			attr := &fakeAttributor{fn: func(_, _ netip.AddrPort) (*Identity, error) {
				if tc.err != nil {
					return nil, tc.err
				}
				c := *tc.id
				return &c, nil
			}}
			te := newTransparentEnv(t, func(int) string { return policyYAML(echo.port, "") }, tc.real,
				func(c *Config) { c.Attributor = attr })
			te.setOrig(netip.AddrPortFrom(te.m.Synthetic, uint16(echo.port)))
			te.dialer.hosts["allowed.test"] = netip.MustParseAddr(tc.real)

			// Transparent first: the denial limiter folds the second
			// denial of one outcome, host, port and binary (the
			// CONNECT's 403 body says its reason itself).
			before := echo.accepted.Load()
			// The reset is reported once: to connect(2) when it beats
			// its return, else to the write, else to the read.
			var got []byte
			tcn, err := te.dialT()
			if err == nil {
				if _, err = fmt.Fprintf(tcn, "hello\n"); err == nil {
					got, err = io.ReadAll(io.LimitReader(tcn, 6))
				}
				tcn.Close()
			}
			if tc.reason == "" {
				if string(got) != "hello\n" {
					t.Fatalf("transparent: %q %v, want the echo", got, err)
				}
			} else if !errors.Is(err, syscall.ECONNRESET) || len(got) != 0 {
				t.Fatalf("transparent: %q %v, want a reset", got, err)
			}
			var tev map[string]any
			waitFor(t, "the transparent connection's event", func() bool {
				for _, ev := range te.rec.ByClass(ocsf.ClassNetworkActivity) {
					if get(ev, "unmapped", "egress_proxy", "listener") == ListenerTransparent {
						tev = ev
					}
				}
				return tev != nil
			})
			wantStatus, wantReason := OutcomeAllowed, tc.reason
			switch {
			case tc.reason == "loopback":
				wantStatus = OutcomeSSRFDenied
			case tc.reason != "":
				wantStatus = OutcomePolicyDenied
			}
			if tev["status_code"] != wantStatus || (tc.reason != "" && get(tev, "unmapped", "egress_proxy", "reason") != wantReason) {
				t.Errorf("transparent event: %s %v, want %s %s", tev["status_code"], get(tev, "unmapped", "egress_proxy", "reason"), wantStatus, wantReason)
			}
			if n := echo.accepted.Load() - before; (n == 1) != (tc.reason == "") {
				t.Errorf("transparent: %d upstream connections, want %v", n, tc.reason == "")
			}
			// CONNECT.
			c, resp, br := te.connect(fmt.Sprintf("allowed.test:%d", echo.port))
			var d DenialBody
			if resp.StatusCode != 200 {
				body, _ := io.ReadAll(br)
				json.Unmarshal(body, &d)
			}
			c.Close()
			if (resp.StatusCode == 200) != (tc.reason == "") || d.Reason != tc.reason {
				t.Fatalf("CONNECT: %d %+v, want reason %q", resp.StatusCode, d, tc.reason)
			}
		})
	}
}

// scriptResolver answers the i-th lookup of a name with the i-th (or
// last) entry of its script.
type scriptResolver struct {
	mu     sync.Mutex
	script map[string][]string
	calls  map[string]int
}

func (s *scriptResolver) LookupNetIP(_ context.Context, host string) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	answers, ok := s.script[host]
	if !ok {
		return nil, &net.DNSError{Err: "not found", Name: host, IsNotFound: true}
	}
	n := s.calls[host]
	s.calls[host]++
	return []netip.Addr{netip.MustParseAddr(answers[min(n, len(answers)-1)])}, nil
}

// DNS rebinding on the transparent path: the policy DNS resolves names
// itself through the SSRF guard, every time. allowed.test answers a
// public address first and loopback afterwards: the first query gets a
// synthetic address mapped to the public one, the second is refused
// (NXDOMAIN, reason loopback) and the mapping keeps only the public
// address, so no connection to it can reach loopback. A wildcard's name
// may not resolve to a private address (its scope), an exact host's may.
func TestPolicyDNSRebindingToLoopback(t *testing.T) {
	env := newEnv(t, policyYAML(443, ""))
	tb, err := policydns.NewTable(30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.p.SetMappings(tb)
	res := &scriptResolver{calls: map[string]int{}, script: map[string][]string{
		"allowed.test":  {"198.51.100.7", "127.0.0.1"},
		"a.wild.test":   {"10.1.2.3"},
		"internal.test": {"10.1.2.3"},
	}}
	srv, err := policydns.NewServer(policydns.Config{
		Table: tb, Eligible: env.p.DNSEligibility,
		Resolve: PolicyDNSResolver(env.p, &ssrf.Dialer{Resolver: res, Guard: &ssrf.Guard{}}),
		Source:  ocsf.NewSource("proxytest", "policy-dns", "test"), Events: env.rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, pc, nil) }()
	t.Cleanup(func() { cancel(); <-done; pc.Close() })
	query := func(name string) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		for i := 0; ; i++ { // the server starts in the background
			r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, pc.LocalAddr().String())
			if err == nil {
				return r
			}
			if i == 20 {
				t.Fatalf("query %s: %v", name, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := query("allowed.test")
	if first.Rcode != dns.RcodeSuccess || len(first.Answer) != 1 {
		t.Fatalf("first answer: %v", first)
	}
	syn, _ := netip.AddrFromSlice(first.Answer[0].(*dns.A).A)
	if r := query("allowed.test"); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
		t.Fatalf("after rebinding to loopback: %v, want NXDOMAIN", r)
	}
	m, err := tb.Lookup(netip.AddrPortFrom(syn, 443))
	if err != nil || len(m.Real) != 1 || m.Real[0] != netip.MustParseAddr("198.51.100.7") {
		t.Fatalf("mapping after the rebind: %+v %v, want the public address only", m, err)
	}
	if r := query("a.wild.test"); r.Rcode != dns.RcodeNameError {
		t.Errorf("a wildcard's name resolving to a private address: %v, want NXDOMAIN", r)
	}
	if r := query("internal.test"); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("an exact host resolving to a private address: %v, want an answer", r)
	}
	reasons := map[string]string{}
	waitFor(t, "the refusal events", func() bool {
		for _, ev := range env.rec.ByClass(ocsf.ClassNetworkActivity) {
			if ev["status_code"] == policydns.StatusSSRFDenied {
				reasons[get(ev, "dst_endpoint", "domain").(string)] = ev["status_detail"].(string)
			}
		}
		return len(reasons) == 2
	})
	if reasons["allowed.test"] != "loopback" || reasons["a.wild.test"] != "private_not_allowed" {
		t.Errorf("refusals %v", reasons)
	}
}
