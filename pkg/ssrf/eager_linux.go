//go:build linux

package ssrf

import (
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// eagerConnect starts the TCP connect to ap itself, from the dialer's
// Control hook, before package net's own connect(2) on the same socket.
//
// Why: net's dialer answers EINPROGRESS by parking the goroutine until
// the runtime's poller next runs, and the poller runs only after every
// goroutine already runnable has had its turn. Towards a peer whose
// handshake completes inside the connect call (a veth or loopback peer,
// where the kernel processes the SYN-ACK before returning), the
// connection is up at once, yet the dial waited behind the other
// connections' work: about 20-30 µs of a proxied connection's setup on
// a busy single-CPU proxy (see docs/egress-proxy.md, Performance).
//
// How: net's connect(2) that follows on the same non-blocking socket
// reports the state the kernel holds: 0 when established (net then skips
// the wait, the poller round trip and its SO_ERROR read), EALREADY while
// the handshake is still under way (net waits as usual) and the
// handshake's error when it failed. The number of system calls is the
// same as net's own path (connect, connect against connect, getsockopt).
//
// Only when the address net is about to connect to is exactly ap, so the
// socket can never be connected anywhere but the checked address; an
// error here is ignored, leaving net to connect (and report) on its own.
func eagerConnect(ap netip.AddrPort) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		if got, err := netip.ParseAddrPort(address); err != nil || got != ap {
			return nil
		}
		sa := sockaddr(ap)
		if sa == nil {
			return nil
		}
		c.Control(func(fd uintptr) { unix.Connect(int(fd), sa) })
		return nil
	}
}

// sockaddr is the socket address net's dialer uses for ap: IPv4 (also
// when written IPv4-mapped, as net dials it on an AF_INET socket) or
// IPv6 without a zone; nil for zoned IPv6, which eagerConnect leaves to
// net.
func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	a := ap.Addr()
	if a.Unmap().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.Unmap().As4()}
	}
	if a.Zone() != "" {
		return nil
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
}
