//go:build linux

package nettest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// client returns an HTTP client whose dialer sends every connection to
// target, whatever the URL's host says (so names need no resolver).
func client(target netip.AddrPort, roots *tls.Config) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "tcp", target.String())
			},
			TLSClientConfig:   roots,
			DisableKeepAlives: true,
		},
	}
}

func getJSON(t *testing.T, c *http.Client, url string) map[string]string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: status %s", url, resp.Status)
	}
	var m map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return m
}

// routeVia reports whether ns routes p through the link with index
// ifIndex. Other Internets (other tests, other packages' test binaries
// running at once) claim blocks in the same host namespace, so a route
// to a block is ours only if it goes through our link.
func routeVia(t *testing.T, ns netns.NsHandle, p netip.Prefix, ifIndex int) bool {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	fam := netlink.FAMILY_V4
	if p.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	routes, err := h.RouteList(nil, fam)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst != nil && r.Dst.String() == p.String() && r.LinkIndex == ifIndex {
			return true
		}
	}
	return false
}

// linkIndex is the index of the link named name in ns, or 0 when ns has
// no such link.
func linkIndex(t *testing.T, ns netns.NsHandle, name string) int {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			t.Fatalf("link %s: %v", name, err)
		}
		return 0
	}
	return l.Attrs().Index
}

// The servers answer from the host namespace over the veth: HTTP, HTTPS
// with the CA for any name, echo with half-close, UDP discard, ping,
// IPv6; every arrival is a hit; cleanup removes the link and routes.
func TestInternetServers(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckFDLeaks(t)
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	var in *Internet
	var hostIdx int
	t.Run("live", func(t *testing.T) {
		in = NewInternet(t)
		if !in.Block4.Contains(in.V4[0]) || !netip.MustParsePrefix("198.51.100.0/24").Overlaps(in.Block4) || in.Block4.Bits() != 28 {
			t.Fatalf("block %s, addresses %v", in.Block4, in.V4)
		}
		if hostIdx = linkIndex(t, host, in.HostIf); hostIdx == 0 {
			t.Fatalf("no link %s in the host namespace", in.HostIf)
		}
		if !routeVia(t, host, in.Block4, hostIdx) {
			t.Fatalf("no host route for %s via %s", in.Block4, in.HostIf)
		}

		m := getJSON(t, client(netip.AddrPortFrom(in.V4[0], HTTPPort), nil), "http://example.test/hello")
		if m["server"] != "http" || m["host"] != "example.test" || m["path"] != "/hello" || m["local"] != netip.AddrPortFrom(in.V4[0], HTTPPort).String() {
			t.Fatalf("http answer %v", m)
		}
		if !strings.HasPrefix(m["remote"], in.HostV4.String()+":") {
			t.Fatalf("http client seen as %s, want the host address %s", m["remote"], in.HostV4)
		}

		// An upload to /bytes is read to its end and counted.
		hc := client(netip.AddrPortFrom(in.V4[0], HTTPPort), nil)
		for _, n := range []int64{0, 1, 3<<20 + 7} {
			req, _ := http.NewRequest(http.MethodPut, "http://bulk.test/bytes", io.LimitReader(zeros{}, n))
			req.ContentLength = n
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("PUT %d bytes: %v", n, err)
			}
			var got map[string]int64
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || got["received"] != n {
				t.Fatalf("PUT %d bytes: %s %v %v", n, resp.Status, got, err)
			}
		}

		tlsOK := &tls.Config{RootCAs: in.CAPool(), ServerName: "allowed.test"}
		m = getJSON(t, client(netip.AddrPortFrom(in.V4[1], HTTPSPort), tlsOK), "https://allowed.test/x")
		if m["server"] != "https" || m["sni"] != "allowed.test" {
			t.Fatalf("https answer %v", m)
		}
		// Without the CA the certificate must not verify.
		_, err := client(netip.AddrPortFrom(in.V4[1], HTTPSPort), &tls.Config{ServerName: "allowed.test"}).Get("https://allowed.test/")
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("https without the CA: err=%v, want a certificate error", err)
		}
		// The CA file is the same CA.
		pemBytes, err := os.ReadFile(in.CAFile())
		if err != nil || string(pemBytes) != string(in.CAPEM()) || !strings.Contains(string(pemBytes), "BEGIN CERTIFICATE") {
			t.Fatalf("CA file: %v", err)
		}

		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(in.V4[2], EchoPort).String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "ping over the fake internet")
		c.(*net.TCPConn).CloseWrite()
		back, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(back) != "ping over the fake internet" {
			t.Fatalf("echo: %q, %v", back, err)
		}

		u, err := net.Dial("udp", netip.AddrPortFrom(in.V4[0], DiscardPort).String())
		if err != nil {
			t.Fatal(err)
		}
		u.Write([]byte("datagram"))
		u.Close()

		before, err := in.ICMPEchoRequests()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := Ping(ctx, in.V4[0]); err != nil {
			t.Fatal(err)
		}
		if after, _ := in.ICMPEchoRequests(); after != before+1 {
			t.Fatalf("echo requests counted %d -> %d, want +1", before, after)
		}

		if len(in.V6) > 0 {
			m = getJSON(t, client(netip.AddrPortFrom(in.V6[0], HTTPPort), nil), "http://v6.test/")
			if m["local"] != netip.AddrPortFrom(in.V6[0], HTTPPort).String() {
				t.Fatalf("http over IPv6 answered from %s", m["local"])
			}
		} else {
			t.Log("host has IPv6 disabled: no IPv6 addresses")
		}

		var udpSeen bool
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !udpSeen; time.Sleep(10 * time.Millisecond) {
			for _, h := range in.Hits() {
				udpSeen = udpSeen || (h.Server == "udp" && h.Local == netip.AddrPortFrom(in.V4[0], DiscardPort))
			}
		}
		if !udpSeen {
			t.Error("the UDP datagram was not recorded")
		}
		kinds := map[string]int{}
		for _, h := range in.Hits() {
			kinds[h.Server]++
			if h.Remote.Addr() != in.HostV4 && h.Remote.Addr() != in.HostV6 {
				t.Errorf("hit %+v from %s, want the host address", h, h.Remote)
			}
		}
		wantHTTP := 4 // the GET and three uploads
		if len(in.V6) > 0 {
			wantHTTP++
		}
		// The CA-less attempt fails in the handshake and is no hit.
		if kinds["http"] != wantHTTP || kinds["https"] != 1 || kinds["echo"] != 1 || kinds["udp"] != 1 {
			t.Errorf("hits by server: %v", kinds)
		}
	})
	h, err := netlink.NewHandleAt(host)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	if _, err := h.LinkByName(in.HostIf); err == nil {
		t.Errorf("link %s survived cleanup", in.HostIf)
	}
	// The block itself may be claimed again at once by another test:
	// what must be gone is the route through this Internet's link.
	if routeVia(t, host, in.Block4, hostIdx) {
		t.Errorf("route %s survived cleanup", in.Block4)
	}
	if in.Block6.IsValid() && routeVia(t, host, in.Block6, hostIdx) {
		t.Errorf("route %s survived cleanup", in.Block6)
	}
}

