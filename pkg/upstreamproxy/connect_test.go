package upstreamproxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testCA is a throwaway CA and a leaf for 127.0.0.1 and proxy.test.
type testCA struct {
	pem  []byte
	leaf tls.Certificate
}

var (
	caOnce sync.Once
	ca     testCA
)

func newTestCA(t *testing.T) testCA {
	t.Helper()
	caOnce.Do(func() {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstreamproxy test CA"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
			BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		caCert, _ := x509.ParseCertificate(der)
		lkey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		ltmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "proxy.test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			DNSNames: []string{"proxy.test"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		lder, err := x509.CreateCertificate(rand.Reader, ltmpl, caCert, &lkey.PublicKey, key)
		if err != nil {
			panic(err)
		}
		ca = testCA{pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			leaf: tls.Certificate{Certificate: [][]byte{lder}, PrivateKey: lkey}}
	})
	return ca
}

func testCAPEM(t *testing.T) []byte { return newTestCA(t).pem }

// fakeProxy is a forward proxy on loopback that answers every CONNECT
// with answer (then, for a 2xx, echoes the tunnel's bytes after sending
// early), recording each request head.
type fakeProxy struct {
	ln     net.Listener
	answer string
	early  string
	mu     sync.Mutex
	heads  []*http.Request
}

func newFakeProxy(t *testing.T, tlsCfg *tls.Config, answer, early string) *fakeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	fp := &fakeProxy{ln: ln, answer: answer, early: early}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go fp.serve(c)
		}
	}()
	return fp
}

func (fp *fakeProxy) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	fp.mu.Lock()
	fp.heads = append(fp.heads, req)
	fp.mu.Unlock()
	if fp.answer == "" { // silence: wait for the client to give up
		io.Copy(io.Discard, br)
		return
	}
	io.WriteString(c, fp.answer+fp.early)
	if !strings.Contains(fp.answer, " 200 ") {
		return
	}
	io.Copy(c, br)
}

func (fp *fakeProxy) port() int { return fp.ln.Addr().(*net.TCPAddr).Port }

func (fp *fakeProxy) requests() []*http.Request {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return append([]*http.Request(nil), fp.heads...)
}

func loadChain(t *testing.T, args ...string) *Chain {
	t.Helper()
	c, err := settings(t, args...).Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dialProxy(t *testing.T, c *Chain) net.Conn {
	t.Helper()
	raw, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestConnectHTTPProxy: the CONNECT goes to the checked address with the
// Basic credential; a 2xx gives the raw TCP connection back (splice
// path) unless the tunnel's first bytes came with the answer, which are
// then read first.
func TestConnectHTTPProxy(t *testing.T) {
	auth := writeSecret(t, "alice:"+secret+"\n", 0o600)
	fp := newFakeProxy(t, nil, "HTTP/1.1 200 Connection established\r\n\r\n", "")
	c := loadChain(t, "--upstream-proxy", "http://127.0.0.1:"+strconv.Itoa(fp.port()), "--upstream-proxy-auth-file", auth, "--upstream-proxy-allow-insecure")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	target := c.Target("api.test", netip.MustParseAddrPort("[::ffff:198.51.100.7]:443"))
	if target != "198.51.100.7:443" {
		t.Fatalf("Target = %q; want the checked address", target)
	}
	tun, err := c.Connect(ctx, dialProxy(t, c), target)
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Close()
	if _, ok := tun.(*net.TCPConn); !ok {
		t.Errorf("tunnel is a %T; want the *net.TCPConn itself", tun)
	}
	echo(t, tun)
	reqs := fp.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodConnect || r.RequestURI != "198.51.100.7:443" || r.Host != "198.51.100.7:443" {
		t.Errorf("request %s %s Host %s; want CONNECT 198.51.100.7:443", r.Method, r.RequestURI, r.Host)
	}
	if got := r.Header.Get("Proxy-Authorization"); got != "Basic YWxpY2U6aHVudGVyMi1TZWNyZXQ=" {
		t.Errorf("Proxy-Authorization %q", got)
	}

	// Without a credential file no Proxy-Authorization goes out.
	c2 := loadChain(t, "--upstream-proxy", "http://127.0.0.1:"+strconv.Itoa(fp.port()))
	tun2, err := c2.Connect(ctx, dialProxy(t, c2), "198.51.100.7:443")
	if err != nil {
		t.Fatal(err)
	}
	tun2.Close()
	if h := fp.requests()[1].Header; len(h.Values("Proxy-Authorization")) != 0 {
		t.Errorf("a chain without a credential sent Proxy-Authorization")
	}

	// A server that speaks first: its bytes came with the answer.
	fp3 := newFakeProxy(t, nil, "HTTP/1.1 200 OK\r\n\r\n", "SSH-2.0-banner\r\n")
	c3 := loadChain(t, "--upstream-proxy", "http://127.0.0.1:"+strconv.Itoa(fp3.port()))
	tun3, err := c3.Connect(ctx, dialProxy(t, c3), "198.51.100.7:22")
	if err != nil {
		t.Fatal(err)
	}
	defer tun3.Close()
	tun3.SetDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len("SSH-2.0-banner\r\n"))
	if _, err := io.ReadFull(tun3, got); err != nil || string(got) != "SSH-2.0-banner\r\n" {
		t.Fatalf("early bytes %q, %v", got, err)
	}
	echo(t, tun3)
	if cw, ok := tun3.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
		t.Errorf("the tunnel with early bytes cannot half-close")
	}
}

