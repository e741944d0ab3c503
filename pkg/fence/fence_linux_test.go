//go:build linux

package fence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

const (
	testProxyPort = 3128
	testFencePort = 3129
)

// lab is a throwaway host namespace standing in for the host, and a
// state dir; sandboxes are further namespaces.
type lab struct {
	t        testing.TB
	hostName string
	host     netns.NsHandle
	stateDir string
}

func newLab(t testing.TB) *lab {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "nftables")
	name, h := testutil.NamedNetns(t, "fh")
	return &lab{t: t, hostName: name, host: h, stateDir: t.TempDir()}
}

func (l *lab) hostPath() string { return "/run/netns/" + l.hostName }

// sandbox makes a fresh named namespace and returns its path and handle.
func (l *lab) sandbox() (string, netns.NsHandle) {
	name, h := testutil.NamedNetns(l.t, "fs")
	return "/run/netns/" + name, h
}

func (l *lab) config(netnsPath string) Config {
	return Config{
		Sandbox:   testutil.UniqueName("t-"),
		NetnsPath: netnsPath,
		HostNetns: l.hostPath(),
		StateDir:  l.stateDir,
		ProxyPort: testProxyPort,
		FencePort: testFencePort,
	}
}

func (l *lab) setup(cfg Config) *Fence {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := Setup(ctx, cfg)
	if err != nil {
		l.t.Fatalf("Setup: %v", err)
	}
	l.t.Cleanup(func() {
		if err := f.Teardown(); err != nil {
			l.t.Errorf("Teardown: %v", err)
		}
	})
	return f
}

func (l *lab) leftovers() []string {
	l.t.Helper()
	got, err := Config{HostNetns: l.hostPath(), StateDir: l.stateDir}.Leftovers()
	if err != nil {
		l.t.Fatal(err)
	}
	return got
}

func (l *lab) listen(addr netip.AddrPort) *net.TCPListener {
	l.t.Helper()
	var ln net.Listener
	if err := nettest.Do(l.host, func() (err error) {
		ln, err = net.Listen("tcp", addr.String())
		return err
	}); err != nil {
		l.t.Fatalf("listen %s in host netns: %v", addr, err)
	}
	l.t.Cleanup(func() { ln.Close() })
	return ln.(*net.TCPListener)
}

func dialFrom(ns netns.NsHandle, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := nettest.Do(ns, func() (err error) {
		c, err = net.DialTimeout(network, addr, 2*time.Second)
		return err
	})
	return c, err
}

func readSysctl(t *testing.T, ns netns.NsHandle, path string) string {
	t.Helper()
	var v string
	if err := nettest.Do(ns, func() error {
		b, err := os.ReadFile("/proc/sys/" + path)
		v = strings.TrimSpace(string(b))
		return err
	}); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return v
}

