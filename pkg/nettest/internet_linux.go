//go:build linux

package nettest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
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

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The servers' ports inside the internet namespace.
const (
	HTTPPort  = 80
	HTTPSPort = 443
	EchoPort  = 7 // TCP echo
	// EchoAltPort is a second TCP echo, at a port no other test uses
	// (the transparent TCP tests name it in protocol: tcp endpoints).
	EchoAltPort = 7007
	// DNSPort is a spy resolver on each IPv4 server address: queries are
	// recorded as hits of server "dns" and never answered.
	DNSPort     = 53
	DiscardPort = 9 // UDP discard on each server address: datagrams are recorded as hits, never answered
)

// blocks is how many /28 blocks of 198.51.100.0/24 exist: the number of
// Internets that can exist at once on one host namespace.
const blocks = 16

// Internet is a fake internet in its own network namespace. Its fields
// are read-only.
type Internet struct {
	// V4 and V6 are the server addresses inside the namespace (for the
	// first block: 198.51.100.10-12 and 2001:db8::10-12). V6 is empty
	// when the host namespace has IPv6 disabled on the link.
	V4, V6 []netip.Addr
	// Block4 (a /28 of 198.51.100.0/24) and Block6 (a /64 of
	// 2001:db8::/32) are routed from the host namespace to the internet.
	Block4, Block6 netip.Prefix
	// HostV4 and HostV6 are the host side's addresses on the link
	// (the first address of each block); the host uses them as source.
	HostV4, HostV6 netip.Addr
	// HostIf is the host side of the veth ("nti" + 8 hex digits).
	HostIf string

	t      testing.TB
	ns     netns.NsHandle
	tmp    string
	caPEM  []byte
	caFile string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	leaf   *ecdsa.PrivateKey
	pool   *x509.CertPool

	mu      sync.Mutex
	hits    []Hit
	certs   map[string]*tls.Certificate
	conns   map[net.Conn]struct{}
	closing bool
	wg      sync.WaitGroup
}

// Hit is one thing that reached a server in the internet namespace.
type Hit struct {
	Server string         // "http", "https", "echo", "udp" or "dns"
	Local  netip.AddrPort // the server address it reached
	Remote netip.AddrPort // where it came from
	Host   string         // HTTP Host header (http, https)
	SNI    string         // TLS server name (https)
	Method string         // (http, https)
	Path   string         // (http, https)
}

// Option adjusts NewInternet.
type Option func(*options)

type options struct {
	host    netns.NsHandle
	hostSet bool
}

// WithHostNetns joins the internet to ns instead of the test process's
// own namespace, for tests whose "host" is itself a throwaway namespace.
// The caller keeps ownership of ns.
func WithHostNetns(ns netns.NsHandle) Option {
	return func(o *options) { o.host, o.hostSet = ns, true }
}

// NewInternet builds the fake internet and starts its servers; test
// cleanup takes everything down. It needs root (skipping, or failing
// under PALISADE_REQUIRE_PRIVILEGED=1, otherwise).
func NewInternet(t testing.TB, opts ...Option) *Internet {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "ns:net")
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	in := &Internet{t: t, tmp: t.TempDir(), certs: map[string]*tls.Certificate{}, conns: map[net.Conn]struct{}{}}
	if err := in.build(o); err != nil {
		t.Fatalf("nettest: %v", err)
	}
	return in
}