// Two internets at once claim different blocks and each answers on its
// own addresses.
func TestInternetsDoNotCollide(t *testing.T) {
	testutil.RequireRoot(t)
	a, b := NewInternet(t), NewInternet(t)
	if a.Block4.Overlaps(b.Block4) || a.HostIf == b.HostIf || (a.Block6.IsValid() && a.Block6 == b.Block6) {
		t.Fatalf("internets share %s/%s (%s/%s)", a.Block4, b.Block4, a.Block6, b.Block6)
	}
	for _, in := range []*Internet{a, b} {
		m := getJSON(t, client(netip.AddrPortFrom(in.V4[0], HTTPPort), nil), "http://x.test/")
		if m["local"] != netip.AddrPortFrom(in.V4[0], HTTPPort).String() {
			t.Fatalf("answered from %s", m["local"])
		}
	}
	if len(a.Hits()) != 1 || len(b.Hits()) != 1 {
		t.Fatalf("hits a=%d b=%d, want 1 each", len(a.Hits()), len(b.Hits()))
	}
}

// With a throwaway host namespace nothing is routed in the test's own.
func TestInternetWithHostNetns(t *testing.T) {
	_, hostNs := testutil.NamedNetns(t, "nth")
	in := NewInternet(t, WithHostNetns(hostNs))
	self, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	// Another Internet (another test or package running at once) may
	// route the same block in the test's own namespace through its own
	// link: nothing of this one may be there, neither its link nor a
	// route through it.
	if idx := linkIndex(t, self, in.HostIf); idx != 0 {
		t.Fatalf("link %s (routing %s) added to the test's own namespace", in.HostIf, in.Block4)
	}
	idx := linkIndex(t, hostNs, in.HostIf)
	if idx == 0 || !routeVia(t, hostNs, in.Block4, idx) {
		t.Fatalf("route %s via %s missing in the host namespace", in.Block4, in.HostIf)
	}
	err = Do(hostNs, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(in.V4[0], EchoPort).String(), 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		io.WriteString(c, "x")
		b := make([]byte, 1)
		_, err = io.ReadFull(c, b)
		return err
	})
	if err != nil {
		t.Fatalf("echo from the throwaway host namespace: %v", err)
	}
	// HostsFile names the servers.
	p := in.HostsFile(map[string]string{"allowed.test": in.V4[0].String(), "Denied.test": in.V4[1].String()})
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := "# written by palisade nettest\n" + in.V4[0].String() + "\tallowed.test\n" + in.V4[1].String() + "\tdenied.test\n"
	if string(got) != want {
		t.Fatalf("hosts file:\n%s\nwant:\n%s", got, want)
	}
}

func TestDoRestoresThread(t *testing.T) {
	testutil.RequireRoot(t)
	_, ns := testutil.NamedNetns(t, "ntd")
	self, _ := netns.Get()
	defer self.Close()
	var inside netns.NsHandle
	if err := Do(ns, func() (err error) { inside, err = netns.Get(); return err }); err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	if !inside.Equal(ns) {
		t.Fatal("fn did not run in the namespace")
	}
	wantErr := errors.New("boom")
	if err := Do(ns, func() error { return wantErr }); !errors.Is(err, wantErr) {
		t.Fatalf("Do lost fn's error: %v", err)
	}
	after, _ := netns.Get()
	defer after.Close()
	if !after.Equal(self) {
		t.Fatal("caller moved to another namespace")
	}
}