func echo(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
		t.Fatalf("echo %q, %v", b, err)
	}
	c.SetDeadline(time.Time{})
}

// TestConnectHTTPSProxy: an https:// proxy is spoken to over TLS,
// verified against the CA bundle; without the bundle its certificate
// does not verify and the handshake fails (KindTLS) before any CONNECT.
func TestConnectHTTPSProxy(t *testing.T) {
	tc := newTestCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, tc.pem, 0o644)
	auth := writeSecret(t, "alice:"+secret+"\n", 0o600)
	fp := newFakeProxy(t, &tls.Config{Certificates: []tls.Certificate{tc.leaf}}, "HTTP/1.1 200 OK\r\n\r\n", "")
	url := "https://127.0.0.1:" + strconv.Itoa(fp.port())
	c := loadChain(t, "--upstream-proxy", url, "--upstream-proxy-ca-bundle", caFile, "--upstream-proxy-auth-file", auth)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tun, err := c.Connect(ctx, dialProxy(t, c), "198.51.100.7:443")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tun.(*tls.Conn); !ok {
		t.Errorf("tunnel through an https proxy is a %T", tun)
	}
	echo(t, tun)
	tun.Close()
	if n := len(fp.requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}

	bare := loadChain(t, "--upstream-proxy", url)
	_, err = bare.Connect(ctx, dialProxy(t, bare), "198.51.100.7:443")
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindTLS || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA bundle: %v; want a TLS error", err)
	}
	if n := len(fp.requests()); n != 1 {
		t.Errorf("a CONNECT reached a proxy whose certificate did not verify")
	}
}

// TestConnectRefusals: a non-2xx answer is a KindRefused error naming
// the status (its standard text, never the proxy's words), a non-HTTP
// answer KindProtocol, silence past the deadline KindTimeout; none of
// them holds the credential.
func TestConnectRefusals(t *testing.T) {
	auth := writeSecret(t, "alice:"+secret+"\n", 0o600)
	for _, c := range []struct {
		answer string
		kind   ErrorKind
		status int
		want   string
	}{
		{"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n", KindRefused, 407, "answered 407 Proxy Authentication Required to CONNECT 198.51.100.7:443"},
		{"HTTP/1.1 403 Go away " + secret + "\r\n\r\n", KindRefused, 403, "answered 403 Forbidden"},
		{"HTTP/1.0 503 Service Unavailable\r\n\r\n", KindRefused, 503, "answered 503 Service Unavailable"},
		{"SSH-2.0-not-http\r\n\r\n", KindProtocol, 0, "CONNECT 198.51.100.7:443: malformed HTTP"},
		{"", KindTimeout, 0, "no answer to CONNECT 198.51.100.7:443 in time"},
	} {
		fp := newFakeProxy(t, nil, c.answer, "")
		ch := loadChain(t, "--upstream-proxy", "http://127.0.0.1:"+strconv.Itoa(fp.port()), "--upstream-proxy-auth-file", auth, "--upstream-proxy-allow-insecure")
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := ch.Connect(ctx, dialProxy(t, ch), "198.51.100.7:443")
		cancel()
		var e *Error
		if !errors.As(err, &e) || e.Kind != c.kind || e.Status != c.status || !strings.Contains(err.Error(), c.want) {
			t.Errorf("answer %q: %v (%+v); want kind %d status %d and %q", c.answer, err, e, c.kind, c.status, c.want)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "YWxpY2U6") {
			t.Errorf("answer %q: the error holds the credential: %v", c.answer, err)
		}
		if !strings.Contains(err.Error(), "http://127.0.0.1:"+strconv.Itoa(fp.port())) {
			t.Errorf("answer %q: the error does not name the proxy: %v", c.answer, err)
		}
	}
}

func TestTargetByHostname(t *testing.T) {
	c := loadChain(t, "--upstream-proxy", "http://127.0.0.1:3128", "--upstream-proxy-connect-by-hostname")
	ap := netip.MustParseAddrPort("198.51.100.7:8443")
	if got := c.Target("api.test", ap); got != "api.test:8443" {
		t.Errorf("by hostname: %q", got)
	}
	if got := c.Target("2001:db8::1", netip.MustParseAddrPort("[2001:db8::1]:443")); got != "[2001:db8::1]:443" {
		t.Errorf("an IP literal host: %q", got)
	}
	c.ConnectByHostname = false
	if got := c.Target("api.test", ap); got != "198.51.100.7:8443" {
		t.Errorf("by address: %q", got)
	}
}
