//go:build linux

package fence

import (
	"context"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

const testTransparentPort = 3130

// testTransparentPorts is the transparent range's size in the tests
// (sandboxnet's default).
const testTransparentPorts = 8

// dialPort dials dst from ns with local port port (SO_REUSEADDR, so a
// port whose last connection is in TIME_WAIT can be bound again).
func dialPort(ns netns.NsHandle, port int, dst netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{
		Timeout:   3 * time.Second,
		LocalAddr: &net.TCPAddr{Port: port},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
			if err != nil {
				return err
			}
			return serr
		},
	}
	var c net.Conn
	err := nettest.Do(ns, func() (err error) {
		c, err = d.Dial("tcp4", dst.String())
		return err
	})
	return c, err
}

// transparentRoundTrip connects from ns, local port port, to the
// synthetic dst through f's redirect to ln, closes from the client first
// (the host's conntrack entry ends in TIME_WAIT, as after any normally
// closed connection) and returns the client address and the original
// destination the listener saw.
func transparentRoundTrip(t *testing.T, ns netns.NsHandle, ln *net.TCPListener, port int, dst netip.AddrPort) (client, orig netip.AddrPort) {
	t.Helper()
	done := acceptOne(t, ln, func(c *net.TCPConn) {
		client = c.RemoteAddr().(*net.TCPAddr).AddrPort()
		var err error
		if orig, err = OriginalDst(c); err != nil {
			t.Errorf("OriginalDst: %v", err)
		}
		c.SetDeadline(time.Now().Add(3 * time.Second))
		io.Copy(io.Discard, c) // until the client's FIN
	})
	c, err := dialPort(ns, port, dst)
	if err != nil {
		t.Fatalf("dial %s from port %d: %v", dst, port, err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(client.Addr().Unmap(), client.Port()), orig
}

// A sandbox that gets the addresses an earlier one had starts with none
// of its connection-tracking state. The earlier sandbox's connection,
// closed normally, leaves an entry in TIME_WAIT; the new sandbox's
// connection from the same client port to another synthetic address is
// redirected to the same transparent port, so without the flush the two
// share a reply tuple and the kernel's NAT moves the new one to another
// source port: the listener sees a client no socket in the sandbox is,
// and the proxy refuses the connection as attribution_failed (seen in
// TestTransparentTCPEpochAcrossProxyRestart: the first connection of a
// fresh sandbox refused, client port 8610 outside the ephemeral range).
// Fails with the flushConntrack call removed from Setup.
func TestFenceReusedAddressStartsClean(t *testing.T) {
	testutil.CheckFDLeaks(t)
	l := newLab(t)
	const clientPort = 40123
	start := func() (*Fence, netns.NsHandle, *net.TCPListener) {
		t.Helper()
		path, ns := l.sandbox()
		cfg := l.config(path)
		cfg.TransparentPort = testTransparentPort
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		f, err := Setup(ctx, cfg)
		if err != nil {
			t.Fatalf("Setup: %v", err)
		}
		var ln net.Listener
		if err := nettest.Do(l.host, func() (err error) {
			ln, err = net.Listen("tcp4", netip.AddrPortFrom(f.HostAddr, testTransparentPort).String())
			return err
		}); err != nil {
			f.Teardown()
			t.Fatalf("listen: %v", err)
		}
		t.Cleanup(func() {
			ln.Close()
			f.Teardown()
		})
		return f, ns, ln.(*net.TCPListener)
	}

	first, ns1, ln1 := start()
	a := netip.MustParseAddrPort("198.18.0.10:7007")
	if client, orig := transparentRoundTrip(t, ns1, ln1, clientPort, a); client != netip.AddrPortFrom(first.SandboxAddr, clientPort) || orig != a {
		t.Fatalf("first sandbox: listener saw %s for %s, want %s:%d for %s", client, orig, first.SandboxAddr, clientPort, a)
	}
	ln1.Close()
	if err := first.Teardown(); err != nil {
		t.Fatal(err)
	}

	second, ns2, ln2 := start()
	if second.Prefix != first.Prefix {
		// The lab's host namespace is the test's own: the lowest free
		// /30 is the one just released.
		t.Fatalf("second sandbox got %s, want the released %s", second.Prefix, first.Prefix)
	}
	b := netip.MustParseAddrPort("198.18.0.11:7007")
	if client, orig := transparentRoundTrip(t, ns2, ln2, clientPort, b); client != netip.AddrPortFrom(second.SandboxAddr, clientPort) || orig != b {
		t.Errorf("second sandbox: listener saw %s for %s, want %s:%d for %s (the earlier sandbox's conntrack entry moved its source port)",
			client, orig, second.SandboxAddr, clientPort, b)
	}
}

// dialAccepted dials dst from the client port in ns (connection i, for
// the messages) and returns the client's end and the end a transparent
// listener of accepted took.
func dialAccepted(t *testing.T, ns netns.NsHandle, clientPort int, dst netip.AddrPort, accepted <-chan *net.TCPConn, i int) (net.Conn, *net.TCPConn) {
	t.Helper()
	c, err := dialPort(ns, clientPort, dst)
	if err != nil {
		t.Fatalf("connection %d: dial %s from port %d: %v", i, dst, clientPort, err)
	}
	select {
	case sc := <-accepted:
		return c, sc
	case <-time.After(5 * time.Second):
		c.Close()
		t.Fatalf("connection %d to %s: no transparent listener accepted it", i, dst)
	}
	return nil, nil
}

// closeClientFirst ends a connection dialAccepted made with the
// client's close first, so the host's conntrack entry ends in
// TIME_WAIT, then drains and closes the listener's end.
func closeClientFirst(c net.Conn, sc *net.TCPConn) {
	c.Close()
	sc.SetDeadline(time.Now().Add(3 * time.Second))
	io.Copy(io.Discard, sc)
	sc.Close()
}

// rangeLab is a lab with a sandbox whose fence has the test's
// transparent range, and listeners on every port of it (rangeListeners).
func rangeLab(t *testing.T) (l *lab, ns netns.NsHandle, f *Fence, accepted <-chan *net.TCPConn) {
	t.Helper()
	l = newLab(t)
	path, ns := l.sandbox()
	cfg := l.config(path)
	cfg.TransparentPort, cfg.TransparentPorts = testTransparentPort, testTransparentPorts
	f = l.setup(cfg)
	return l, ns, f, rangeListeners(t, l, f, testTransparentPort, testTransparentPorts)
}

// rangeListeners listens on every port of f's transparent range in the
// lab's host namespace and returns a channel of what they accept.
func rangeListeners(t *testing.T, l *lab, f *Fence, first, n uint16) <-chan *net.TCPConn {
	t.Helper()
	accepted := make(chan *net.TCPConn, n)
	for p := first; p < first+n; p++ {
		var ln net.Listener
		if err := nettest.Do(l.host, func() (err error) {
			ln, err = net.Listen("tcp4", netip.AddrPortFrom(f.HostAddr, p).String())
			return err
		}); err != nil {
			t.Fatalf("listen on transparent port %d: %v", p, err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.(*net.TCPListener).AcceptTCP()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
	}
	return accepted
}

// A client port reused within one sandbox for another synthetic address
// while its earlier connection is in TIME_WAIT keeps its source port:
// the redirect takes another port of the transparent range instead of
// the kernel's NAT moving the client's port (which the proxy could not
// attribute: attribution_failed). Fails with the redirect to a single
// port (redirectToRange replaced by redirectTo(lo)): the listener sees
// another source port.
func TestFenceTransparentClientPortReuse(t *testing.T) {
	testutil.CheckFDLeaks(t)
	_, ns, f, accepted := rangeLab(t)

	const clientPort = 40124
	seen := map[uint16]bool{}
	for i, dst := range []netip.AddrPort{
		netip.MustParseAddrPort("198.18.0.10:7007"),
		netip.MustParseAddrPort("198.18.0.11:7007"),
		netip.MustParseAddrPort("198.18.0.12:443"),
	} {
		c, sc := dialAccepted(t, ns, clientPort, dst, accepted, i)
		client := sc.RemoteAddr().(*net.TCPAddr).AddrPort()
		local := sc.LocalAddr().(*net.TCPAddr).AddrPort()
		orig, err := OriginalDst(sc)
		closeClientFirst(c, sc) // the host's entry ends in TIME_WAIT
		if err != nil || orig != dst {
			t.Errorf("connection %d: OriginalDst %s %v, want %s", i, orig, err, dst)
		}
		if want := netip.AddrPortFrom(f.SandboxAddr, clientPort); netip.AddrPortFrom(client.Addr().Unmap(), client.Port()) != want {
			t.Errorf("connection %d to %s: listener saw client %s, want %s (the NAT moved the client's port)", i, dst, client, want)
		}
		if seen[local.Port()] {
			t.Errorf("connection %d: transparent port %d again while the earlier connection is in TIME_WAIT", i, local.Port())
		}
		seen[local.Port()] = true
	}
}

// Every port of the transparent range admits only what the synthetic
// range's redirect sent it: the sandbox dialling one directly reaches
// the fence listener, with that port as the original destination.
func TestFenceTransparentRangeNotDirect(t *testing.T) {
	testutil.CheckFDLeaks(t)
	l, ns, f, accepted := rangeLab(t)
	var fenceLn net.Listener
	if err := nettest.Do(l.host, func() (err error) {
		fenceLn, err = net.Listen("tcp4", netip.AddrPortFrom(f.HostAddr, testFencePort).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer fenceLn.Close()
	for _, p := range []uint16{testTransparentPort, testTransparentPort + 3, testTransparentPort + testTransparentPorts - 1} {
		dst := netip.AddrPortFrom(f.HostAddr, p)
		done := acceptOne(t, fenceLn.(*net.TCPListener), func(c *net.TCPConn) {
			if got, err := OriginalDst(c); err != nil || got != dst {
				t.Errorf("fence listener: original destination %s %v, want %s", got, err, dst)
			}
		})
		c, err := dialPort(ns, 0, dst)
		if err != nil {
			t.Fatalf("dial %s: %v", dst, err)
		}
		c.Close()
		if err := <-done; err != nil {
			t.Fatalf("%s: fence listener: %v", dst, err)
		}
		select {
		case sc := <-accepted:
			sc.Close()
			t.Errorf("transparent listener accepted a direct dial of %s", dst)
		default:
		}
	}
}

// A client port the sandbox reused for connections to every port's worth
// of synthetic destinations (their entries in TIME_WAIT, one per port of
// the transparent range) leaves the next connection from it no port: the
// kernel's NAT moves its source port, and the proxy could not attribute
// it. FlushConntrack, which the supervisor calls before it starts a
// sandbox's proxy again (the old proxy's connections are dead, and the
// new one's names get addresses of a new epoch), frees the range: the
// next connection keeps its port. Fails with FlushConntrack doing
// nothing.
func TestFenceFlushConntrackFreesTheRange(t *testing.T) {
	testutil.CheckFDLeaks(t)
	_, ns, f, accepted := rangeLab(t)
	const clientPort = 40126
	roundTrip := func(i int) netip.AddrPort {
		t.Helper()
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(i)}), 7007)
		c, sc := dialAccepted(t, ns, clientPort, dst, accepted, i)
		client := sc.RemoteAddr().(*net.TCPAddr).AddrPort()
		closeClientFirst(c, sc) // the host's entry ends in TIME_WAIT
		return netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
	}
	want := netip.AddrPortFrom(f.SandboxAddr, clientPort)
	for i := range testTransparentPorts {
		if got := roundTrip(i); got != want {
			t.Fatalf("connection %d: listener saw client %s, want %s (a port of the range should have been free)", i, got, want)
		}
	}
	// The clash is real: every port of the range holds an entry from
	// clientPort.
	if got := roundTrip(testTransparentPorts); got == want {
		t.Fatalf("connection %d with the range full: listener saw client %s; want the NAT to have moved the port (this test's premise)", testTransparentPorts, got)
	}
	if err := f.FlushConntrack(); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(testTransparentPorts + 1); got != want {
		t.Errorf("after FlushConntrack: listener saw client %s, want %s (the lingering entries moved the port)", got, want)
	}
	if err := f.Teardown(); err != nil {
		t.Fatal(err)
	}
	if err := f.FlushConntrack(); err == nil {
		t.Error("FlushConntrack after Teardown: no error")
	}
}
