package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
)

// The tests use the real policy engine (package decision) and stand in
// for the SSRF dialer and the attribution backend with fakes that follow
// the same contracts, so every path of the proxy runs on loopback: the
// fake dialer permits 127.0.0.1 (the real Guard denies loopback) and
// denies 127.0.0.2 as the SSRF case.

const (
	curlExe   = "/usr/bin/curl"
	pythonExe = "/usr/bin/python3"
	shellExe  = "/bin/sh"
	curlSHA   = "1111111111111111111111111111111111111111111111111111111111111111"
	otherSHA  = "2222222222222222222222222222222222222222222222222222222222222222"
)

// spyDialer resolves names from a table and records every lookup, so a
// test can prove a denied name was never resolved. 127.0.0.2 plays an
// address the SSRF guard refuses.
type spyDialer struct {
	mu      sync.Mutex
	lookups []string
	hosts   map[string]netip.Addr
	delay   time.Duration // before connecting, to exercise the connect timeout
	suffix  string        // names ending in it resolve to 127.0.0.1 (benchmarks)
}

var ssrfDenied = netip.MustParseAddr("127.0.0.2")

func (d *spyDialer) DialContext(ctx context.Context, host string, port int, scope Scope) (net.Conn, netip.AddrPort, error) {
	addr, err := netip.ParseAddr(host)
	if err != nil {
		d.mu.Lock()
		d.lookups = append(d.lookups, host)
		a, ok := d.hosts[host]
		if !ok && d.suffix != "" && strings.HasSuffix(host, d.suffix) {
			a, ok = netip.MustParseAddr("127.0.0.1"), true
		}
		d.mu.Unlock()
		if !ok {
			return nil, netip.AddrPort{}, fmt.Errorf("lookup %s: no such host", host)
		}
		addr = a
	}
	ap := netip.AddrPortFrom(addr, uint16(port))
	if addr == ssrfDenied {
		return nil, netip.AddrPort{}, &DenyError{Reason: "loopback"}
	}
	if d.delay > 0 {
		select {
		case <-time.After(d.delay):
		case <-ctx.Done():
			return nil, netip.AddrPort{}, fmt.Errorf("connect %s: %w", ap, ctx.Err())
		}
	}
	nd := net.Dialer{KeepAlive: -1} // as egress-proxy's dialer: the proxy turns it on
	c, err := nd.DialContext(ctx, "tcp", ap.String())
	return c, ap, err
}

func (d *spyDialer) Lookups() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.lookups)
}

// fakeAttributor reports the identity its function returns.
type fakeAttributor struct {
	fn    func(client, local netip.AddrPort) (*Identity, error)
	calls atomic.Int64
}

func (a *fakeAttributor) Lookup(_ context.Context, client, local netip.AddrPort) (*Identity, error) {
	a.calls.Add(1)
	return a.fn(client, local)
}

// SandboxPID stands in for the pid namespace translation: host pid 4242
// is 242 in the sandbox.
func (a *fakeAttributor) SandboxPID(host int) int { return host % 1000 }

func identityOf(exe, sha string, ancestors ...string) *Identity {
	id := &Identity{PID: 4242, Exe: exe, SHA256: sha}
	for i, a := range ancestors {
		id.Ancestors = append(id.Ancestors, Ancestor{PID: 4000 - i, Exe: a})
	}
	return id
}

func fixedIdentity(id *Identity) *fakeAttributor {
	return &fakeAttributor{fn: func(_, _ netip.AddrPort) (*Identity, error) {
		c := *id
		return &c, nil
	}}
}

// mapPinner is an in-memory trust-on-first-use store.
type mapPinner struct {
	mu   sync.Mutex
	pins map[string]string
}

func (p *mapPinner) Pin(exe, sha string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pins == nil {
		p.pins = map[string]string{}
	}
	if old, ok := p.pins[exe]; ok && old != sha {
		return &MismatchError{Exe: exe, Pinned: old, Seen: sha}
	}
	p.pins[exe] = sha
	return nil
}

// policyYAML is a policy letting /usr/bin/curl reach allowed.test and
// *.wild.test on the given port; extra is appended under network_policies.
func policyYAML(port int, extra string) string {
	return fmt.Sprintf(`version: 1
network_policies:
  web:
    name: web
    endpoints:
      - host: allowed.test
        port: %d
      - host: "*.wild.test"
        port: %d
      - host: internal.test
        port: %d
    binaries:
      - path: /usr/bin/curl
%s`, port, port, port, extra)
}