func (in *Internet) build(o options) (err error) {
	t := in.t
	hostNs := o.host
	if !o.hostSet {
		if hostNs, err = netns.Get(); err != nil {
			return fmt.Errorf("host netns: %w", err)
		}
		t.Cleanup(func() { hostNs.Close() })
	}
	if in.ns, err = newNetns(); err != nil {
		return err
	}
	t.Cleanup(func() { in.ns.Close() })
	hostH, err := netlink.NewHandleAt(hostNs)
	if err != nil {
		return fmt.Errorf("netlink in host netns: %w", err)
	}
	defer hostH.Delete()
	inH, err := netlink.NewHandleAt(in.ns)
	if err != nil {
		return fmt.Errorf("netlink in internet netns: %w", err)
	}
	defer inH.Delete()

	in.HostIf = testutil.UniqueName("nti")
	if err := hostH.LinkAdd(&netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: in.HostIf},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(in.ns)),
	}); err != nil {
		return fmt.Errorf("create veth %s: %w", in.HostIf, err)
	}
	// Deleting the host side removes the peer, and with them every
	// address and route on the link.
	t.Cleanup(func() {
		h, err := netlink.NewHandleAt(hostNs)
		if err != nil {
			t.Errorf("nettest: cleanup: %v", err)
			return
		}
		defer h.Delete()
		if l, err := h.LinkByName(in.HostIf); err == nil {
			if err := h.LinkDel(l); err != nil {
				t.Errorf("nettest: delete link %s: %v", in.HostIf, err)
			}
		}
	})
	hostLink, err := hostH.LinkByName(in.HostIf)
	if err != nil {
		return err
	}
	eth, err := inH.LinkByName("eth0")
	if err != nil {
		return err
	}
	lo, err := inH.LinkByName("lo")
	if err != nil {
		return err
	}
	for _, l := range []struct {
		h *netlink.Handle
		l netlink.Link
	}{{hostH, hostLink}, {inH, eth}, {inH, lo}} {
		if err := l.h.LinkSetUp(l.l); err != nil {
			return fmt.Errorf("set %s up: %w", l.l.Attrs().Name, err)
		}
	}
	// The veth drops packets until link watch has seen the carrier.
	for _, l := range []struct {
		h    *netlink.Handle
		name string
	}{{hostH, in.HostIf}, {inH, "eth0"}} {
		if err := waitOperUp(l.h, l.name); err != nil {
			return err
		}
	}
	v6 := ipv6Enabled(hostNs, in.HostIf) && ipv6Enabled(in.ns, "eth0")

	// Claim a block by adding its route exclusively: the kernel refuses
	// a second route to the same prefix, in this process or another.
	claimed := false
	for k := 0; k < blocks && !claimed; k++ {
		b4 := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(16 * k)}), 28)
		r4 := &netlink.Route{LinkIndex: hostLink.Attrs().Index, Dst: ipnet(b4), Scope: netlink.SCOPE_LINK}
		if err := hostH.RouteAdd(r4); err != nil {
			if errors.Is(err, unix.EEXIST) {
				continue
			}
			return fmt.Errorf("route %s dev %s: %w", b4, in.HostIf, err)
		}
		if v6 {
			b6 := netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, byte(k)}), 64)
			r6 := &netlink.Route{LinkIndex: hostLink.Attrs().Index, Dst: ipnet(b6)}
			if err := hostH.RouteAdd(r6); err != nil {
				hostH.RouteDel(r4)
				if errors.Is(err, unix.EEXIST) {
					continue
				}
				return fmt.Errorf("route %s dev %s: %w", b6, in.HostIf, err)
			}
			in.Block6 = b6
		}
		in.Block4 = b4
		claimed = true
	}
	if !claimed {
		return fmt.Errorf("all %d blocks of 198.51.100.0/24 are routed already (too many Internets at once, or a host route covers TEST-NET-2)", blocks)
	}

	in.HostV4 = in.Block4.Addr().Next()
	if err := hostH.AddrAdd(hostLink, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(in.HostV4, 32))}); err != nil {
		return fmt.Errorf("address %s on %s: %w", in.HostV4, in.HostIf, err)
	}
	for i := 10; i <= 12; i++ {
		a := in.Block4.Addr().As4()
		a[3] += byte(i)
		addr := netip.AddrFrom4(a)
		if err := inH.AddrAdd(eth, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(addr, 28))}); err != nil {
			return fmt.Errorf("internet address %s: %w", addr, err)
		}
		in.V4 = append(in.V4, addr)
	}
	if err := inH.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: in.HostV4.AsSlice(),
		Dst: ipnet(netip.MustParsePrefix("0.0.0.0/0"))}); err != nil {
		return fmt.Errorf("internet default route: %w", err)
	}
	if v6 {
		in.HostV6 = in.Block6.Addr().Next()
		if err := hostH.AddrAdd(hostLink, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(in.HostV6, 128)), Flags: unix.IFA_F_NODAD}); err != nil {
			return fmt.Errorf("address %s on %s: %w", in.HostV6, in.HostIf, err)
		}
		for i := 0x10; i <= 0x12; i++ {
			a := in.Block6.Addr().As16()
			a[15] = byte(i)
			addr := netip.AddrFrom16(a)
			if err := inH.AddrAdd(eth, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(addr, 64)), Flags: unix.IFA_F_NODAD}); err != nil {
				return fmt.Errorf("internet address %s: %w", addr, err)
			}
			in.V6 = append(in.V6, addr)
		}
		if err := inH.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: in.HostV6.AsSlice(),
			Dst: ipnet(netip.MustParsePrefix("::/0"))}); err != nil {
			return fmt.Errorf("internet default route v6: %w", err)
		}
	}

	if err := in.makeCA(); err != nil {
		return err
	}
	return in.startServers()
}

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func waitOperUp(h *netlink.Handle, name string) error {
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("link %s still %s after 3s", name, l.Attrs().OperState)
		}
	}
}

// ipv6Enabled reports whether IPv6 is on for link in ns.
func ipv6Enabled(ns netns.NsHandle, link string) bool {
	on := false
	Do(ns, func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + link + "/disable_ipv6")
		on = err == nil && strings.TrimSpace(string(b)) == "0"
		return nil
	})
	return on
}

