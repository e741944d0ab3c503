//go:build linux

package ssrf

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
	"golang.org/x/sys/unix"
)

// tcpState is the kernel's TCP state of the socket behind c
// (unix.BPF_TCP_ESTABLISHED, ...; TCP_CLOSE for a socket never connected).
func tcpState(t *testing.T, c syscall.RawConn) uint8 {
	t.Helper()
	var st uint8
	var gerr error
	if err := c.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			gerr = err
			return
		}
		st = info.State
	}); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return st
}

// dialObserved dials addr with control, then records the socket's TCP
// state right after control returned, before net's own connect(2).
func dialObserved(t *testing.T, ctx context.Context, addr string, control func(string, string, syscall.RawConn) error) (net.Conn, uint8, error) {
	t.Helper()
	var state uint8
	d := net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
		if control != nil {
			if err := control(network, address, c); err != nil {
				return err
			}
		}
		state = tcpState(t, c)
		return nil
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	return conn, state, err
}

// echoListener accepts on network/addr and echoes each connection.
func echoListener(t *testing.T, network, addr string) (net.Listener, netip.AddrPort) {
	t.Helper()
	l, err := net.Listen(network, addr)
	testutil.RequireData(t, "a "+network+" loopback address", err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return l, l.Addr().(*net.TCPAddr).AddrPort()
}

func roundTrip(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
}

// TestEagerConnect: towards a loopback peer the connection is up when the
// Control hook returns, so net's connect finds it established and the
// dial does not wait for the poller; without eagerConnect the socket is
// still unconnected at that point (the check can tell the two apart).
func TestEagerConnect(t *testing.T) {
	for _, fam := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(fam.network, func(t *testing.T) {
			_, ap := echoListener(t, fam.network, fam.addr)
			ctx := context.Background()

			c, state, err := dialObserved(t, ctx, ap.String(), eagerConnect(ap))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if state != unix.BPF_TCP_ESTABLISHED {
				t.Fatalf("TCP state after eagerConnect = %d; want established (%d)", state, unix.BPF_TCP_ESTABLISHED)
			}
			if got := c.RemoteAddr().(*net.TCPAddr).AddrPort(); got != ap {
				t.Fatalf("RemoteAddr = %s; want %s", got, ap)
			}
			roundTrip(t, c)

			plain, state, err := dialObserved(t, ctx, ap.String(), nil)
			if err != nil {
				t.Fatal(err)
			}
			plain.Close()
			if state != unix.BPF_TCP_CLOSE {
				t.Fatalf("TCP state before net's connect without eagerConnect = %d; want close (%d)", state, unix.BPF_TCP_CLOSE)
			}
		})
	}
}

// TestEagerConnectOnlyToTheCheckedAddress: when net is about to connect
// to another address than the one checked, eagerConnect does not connect
// the socket at all.
func TestEagerConnectOnlyToTheCheckedAddress(t *testing.T) {
	_, checked := echoListener(t, "tcp4", "127.0.0.1:0")
	_, other := echoListener(t, "tcp4", "127.0.0.1:0")
	c, state, err := dialObserved(t, context.Background(), other.String(), eagerConnect(checked))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if state != unix.BPF_TCP_CLOSE {
		t.Fatalf("TCP state = %d; eagerConnect connected a socket meant for %s (checked %s)", state, other, checked)
	}
	if got := c.RemoteAddr().(*net.TCPAddr).AddrPort(); got != other {
		t.Fatalf("RemoteAddr = %s; want %s", got, other)
	}
}

// TestEagerConnectRefused: a refused connection is reported as net
// reports it.
func TestEagerConnectRefused(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	l.Close()
	_, _, err = dialObserved(t, context.Background(), ap.String(), eagerConnect(ap))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a closed port: %v; want ECONNREFUSED", err)
	}
}