// testEnv is one proxy on loopback with its fakes.
type testEnv struct {
	t          testing.TB
	p          *Proxy
	addr       string
	dir        string
	policyPath string
	dialer     *spyDialer
	rec        *ocsftest.Recorder
	cfg        Config
}

type envOpt func(*Config)

func newEnv(t testing.TB, yaml string, opts ...envOpt) *testEnv {
	t.Helper()
	dir := t.TempDir()
	pp := filepath.Join(dir, "policy.yaml")
	if err := fsutil.WriteFileAtomic(pp, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := ocsftest.NewRecorder(t)
	d := &spyDialer{hosts: map[string]netip.Addr{
		"allowed.test":  netip.MustParseAddr("127.0.0.1"),
		"a.wild.test":   netip.MustParseAddr("127.0.0.1"),
		"internal.test": ssrfDenied,
	}}
	src := ocsf.NewSource("proxytest", Component, "test")
	cfg := Config{
		PolicyPath:   pp,
		Compile:      CompileDecision,
		Canonicalize: CanonicalHost,
		Dialer:       d,
		Attributor:   fixedIdentity(identityOf(curlExe, curlSHA, shellExe)),
		Pinner:       &mapPinner{},
		Source:       src,
		Events:       rec,
		Limits:       Limits{HeadTimeout: 2 * time.Second, ConnectTimeout: 2 * time.Second, IdleTimeout: time.Minute},
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(context.Background(), "127.0.0.1:0", DefaultClientCongestion)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testEnv{t: t, p: p, addr: ln.Addr().String(), dir: dir, policyPath: pp, dialer: d, rec: rec, cfg: cfg}
}

// dial opens a client connection to the proxy.
func (e *testEnv) dial() *net.TCPConn {
	e.t.Helper()
	c, err := net.DialTimeout("tcp", e.addr, 2*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*net.TCPConn)
}

// connect sends CONNECT target and returns the response and the reader
// positioned after it.
func (e *testEnv) connect(target string) (*net.TCPConn, *http.Response, *bufio.Reader) {
	e.t.Helper()
	c := e.dial()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		e.t.Fatalf("CONNECT %s: read response: %v", target, err)
	}
	return c, resp, br
}

// writeFile replaces the policy atomically (the way operators must).
func (e *testEnv) writePolicy(yaml string) {
	e.t.Helper()
	if err := fsutil.WriteFileAtomic(e.policyPath, []byte(yaml), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// events waits until the recorder holds at least n events of class uid
// (bounded) and returns them.
func (e *testEnv) waitEvents(classUID, n int) []map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs := e.rec.ByClass(classUID)
		if len(evs) >= n || time.Now().After(deadline) {
			return evs
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// echoServer accepts TCP connections on loopback and echoes until EOF,
// then half-closes. It counts accepted connections.
type echoServer struct {
	ln       net.Listener
	accepted atomic.Int64
	port     int
}

func newEchoServer(t testing.TB) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Minute)) // a bound, not a test timeout
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return s
}

// get is a small field accessor for decoded events: get(ev, "a", "b").
func get(m map[string]any, path ...string) any {
	var cur any = m
	for _, k := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// waitFor waits for cond, up to 30 s: a loaded host can take seconds to
// close 1,000 tunnels; no caller's claim is about how fast.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkSocketLeaks fails the test if sockets it opened (through the
// proxy, clients or servers) are still open once its cleanups ran. Call
// it first so its cleanup runs last. It counts sockets, not every fd:
// the runtime keeps a pool of pipes for splice(2) that outlive a tunnel
// by design (testutil.CheckFDLeaks would flag them).
func checkSocketLeaks(t *testing.T) {
	t.Helper()
	before := sockets()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for {
			var leaked []string
			for fd, target := range sockets() {
				if _, ok := before[fd]; !ok {
					leaked = append(leaked, fd+" -> "+target)
				}
			}
			if len(leaked) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("leaked %d socket(s): %v", len(leaked), leaked[:min(len(leaked), 10)])
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func sockets() map[string]string {
	ents, _ := os.ReadDir("/proc/self/fd")
	out := map[string]string{}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(target, "socket:") {
			out[e.Name()] = target
		}
	}
	return out
}

// jsonBody decodes a response body.
func jsonBody(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