// Netns is the internet's namespace (owned by the Internet).
func (in *Internet) Netns() netns.NsHandle { return in.ns }

// Do runs fn on a thread inside the internet namespace (see Do).
func (in *Internet) Do(fn func() error) error { return Do(in.ns, fn) }

// Listen opens a listener inside the internet namespace for a test's own
// server (net.Listen semantics); the caller closes it.
func (in *Internet) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := in.Do(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// CAPool holds the CA that signs every HTTPS server certificate.
func (in *Internet) CAPool() *x509.CertPool { return in.pool.Clone() }

// TLSConfig is a server configuration presenting certificates from the
// internet's CA (issued for whatever name the client asks), offering h2
// and http/1.1, for a test's own HTTPS server on Listen.
func (in *Internet) TLSConfig() *tls.Config {
	return &tls.Config{GetCertificate: in.certificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
}

// CAPEM is that CA in PEM form.
func (in *Internet) CAPEM() []byte { return append([]byte(nil), in.caPEM...) }

// CAFile is the path of a file holding CAPEM (for curl --cacert and
// SSL_CERT_FILE).
func (in *Internet) CAFile() string { return in.caFile }

// HostsFile writes names (host name -> address, e.g. "allowed.test" ->
// in.V4[0].String()) to a new hosts file and returns its path. Bad input
// fails the test.
func (in *Internet) HostsFile(names map[string]string) string {
	in.t.Helper()
	p, err := tempHostsFile(in.tmp, names)
	if err != nil {
		in.t.Fatalf("nettest: %v", err)
	}
	return p
}

// Hits returns, in arrival order, everything that reached the servers.
func (in *Internet) Hits() []Hit {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Hit(nil), in.hits...)
}

// ICMPEchoRequests counts the ICMP echo requests (pings) the internet
// namespace has received, from its IP MIB.
func (in *Internet) ICMPEchoRequests() (int, error) {
	n := -1
	err := in.Do(func() error {
		f, err := os.Open("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		defer f.Close()
		var header []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) == 0 || fields[0] != "Icmp:" {
				continue
			}
			if header == nil {
				header = fields
				continue
			}
			for i, h := range header {
				if h == "InEchos" && i < len(fields) {
					n, err = strconv.Atoi(fields[i])
					return err
				}
			}
		}
		return errors.New("no Icmp InEchos in /proc/net/snmp")
	})
	return n, err
}

func (in *Internet) record(h Hit) {
	in.mu.Lock()
	in.hits = append(in.hits, h)
	in.mu.Unlock()
}

func addrPortOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

func (in *Internet) startServers() error {
	listen := func(port int) (net.Listener, error) {
		l, err := in.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			return nil, fmt.Errorf("listen :%d in the internet: %w", port, err)
		}
		return l, nil
	}
	httpL, err := listen(HTTPPort)
	if err != nil {
		return err
	}
	httpsL, err := listen(HTTPSPort)
	if err != nil {
		httpL.Close()
		return err
	}
	echoL, err := listen(EchoPort)
	if err != nil {
		httpL.Close()
		httpsL.Close()
		return err
	}
	echo2L, err := listen(EchoAltPort)
	if err != nil {
		httpL.Close()
		httpsL.Close()
		echoL.Close()
		return err
	}
	var udps []net.PacketConn
	var dnss []net.PacketConn
	closeAll := func() {
		httpL.Close()
		httpsL.Close()
		echoL.Close()
		echo2L.Close()
		for _, u := range dnss {
			u.Close()
		}
		for _, u := range udps {
			u.Close()
		}
	}
	listenUDP := func(addrs []netip.Addr, port uint16, into *[]net.PacketConn) error {
		for _, a := range addrs {
			var pc net.PacketConn
			ap := netip.AddrPortFrom(a, port).String()
			if err := in.Do(func() (err error) {
				pc, err = net.ListenPacket("udp", ap)
				return err
			}); err != nil {
				closeAll()
				return fmt.Errorf("listen udp %s in the internet: %w", ap, err)
			}
			*into = append(*into, pc)
		}
		return nil
	}
	if err := listenUDP(append(append([]netip.Addr(nil), in.V4...), in.V6...), DiscardPort, &udps); err != nil {
		return err
	}
	if err := listenUDP(in.V4, DNSPort, &dnss); err != nil {
		return err
	}

	newServer := func(kind string) *http.Server {
		return &http.Server{Handler: in.handler(kind), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: log.New(io.Discard, "", 0), TLSConfig: &tls.Config{GetCertificate: in.certificate, MinVersion: tls.VersionTLS12}}
	}
	plain, secure := newServer("http"), newServer("https")
	in.goServe(func() { plain.Serve(httpL) })
	in.goServe(func() { secure.Serve(tls.NewListener(httpsL, secure.TLSConfig)) })
	in.goServe(func() { in.serveEcho(echoL) })
	in.goServe(func() { in.serveEcho(echo2L) })
	for _, u := range udps {
		in.goServe(func() { in.serveDiscard(u, "udp") })
	}
	for _, u := range dnss {
		in.goServe(func() { in.serveDiscard(u, "dns") })
	}

	in.t.Cleanup(func() {
		in.mu.Lock()
		in.closing = true
		for c := range in.conns {
			c.Close()
		}
		in.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		plain.Shutdown(ctx)
		secure.Shutdown(ctx)
		plain.Close()
		secure.Close()
		closeAll()
		in.wg.Wait()
	})
	return nil
}

