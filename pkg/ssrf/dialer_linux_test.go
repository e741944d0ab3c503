//go:build linux

package ssrf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// acceptLog accepts on l until it is closed and reports each peer's local
// address (the address the client reached).
func acceptLog(l net.Listener) <-chan netip.AddrPort {
	ch := make(chan netip.AddrPort, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(ch)
				return
			}
			ch <- c.LocalAddr().(*net.TCPAddr).AddrPort()
			c.Close()
		}
	}()
	return ch
}

// waitLocalRoute polls until the kernel's local routing table holds ip,
// for up to 2s: IPv6 installs it asynchronously after the address is added,
// and a connection attempted before that fails with ENETUNREACH.
func waitLocalRoute(ip net.IP) error {
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}}
	deadline := time.Now().Add(2 * time.Second)
	for {
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V6, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
		if err == nil && len(rs) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no local route to %s after 2s (%v)", ip, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func expectAccepted(ch <-chan netip.AddrPort, want netip.AddrPort) error {
	select {
	case got := <-ch:
		if got != want {
			return fmt.Errorf("connection reached %s; want %s", got, want)
		}
		return nil
	case <-time.After(2 * time.Second):
		return fmt.Errorf("no connection reached %s", want)
	}
}

func expectNone(ch <-chan netip.AddrPort, what string) error {
	select {
	case got := <-ch:
		return fmt.Errorf("%s: unexpected connection to %s", what, got)
	case <-time.After(50 * time.Millisecond):
		return nil
	}
}