// TestEagerConnectInProgress: when the handshake is not done by the time
// the hook returns (the listener's accept queue is full, so it drops the
// SYN until the client retransmits it), net waits for it as usual: the
// dial honours its deadline, and succeeds once the listener has room.
func TestEagerConnectInProgress(t *testing.T) {
	// A listener with backlog 0: its accept queue holds one connection.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	// shutdown first: close alone would leave the accepting goroutine
	// below blocked in accept(2) for good.
	t.Cleanup(func() { unix.Shutdown(fd, unix.SHUT_RDWR); unix.Close(fd) })
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))

	// Fill the queue: dial until a handshake does not complete at once.
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	var state uint8
	for i := 0; ; i++ {
		if i == 8 {
			t.Fatalf("every handshake completed at once with a full accept queue (last state %d)", state)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		var c net.Conn
		c, state, err = dialObserved(t, ctx, ap.String(), eagerConnect(ap))
		cancel()
		if state == unix.BPF_TCP_SYN_SENT {
			// net waited, and gave up at the deadline.
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("dial with its handshake pending past the deadline: %v; want a timeout", err)
			}
			break
		}
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		held = append(held, c)
	}

	// Again, and make room while it waits: the retransmitted SYN gets in.
	go func() {
		time.Sleep(100 * time.Millisecond)
		for {
			nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
			if err != nil {
				return
			}
			unix.Close(nfd)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, state, err := dialObserved(t, ctx, ap.String(), eagerConnect(ap))
	if err != nil {
		t.Fatalf("dial once the listener has room: %v", err)
	}
	c.Close()
	if state != unix.BPF_TCP_SYN_SENT {
		t.Fatalf("TCP state after eagerConnect = %d; want SYN sent (%d)", state, unix.BPF_TCP_SYN_SENT)
	}
}

func TestSockaddr(t *testing.T) {
	v4 := sockaddr(netip.MustParseAddrPort("198.51.100.7:443"))
	if sa, ok := v4.(*unix.SockaddrInet4); !ok || sa.Port != 443 || sa.Addr != [4]byte{198, 51, 100, 7} {
		t.Errorf("IPv4: %#v", v4)
	}
	v6 := sockaddr(netip.MustParseAddrPort("[2001:db8::7]:443"))
	if sa, ok := v6.(*unix.SockaddrInet6); !ok || sa.Port != 443 || sa.Addr != netip.MustParseAddr("2001:db8::7").As16() {
		t.Errorf("IPv6: %#v", v6)
	}
	for _, s := range []string{"[::ffff:198.51.100.7]:443", "[fe80::1%lo]:443"} {
		if sa := sockaddr(netip.MustParseAddrPort(s)); sa != nil {
			t.Errorf("%s: %#v; want nil (left to net)", s, sa)
		}
	}
}

// TestDialerControlRunsBeforeTheConnect: the Dialer's own Control (a
// firewall mark, say) sees the socket before any connect, the eager one
// included, and an error from it stops the dial with nothing connected.
func TestDialerControlRunsBeforeTheConnect(t *testing.T) {
	_, ap := echoListener(t, "tcp4", "127.0.0.1:0")
	var seen []uint8
	d := &Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		seen = append(seen, tcpState(t, c))
		return nil
	}}
	nd := net.Dialer{Control: d.control(ap)}
	c, err := nd.Dial("tcp", ap.String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c)
	c.Close()
	if len(seen) != 1 || seen[0] != unix.BPF_TCP_CLOSE {
		t.Fatalf("TCP states the Dialer's Control saw: %v; want one, unconnected (%d)", seen, unix.BPF_TCP_CLOSE)
	}

	// A failing Control: no connection reaches the listener.
	refuse := errors.New("no mark")
	counted, other := acceptCounter(t)
	d = &Dialer{Control: func(string, string, syscall.RawConn) error { return refuse }}
	nd = net.Dialer{Control: d.control(other)}
	if _, err := nd.Dial("tcp", other.String()); !errors.Is(err, refuse) {
		t.Fatalf("dial with a failing Control: %v; want %v", err, refuse)
	}
	time.Sleep(50 * time.Millisecond)
	if n := counted(); n != 0 {
		t.Fatalf("%d connections reached the listener despite the failing Control", n)
	}
}

// acceptCounter listens on IPv4 loopback and counts the connections
// that complete a handshake with it (the accept queue included).
func acceptCounter(t *testing.T) (func() int, netip.AddrPort) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			c.Close()
		}
	}()
	return func() int { mu.Lock(); defer mu.Unlock(); return n }, l.Addr().(*net.TCPAddr).AddrPort()
}