func writeSysctl(t *testing.T, ns netns.NsHandle, path, value string) {
	t.Helper()
	if err := nettest.Do(ns, func() error {
		return os.WriteFile("/proc/sys/"+path, []byte(value), 0)
	}); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

func tableExists(t *testing.T, ns netns.NsHandle, name string) bool {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(tables, func(tb *nftables.Table) bool { return tb.Name == name })
}

func linkExists(t *testing.T, ns netns.NsHandle, name string) bool {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	_, err = h.LinkByName(name)
	return err == nil
}

// acceptOne accepts one connection on ln (bounded) and hands it to fn.
func acceptOne(t *testing.T, ln *net.TCPListener, fn func(*net.TCPConn)) chan error {
	done := make(chan error, 1)
	go func() {
		ln.SetDeadline(time.Now().Add(5 * time.Second))
		c, err := ln.AcceptTCP()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		fn(c)
		done <- nil
	}()
	return done
}

// The whole fence, end to end: the proxy is reachable, every other TCP
// connection is captured with its original destination, nothing else
// leaves, nothing is forwarded even with forwarding on, IPv6 and MPTCP
// are off, lo works, and Teardown removes everything.
func TestFenceRoundTrip(t *testing.T) {
	testutil.CheckFDLeaks(t)
	l := newLab(t)
	sbxPath, sbx := l.sandbox()
	cfg := l.config(sbxPath)
	f := l.setup(cfg)

	if f.HostIf != HostIfName(cfg.Sandbox) || f.Table != TableName(cfg.Sandbox) || !DefaultPool.Contains(f.HostAddr) ||
		f.Prefix.Bits() != 30 || !f.Prefix.Contains(f.SandboxAddr) || f.HostAddr.Next() != f.SandboxAddr {
		t.Fatalf("fence %+v", f)
	}
	if f.ProxyAddr() != netip.AddrPortFrom(f.HostAddr, testProxyPort) || f.FenceAddr() != netip.AddrPortFrom(f.HostAddr, testFencePort) {
		t.Fatalf("proxy %s fence %s", f.ProxyAddr(), f.FenceAddr())
	}

	if v := readSysctl(t, l.host, "net/ipv4/conf/"+f.HostIf+"/forwarding"); v != "0" {
		t.Errorf("host side forwarding = %s", v)
	}
	if v := readSysctl(t, l.host, "net/ipv4/conf/"+f.HostIf+"/rp_filter"); v != "1" {
		t.Errorf("host side rp_filter = %s", v)
	}
	// A fake internet behind the host, which forwards IPv4 (turning it on
	// also turns it back on for the veth): the fence must not rely on the
	// host's forwarding being off.
	inet := nettest.NewInternet(t, nettest.WithHostNetns(l.host))
	writeSysctl(t, l.host, "net/ipv4/ip_forward", "1")
	target := netip.AddrPortFrom(inet.V4[0], nettest.HTTPPort)

	proxyLn := l.listen(f.ProxyAddr())
	fenceLn := l.listen(f.FenceAddr())

	t.Run("proxy reachable", func(t *testing.T) {
		done := acceptOne(t, proxyLn, func(c *net.TCPConn) {
			if od, err := OriginalDst(c); err != nil || od != f.ProxyAddr() {
				t.Errorf("OriginalDst of a direct connection: %v %v, want %s", od, err, f.ProxyAddr())
			}
			if ra := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr(); ra != f.SandboxAddr {
				t.Errorf("proxy sees the sandbox as %s, want %s", ra, f.SandboxAddr)
			}
			io.WriteString(c, "proxy")
		})
		c, err := dialFrom(sbx, "tcp", f.ProxyAddr().String())
		if err != nil {
			t.Fatalf("dial proxy from sandbox: %v", err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(c)
		if string(b) != "proxy" {
			t.Fatalf("read %q from the proxy", b)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("other TCP captured", func(t *testing.T) {
		for _, dst := range []netip.AddrPort{
			target,
			netip.MustParseAddrPort("203.0.113.9:443"),
			netip.AddrPortFrom(f.HostAddr, 22),            // the host itself
			netip.AddrPortFrom(f.HostAddr, testFencePort), // the fence port directly
		} {
			var got netip.AddrPort
			done := acceptOne(t, fenceLn, func(c *net.TCPConn) {
				var err error
				if got, err = OriginalDst(c); err != nil {
					t.Errorf("OriginalDst: %v", err)
				}
				// Closing at once is the fence listener's answer.
			})
			start := time.Now()
			c, err := dialFrom(sbx, "tcp", dst.String())
			if err != nil {
				t.Fatalf("dial %s from sandbox: %v", dst, err)
			}
			c.SetDeadline(time.Now().Add(3 * time.Second))
			n, _ := c.Read(make([]byte, 1))
			c.Close()
			if err := <-done; err != nil {
				t.Fatalf("%s: fence listener: %v", dst, err)
			}
			if got != dst {
				t.Errorf("fence listener saw original destination %s, want %s", got, dst)
			}
			if n != 0 || time.Since(start) > time.Second {
				t.Errorf("%s: client read %d bytes, ended after %s", dst, n, time.Since(start))
			}
		}
		for _, h := range inet.Hits() {
			t.Errorf("reached the internet: %+v", h)
		}
	})

	t.Run("fence listener down refuses fast", func(t *testing.T) {
		// A second fence whose listener is not running: the host answers
		// with a reset, never a timeout.
		start := time.Now()
		fenceLn.Close()
		c, err := dialFrom(sbx, "tcp", target.String())
		if err == nil {
			c.Close()
			t.Fatal("connected with no fence listener")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
			t.Fatalf("got %v after %s, want connection refused at once", err, time.Since(start))
		}
	})

	t.Run("UDP ICMP IPv6 blocked", func(t *testing.T) {
		echoes, err := inet.ICMPEchoRequests()
		if err != nil {
			t.Fatal(err)
		}
		err = nettest.Do(sbx, func() error {
			u, err := net.Dial("udp", netip.AddrPortFrom(inet.V4[0], nettest.DiscardPort).String())
			if err != nil {
				return fmt.Errorf("udp socket: %w", err)
			}
			defer u.Close()
			if _, err := u.Write([]byte("leak")); !errors.Is(err, syscall.EPERM) {
				return fmt.Errorf("udp send: %v, want EPERM", err)
			}
			// DNS to an outside resolver, the classic exfiltration path.
			d, err := net.Dial("udp", "198.51.100.53:53")
			if err != nil {
				return err
			}
			defer d.Close()
			if _, err := d.Write([]byte("q")); !errors.Is(err, syscall.EPERM) {
				return fmt.Errorf("dns send: %v, want EPERM", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := nettest.Ping(ctx, inet.V4[0]); !errors.Is(err, syscall.EPERM) {
				return fmt.Errorf("ping: %v, want EPERM", err)
			}
			start := time.Now()
			if c, err := net.DialTimeout("tcp6", "[2001:db8::10]:80", 2*time.Second); err == nil {
				c.Close()
				return errors.New("IPv6 TCP connected")
			}
			if time.Since(start) > time.Second {
				return fmt.Errorf("IPv6 dial took %s", time.Since(start))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if n, _ := inet.ICMPEchoRequests(); n != echoes {
			t.Errorf("the internet received %d pings", n-echoes)
		}
		for _, h := range inet.Hits() {
			t.Errorf("reached the internet: %+v", h)
		}
		for _, p := range []string{"all", "default", "lo", SandboxIf} {
			if v := readSysctl(t, sbx, "net/ipv6/conf/"+p+"/disable_ipv6"); v != "1" {
				t.Errorf("sandbox net.ipv6.conf.%s.disable_ipv6 = %s", p, v)
			}
		}
		if v := readSysctl(t, l.host, "net/ipv6/conf/"+f.HostIf+"/disable_ipv6"); v != "1" {
			t.Errorf("host side %s disable_ipv6 = %s", f.HostIf, v)
		}
		h, err := netlink.NewHandleAt(sbx)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Delete()
		if addrs, _ := h.AddrList(nil, netlink.FAMILY_V6); len(addrs) != 0 {
			t.Errorf("sandbox has IPv6 addresses %v", addrs)
		}
	})

	t.Run("MPTCP and forwarding off", func(t *testing.T) {
		if _, err := os.Stat("/proc/sys/net/mptcp/enabled"); err == nil {
			if v := readSysctl(t, sbx, "net/mptcp/enabled"); v != "0" {
				t.Errorf("sandbox net.mptcp.enabled = %s", v)
			}
			err := nettest.Do(sbx, func() error {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)
				if err == nil {
					unix.Close(fd)
					return errors.New("an MPTCP socket was created")
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		} else {
			t.Log("kernel without MPTCP: nothing to disable")
		}
		if v := readSysctl(t, sbx, "net/ipv4/ip_forward"); v != "0" {
			t.Errorf("sandbox ip_forward = %s", v)
		}
	})

	t.Run("loopback inside works", func(t *testing.T) {
		var ln net.Listener
		if err := nettest.Do(sbx, func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				io.WriteString(c, "lo")
				c.Close()
			}
		}()
		c, err := dialFrom(sbx, "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if b, _ := io.ReadAll(c); string(b) != "lo" {
			t.Fatalf("read %q over lo", b)
		}
	})

	// The host side alone must hold: remove the sandbox's own table (as
	// if it had been lost) and try again. Then remove the host table
	// too, to show the topology would leak without it, so the checks
	// above can fail.
	t.Run("host side holds alone", func(t *testing.T) {
		if err := deleteTable(sbx, SandboxTable); err != nil {
			t.Fatal(err)
		}
		echoes, _ := inet.ICMPEchoRequests()
		send := func() error {
			return nettest.Do(sbx, func() error {
				u, err := net.Dial("udp", netip.AddrPortFrom(inet.V4[0], nettest.DiscardPort).String())
				if err != nil {
					return err
				}
				defer u.Close()
				_, err = u.Write([]byte("leak"))
				return err
			})
		}
		if err := send(); err != nil {
			t.Fatalf("without the sandbox table a UDP send should leave the sandbox: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := nettest.Do(sbx, func() error { return nettest.Ping(ctx, inet.V4[0]) }); err == nil {
			t.Error("ping answered through the host")
		}
		// This time a dual-stack wildcard listener: OriginalDst must work
		// on the IPv4-mapped socket too.
		fenceLn2 := l.listen(netip.AddrPortFrom(netip.IPv6Unspecified(), testFencePort))
		var got netip.AddrPort
		done := acceptOne(t, fenceLn2, func(c *net.TCPConn) { got, _ = OriginalDst(c) })
		if c, err := dialFrom(sbx, "tcp", target.String()); err != nil {
			t.Errorf("TCP with only the host table: %v", err)
		} else {
			c.Close()
		}
		if err := <-done; err != nil || got != target {
			t.Errorf("with only the host table TCP went to %s (%v), want the fence listener with %s", got, err, target)
		}
		time.Sleep(300 * time.Millisecond)
		if n, _ := inet.ICMPEchoRequests(); n != echoes {
			t.Errorf("the internet received %d pings", n-echoes)
		}
		if hits := inet.Hits(); len(hits) != 0 {
			t.Fatalf("reached the internet with only the host table: %+v", hits)
		}

		// Now without the host table: the same datagram arrives.
		if err := deleteTable(l.host, f.Table); err != nil {
			t.Fatal(err)
		}
		if err := send(); err != nil {
			t.Fatal(err)
		}
		leaked := false
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !leaked; time.Sleep(20 * time.Millisecond) {
			for _, h := range inet.Hits() {
				leaked = leaked || (h.Server == "udp" && h.Remote.Addr() == f.SandboxAddr)
			}
		}
		if !leaked {
			t.Fatal("with no fence at all the datagram still did not arrive: this test cannot see a leak")
		}
	})

	if err := f.Teardown(); err != nil {
		t.Fatal(err)
	}
	if linkExists(t, l.host, f.HostIf) || linkExists(t, sbx, SandboxIf) {
		t.Error("veth survived Teardown")
	}
	if tableExists(t, l.host, f.Table) {
		t.Error("host table survived Teardown")
	}
	if _, err := os.Stat(recordPath(l.stateDir, f.Sandbox)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record survived Teardown: %v", err)
	}
	if got := l.leftovers(); len(got) != 0 {
		t.Errorf("leftovers after Teardown: %v", got)
	}
	if err := f.Teardown(); err != nil {
		t.Errorf("second Teardown: %v", err)
	}
}

// Concurrent sandboxes get distinct /30s, and a network the host
// already uses inside the pool is skipped.
func TestFenceConcurrentAllocation(t *testing.T) {
	l := newLab(t)
	h, err := netlink.NewHandleAt(l.host)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	// A host network inside the pool (on a veth: this kernel may lack
	// the dummy driver).
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "busy0"}, PeerName: "busy1"}); err != nil {
		t.Fatal(err)
	}
	dummy, err := h.LinkByName("busy0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(dummy, &netlink.Addr{IPNet: ipnet(netip.MustParseAddr("10.77.0.1"), 24)}); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(dummy); err != nil {
		t.Fatal(err)
	}
	pool := netip.MustParsePrefix("10.77.0.0/23")

	const n = 6
	fences := make([]*Fence, n)
	errs := make([]error, n)
	cfgs := make([]Config, n)
	for i := range cfgs {
		p, _ := l.sandbox()
		cfgs[i] = l.config(p)
		cfgs[i].Pool = pool
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fences[i], errs[i] = Setup(context.Background(), cfgs[i])
		}()
	}
	wg.Wait()
	seen := map[netip.Prefix]string{}
	for i, f := range fences {
		if errs[i] != nil {
			t.Fatalf("Setup %d: %v", i, errs[i])
		}
		t.Cleanup(func() { f.Teardown() })
		if other, dup := seen[f.Prefix]; dup {
			t.Errorf("%s and %s both got %s", other, f.Sandbox, f.Prefix)
		}
		seen[f.Prefix] = f.Sandbox
		if f.Prefix.Addr().As4()[2] != 1 {
			t.Errorf("%s allocated inside the host's 10.77.0.0/24", f.Prefix)
		}
	}
	got := l.leftovers()
	if len(got) != n {
		t.Errorf("Leftovers lists %d sandboxes, want %d: %v", len(got), n, got)
	}
}

// An exhausted pool, a namespace that is not fresh and a namespace that
// is the host all fail, and leave nothing behind.
func TestFenceFailsClosed(t *testing.T) {
	l := newLab(t)
	p1, _ := l.sandbox()
	cfg := l.config(p1)
	cfg.Pool = netip.MustParsePrefix("10.78.0.0/30")
	first := l.setup(cfg)

	p2, sbx2 := l.sandbox()
	cfg2 := l.config(p2)
	cfg2.Pool = cfg.Pool
	if _, err := Setup(context.Background(), cfg2); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("second sandbox in a /30 pool: %v, want exhausted", err)
	}
	if tableExists(t, sbx2, SandboxTable) {
		t.Error("exhausted Setup left the sandbox table")
	}

	// A sandbox namespace that already has an eth0: the veth cannot be
	// made; the tables made before it must go again.
	p3, sbx3 := l.sandbox()
	h3, err := netlink.NewHandleAt(sbx3)
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Delete()
	if err := h3.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: SandboxIf}, PeerName: "other0"}); err != nil {
		t.Fatal(err)
	}
	cfg3 := l.config(p3)
	_, err = Setup(context.Background(), cfg3)
	if err == nil || !strings.Contains(err.Error(), "create veth") {
		t.Fatalf("Setup into a namespace with eth0: %v", err)
	}
	if tableExists(t, l.host, TableName(cfg3.Sandbox)) || tableExists(t, sbx3, SandboxTable) || linkExists(t, l.host, HostIfName(cfg3.Sandbox)) {
		t.Error("failed Setup left objects behind")
	}
	if got := l.leftovers(); !slices.Equal(got, []string{first.Sandbox}) {
		t.Errorf("leftovers %v, want only %s", got, first.Sandbox)
	}

	cfg4 := l.config(l.hostPath())
	if _, err := Setup(context.Background(), cfg4); err == nil || !strings.Contains(err.Error(), "host network namespace") {
		t.Fatalf("fencing the host itself: %v", err)
	}
	cfg5 := l.config("/nonexistent/ns")
	if _, err := Setup(context.Background(), cfg5); err == nil || !strings.Contains(err.Error(), "NetnsPath") {
		t.Fatalf("missing namespace: %v", err)
	}
	// A context that is already done stops Setup before it changes
	// anything.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p6, _ := l.sandbox()
	cfg6 := l.config(p6)
	if _, err := Setup(ctx, cfg6); err == nil {
		t.Fatal("Setup with a cancelled context succeeded")
	}
	if tableExists(t, l.host, TableName(cfg6.Sandbox)) {
		t.Error("cancelled Setup left the host table")
	}
	if _, err := os.Stat(recordPath(l.stateDir, cfg6.Sandbox)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cancelled Setup left a record: %v", err)
	}
}

// A crashed supervisor leaves the host table and record (the veth dies
// with the sandbox namespace). Setup refuses the name until Collect has
// run; Collect removes everything and is harmless when repeated.
func TestFenceCollectAfterCrash(t *testing.T) {
	l := newLab(t)
	// The sandbox is a real process in its own network namespace, as the
	// supervisor sees it: /proc/<pid>/ns/net.
	nsPath, kill := netnsProcess(t)
	cfg := l.config(nsPath)
	f, err := Setup(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sbx, err := netns.GetFromPath(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	proxyLn := l.listen(f.ProxyAddr())
	done := acceptOne(t, proxyLn, func(*net.TCPConn) {})
	c, err := dialFrom(sbx, "tcp", f.ProxyAddr().String())
	sbx.Close()
	if err != nil {
		t.Fatalf("proxy from a process's namespace: %v", err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Crash: the sandbox dies, nobody calls Teardown.
	kill()
	deadline := time.Now().Add(5 * time.Second)
	for linkExists(t, l.host, f.HostIf) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if linkExists(t, l.host, f.HostIf) {
		t.Fatal("veth outlived the sandbox namespace")
	}
	if got := l.leftovers(); !slices.Equal(got, []string{cfg.Sandbox}) {
		t.Fatalf("leftovers %v, want %s", got, cfg.Sandbox)
	}

	p2, _ := l.sandbox()
	again := cfg
	again.NetnsPath = p2
	if _, err := Setup(context.Background(), again); err == nil || !strings.Contains(err.Error(), "gc") {
		t.Fatalf("Setup over a leftover: %v, want a pointer to gc", err)
	}
	collect := Config{Sandbox: cfg.Sandbox, HostNetns: l.hostPath(), StateDir: l.stateDir}
	if err := collect.Collect(); err != nil {
		t.Fatal(err)
	}
	if err := collect.Collect(); err != nil {
		t.Fatalf("second Collect: %v", err)
	}
	if got := l.leftovers(); len(got) != 0 {
		t.Fatalf("leftovers after Collect: %v", got)
	}
	if _, err := os.Stat(filepath.Join(l.stateDir, cfg.Sandbox+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("record after Collect: %v", err)
	}
	f2 := l.setup(again)
	if f2.Prefix != f.Prefix {
		t.Errorf("the collected /30 %s was not reused (got %s)", f.Prefix, f2.Prefix)
	}
	// The first Fence's Teardown must not remove the second's link.
	if err := f.Teardown(); err == nil || !strings.Contains(err.Error(), "another fence") {
		t.Errorf("stale Teardown: %v, want a refusal", err)
	}
	if !linkExists(t, l.host, f2.HostIf) || !tableExists(t, l.host, f2.Table) {
		t.Error("a stale Teardown removed the live fence")
	}
}

// netnsProcess starts a sleeping process in a new network namespace and
// returns its namespace path and a function that kills it (idempotent,
// also run at cleanup).
func netnsProcess(t *testing.T) (string, func()) {
	t.Helper()
	sleep := exec.Command("sleep", "60")
	sleep.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if !killed {
			killed = true
			sleep.Process.Kill()
			sleep.Wait()
		}
	}
	t.Cleanup(kill)
	return fmt.Sprintf("/proc/%d/ns/net", sleep.Process.Pid), kill
}

// CollectOrphans (what sandbox-supervisor gc runs for fences whose
// sandbox state is gone) collects a fence whose namespace died, leaves a
// live fence alone whatever its owner, and leaves a dead one its owner
// still knows.
func TestFenceCollectOrphans(t *testing.T) {
	l := newLab(t)
	livePath, _ := netnsProcess(t)
	deadPath, killDead := netnsProcess(t)
	ownedPath, killOwned := netnsProcess(t)
	live := l.setup(l.config(livePath))
	dead, err := Setup(context.Background(), l.config(deadPath))
	if err != nil {
		t.Fatal(err)
	}
	owned, err := Setup(context.Background(), l.config(ownedPath))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Config{Sandbox: owned.Sandbox, HostNetns: l.hostPath(), StateDir: l.stateDir}.Collect() })
	cfg := Config{HostNetns: l.hostPath(), StateDir: l.stateDir}
	isOwned := func(n string) bool { return n == owned.Sandbox }
	ctx := context.Background()
	if got, err := cfg.CollectOrphans(ctx, isOwned, true); err != nil || len(got) != 0 {
		t.Fatalf("orphans while every namespace lives: %v, %v", got, err)
	}
	killDead()
	killOwned()
	deadline := time.Now().Add(5 * time.Second)
	for (linkExists(t, l.host, dead.HostIf) || linkExists(t, l.host, owned.HostIf)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got, err := cfg.CollectOrphans(ctx, isOwned, false)
	if err != nil || !slices.Equal(got, []string{dead.Sandbox}) {
		t.Fatalf("dry run: %v, %v; want [%s]", got, err, dead.Sandbox)
	}
	if !tableExists(t, l.host, dead.Table) {
		t.Fatal("the dry run collected")
	}
	got, err = cfg.CollectOrphans(ctx, isOwned, true)
	if err != nil || !slices.Equal(got, []string{dead.Sandbox}) {
		t.Fatalf("apply: %v, %v; want [%s]", got, err, dead.Sandbox)
	}
	if tableExists(t, l.host, dead.Table) {
		t.Error("the dead fence's table is still there")
	}
	if _, err := os.Stat(filepath.Join(l.stateDir, dead.Sandbox+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead fence's record: %v", err)
	}
	if !tableExists(t, l.host, live.Table) || !linkExists(t, l.host, live.HostIf) {
		t.Error("the live fence was collected")
	}
	if !tableExists(t, l.host, owned.Table) {
		t.Error("a fence its owner knows was collected")
	}
	if got, err = cfg.CollectOrphans(ctx, isOwned, true); err != nil || len(got) != 0 {
		t.Errorf("second apply: %v, %v", got, err)
	}
}

// BenchmarkSetupTeardown measures one sandbox's fence coming up (ready
// for traffic) and going away, in a throwaway host namespace.
func BenchmarkSetupTeardown(b *testing.B) {
	l := newLab(b)
	paths := make([]string, b.N)
	for i := range paths {
		paths[i], _ = l.sandbox()
	}
	b.ResetTimer()
	for i := range b.N {
		f, err := Setup(context.Background(), l.config(paths[i]))
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Teardown(); err != nil {
			b.Fatal(err)
		}
	}
}

// OriginalDst on connections that were not NATed: without conntrack in
// the namespace it reports ENOENT; with it (any ct rule turns it on) it
// is the local address, over IPv4 and IPv6.
func TestOriginalDstLoopback(t *testing.T) {
	testutil.CheckFDLeaks(t)
	err := testutil.InNetns(t, func(ns netns.NsHandle) error {
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			return err
		}
		defer h.Delete()
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := h.LinkSetUp(lo); err != nil {
			return err
		}
		pair := func(network, addr string) (netip.AddrPort, netip.AddrPort, error) {
			ln, err := net.Listen(network, addr)
			if err != nil {
				return netip.AddrPort{}, netip.AddrPort{}, err
			}
			defer ln.Close()
			c, err := net.Dial(network, ln.Addr().String())
			if err != nil {
				return netip.AddrPort{}, netip.AddrPort{}, err
			}
			defer c.Close()
			s, err := ln.Accept()
			if err != nil {
				return netip.AddrPort{}, netip.AddrPort{}, err
			}
			defer s.Close()
			od, err := OriginalDst(s.(*net.TCPConn))
			return od, s.LocalAddr().(*net.TCPAddr).AddrPort(), err
		}
		if od, _, err := pair("tcp4", "127.0.0.1:0"); !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("without conntrack: %v %v, want ENOENT", od, err)
		}
		err = applyNft(ns, func(c *nftables.Conn) {
			tb := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "ct"})
			ch := c.AddChain(&nftables.Chain{Name: "out", Table: tb, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter})
			c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: concat(ctState(1|2|4|8), counter())})
		})
		if err != nil {
			return err
		}
		for _, a := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
			od, local, err := pair(a.network, a.addr)
			if err != nil || od != local {
				return fmt.Errorf("%s: OriginalDst %v (%v), want the local address %s", a.network, od, err, local)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