// TestDialerNetns dials real listeners on TEST-NET addresses in a throwaway
// network namespace: the Dialer connects only to checked addresses, never
// re-resolves, falls back in order and honours its timeout.
func TestDialerNetns(t *testing.T) {
	// The runtime's netpoller opens its epoll and eventfd descriptors on
	// first use, for good; open them before counting descriptors.
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		l.Close()
	}
	testutil.CheckFDLeaks(t)
	// testutil.InNetns closes its handle on the original namespace in a
	// deferred call just after it hands back fn's result; let that happen
	// before the leak check runs (cleanups run last-registered first).
	t.Cleanup(func() { time.Sleep(50 * time.Millisecond) })
	err := testutil.InNetns(t, func(netns.NsHandle) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		for _, a := range []string{"198.51.100.10/32", "198.51.100.11/32", "2001:db8::10/128"} {
			if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: netlink.NewIPNet(netip.MustParsePrefix(a).Addr().AsSlice()), Flags: unix.IFA_F_NODAD}); err != nil {
				return fmt.Errorf("add %s: %w", a, err)
			}
		}
		// IPv6 installs the local route of a new address asynchronously;
		// wait (bounded) until the kernel can route to it.
		if err := waitLocalRoute(net.ParseIP("2001:db8::10")); err != nil {
			return err
		}

		// A veth pair whose far end owns no address swallows everything
		// sent to 203.0.113.50 (a permanent neighbour entry spares ARP): a
		// destination that never answers.
		name := testutil.UniqueName("blk")
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		peer, err := netlink.LinkByName(name + "p")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(veth); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("203.0.113.1"), Mask: net.CIDRMask(24, 32)}}); err != nil {
			return err
		}
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: veth.Attrs().Index, State: netlink.NUD_PERMANENT, IP: net.ParseIP("203.0.113.50"), HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 0x50}}); err != nil {
			return fmt.Errorf("add neighbour: %w", err)
		}

		pub, err := net.Listen("tcp", "198.51.100.10:0")
		if err != nil {
			return err
		}
		defer pub.Close()
		port := pub.Addr().(*net.TCPAddr).Port
		loop, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return err
		}
		defer loop.Close()
		v6, err := net.Listen("tcp", fmt.Sprintf("[2001:db8::10]:%d", port))
		if err != nil {
			return err
		}
		defer v6.Close()
		pubC, loopC, v6C := acceptLog(pub), acceptLog(loop), acceptLog(v6)
		pubAP := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.10"), uint16(port))
		v6AP := netip.AddrPortFrom(netip.MustParseAddr("2001:db8::10"), uint16(port))

		hosts, err := ParseHosts(strings.NewReader(`
127.0.0.1      api.test evil.test
198.51.100.10  api.test
198.51.100.11  two.test
198.51.100.10  two.test
2001:db8::10   v6.test
203.0.113.50   slow.test
10.9.9.9       private.test
`))
		if err != nil {
			return err
		}
		ctx := context.Background()
		d := &Dialer{Resolver: hosts, Timeout: 3 * time.Second}
		var errs []error
		check := func(what string, err error) {
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
			}
		}
		dial := func(d *Dialer, host string, exact bool) (netip.AddrPort, error) {
			c, ap, err := d.DialContext(ctx, host, port, exact, nil)
			if err != nil {
				return ap, err
			}
			defer c.Close()
			if got := c.RemoteAddr().(*net.TCPAddr).AddrPort(); got != ap {
				return ap, fmt.Errorf("returned %s but connected to %s", ap, got)
			}
			return ap, nil
		}

		// Loopback listed first is dropped; the public address is dialled.
		ap, err := dial(d, "api.test", true)
		check("api.test", err)
		if ap != pubAP {
			check("api.test", fmt.Errorf("dialled %s; want %s", ap, pubAP))
		}
		check("api.test", expectAccepted(pubC, pubAP))

		// KeepAlive is passed on: 0 turns Go's default on, negative
		// leaves it off.
		for _, ka := range []time.Duration{0, -1} {
			c, _, err := (&Dialer{Resolver: hosts, Timeout: 3 * time.Second, KeepAlive: ka}).DialContext(ctx, "api.test", port, true, nil)
			if err != nil {
				check("keep-alive", err)
				continue
			}
			on := -1
			if rc, err := c.(*net.TCPConn).SyscallConn(); err == nil {
				rc.Control(func(fd uintptr) { on, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE) })
			}
			c.Close()
			if want := map[bool]int{true: 1, false: 0}[ka >= 0]; on != want {
				check("keep-alive", fmt.Errorf("KeepAlive %v: SO_KEEPALIVE %d, want %d", ka, on, want))
			}
			check("keep-alive", expectAccepted(pubC, pubAP))
		}

		// Only loopback: denied, nothing connects.
		_, err = dial(d, "evil.test", true)
		var de *DenyError
		if !errors.As(err, &de) || de.Reason != ReasonLoopback {
			check("evil.test", fmt.Errorf("got %v; want loopback DenyError", err))
		}

		// IPv6.
		ap, err = dial(d, "v6.test", true)
		check("v6.test", err)
		check("v6.test", expectAccepted(v6C, v6AP))

		// Fallback in order: nothing listens on .11, so .10 is next.
		ap, err = dial(d, "two.test", true)
		check("two.test", err)
		if ap != pubAP {
			check("two.test", fmt.Errorf("dialled %s; want %s", ap, pubAP))
		}
		check("two.test", expectAccepted(pubC, pubAP))

		// Never re-resolve: a rebinding resolver answers public first and
		// loopback afterwards; the connection goes to the checked address
		// after exactly one lookup.
		spy := &spyResolver{answers: map[string][][]netip.Addr{"rebind.test": {addrs("198.51.100.10"), addrs("127.0.0.1")}}}
		ap, err = dial(&Dialer{Resolver: spy, Timeout: 3 * time.Second}, "rebind.test", true)
		check("rebind.test", err)
		check("rebind.test", expectAccepted(pubC, pubAP))
		if n := spy.total(); n != 1 {
			check("rebind.test", fmt.Errorf("%d lookups; want 1", n))
		}

		// Literal spellings skip DNS (hex dotted 198.51.100.10).
		ap, err = dial(&Dialer{Resolver: spy, Timeout: 3 * time.Second}, "0xc6.0x33.0x64.0x0a", false)
		check("hex literal", err)
		check("hex literal", expectAccepted(pubC, pubAP))
		if n := spy.total(); n != 1 {
			check("hex literal", fmt.Errorf("literal was looked up (%d lookups)", n))
		}

		// Private address for a wildcard host: denied before connecting.
		_, err = dial(d, "private.test", false)
		if !errors.As(err, &de) || de.Reason != ReasonPrivateNotAllowed {
			check("private.test", fmt.Errorf("got %v; want private_not_allowed", err))
		}

		// The proxy's own address.
		self := &Dialer{Resolver: hosts, Guard: &Guard{Self: addrs("198.51.100.10")}}
		_, err = dial(self, "198.51.100.10", true)
		if !errors.As(err, &de) || de.Reason != ReasonSelf {
			check("self", fmt.Errorf("got %v; want self", err))
		}

		// A destination that never answers is cut at Timeout.
		start := time.Now()
		_, err = dial(&Dialer{Resolver: hosts, Timeout: 300 * time.Millisecond}, "slow.test", true)
		elapsed := time.Since(start)
		if err == nil || errors.As(err, &de) || elapsed < 250*time.Millisecond || elapsed > 2*time.Second {
			check("slow.test", fmt.Errorf("err %v after %v; want a timeout after about 300ms", err, elapsed))
		}

		check("loopback listener", expectNone(loopC, "loopback listener"))
		check("public listener", expectNone(pubC, "public listener"))
		return errors.Join(errs...)
	})
	if err != nil {
		t.Fatal(err)
	}
}