func (in *Internet) goServe(fn func()) {
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		fn()
	}()
}

// handler answers every request with a JSON description of it; GET
// /bytes?n=N streams N bytes (at most 1 GiB) for throughput tests, and a
// PUT or POST to /bytes reads the body to its end, discarding it, and
// answers how many bytes came (uploads).
func (in *Internet) handler(kind string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		remote, _ := netip.ParseAddrPort(r.RemoteAddr)
		h := Hit{Server: kind, Local: addrPortOf(local), Remote: netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port()),
			Host: r.Host, Method: r.Method, Path: r.URL.Path}
		if r.TLS != nil {
			h.SNI = r.TLS.ServerName
		}
		in.record(h)
		w.Header().Set("X-Nettest-Server", kind)
		if r.URL.Path == "/bytes" && (r.Method == http.MethodPut || r.Method == http.MethodPost) {
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]int64{"received": n})
			return
		}
		if r.URL.Path == "/bytes" {
			n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			if err != nil || n < 0 || n > 1<<30 {
				http.Error(w, "n: want 0..1073741824", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			io.CopyN(w, zeros{}, n)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"server": kind, "host": h.Host, "sni": h.SNI, "method": h.Method, "path": h.Path,
			"local": h.Local.String(), "remote": h.Remote.String(),
		})
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func (in *Internet) track(c net.Conn) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closing {
		return false
	}
	in.conns[c] = struct{}{}
	return true
}

func (in *Internet) untrack(c net.Conn) {
	in.mu.Lock()
	delete(in.conns, c)
	in.mu.Unlock()
}

// serveEcho copies every connection back to itself, honouring
// half-close. It copies through a buffer rather than splice(2), whose
// pooled pipes would stay open after the test and look like fd leaks.
func (in *Internet) serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		if !in.track(c) {
			c.Close()
			return
		}
		in.record(Hit{Server: "echo", Local: addrPortOf(c.LocalAddr()), Remote: addrPortOf(c.RemoteAddr())})
		in.goServe(func() {
			defer in.untrack(c)
			defer c.Close()
			io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, make([]byte, 32<<10))
			if tc, ok := c.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
		})
	}
}

// serveDiscard records every datagram as a hit of server kind and
// answers none.
func (in *Internet) serveDiscard(pc net.PacketConn, kind string) {
	buf := make([]byte, 64<<10)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		in.record(Hit{Server: kind, Local: addrPortOf(pc.LocalAddr()), Remote: addrPortOf(from)})
	}
}

func (in *Internet) makeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Palisade nettest CA", Organization: []string{"palisade nettest"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(48 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if in.caCert, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	in.caKey = key
	if in.leaf, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return err
	}
	in.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	in.caFile = filepath.Join(in.tmp, "nettest-ca.pem")
	if err := os.WriteFile(in.caFile, in.caPEM, 0o644); err != nil {
		return err
	}
	in.pool = x509.NewCertPool()
	in.pool.AddCert(in.caCert)
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}

// ServerPEM issues a server certificate from the internet's CA (which
// CAPEM holds) for addresses outside the internet, such as a test's own
// TLS server on loopback, and returns it and its private key in PEM.
func (in *Internet) ServerPEM(addrs ...netip.Addr) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "nettest server"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, a := range addrs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, in.caCert, &key.PublicKey, in.caKey)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}

// certificate issues (once per name and address) a leaf for the TLS
// server name the client asked for, or for the address it dialled.
func (in *Internet) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	var ip netip.Addr
	if hello.Conn != nil {
		ip = addrPortOf(hello.Conn.LocalAddr()).Addr()
	}
	key := name + "|" + ip.String()
	in.mu.Lock()
	defer in.mu.Unlock()
	if c, ok := in.certs[key]; ok {
		return c, nil
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if name != "" {
		tmpl.DNSNames = []string{name}
	} else {
		tmpl.Subject.CommonName = ip.String()
	}
	if ip.IsValid() {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, in.caCert, &in.leaf.PublicKey, in.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: in.leaf}
	in.certs[key] = c
	return c, nil
}
