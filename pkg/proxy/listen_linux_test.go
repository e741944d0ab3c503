//go:build linux

package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// acceptedSockopts listens with cc, connects once over loopback and
// runs get on the accepted connection's descriptor.
func acceptedSockopts(t *testing.T, cc string, get func(fd int)) {
	t.Helper()
	ln, err := Listen(context.Background(), "127.0.0.1:0", cc)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(2 * time.Second))
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rc, err := a.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) { get(int(fd)) })
}

// acceptedCongestion returns the congestion control of a connection
// accepted by a listener made with cc.
func acceptedCongestion(t *testing.T, cc string) string {
	t.Helper()
	var got string
	var gerr error
	acceptedSockopts(t, cc, func(fd int) {
		got, gerr = unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	if gerr != nil {
		t.Fatal(gerr)
	}
	return strings.TrimRight(got, "\x00")
}

// Accepted connections keep Go's default keep-alive, now inherited from
// the listener instead of set per connection.
func TestListenAcceptedKeepAlive(t *testing.T) {
	for _, cc := range []string{"", DefaultClientCongestion} {
		acceptedSockopts(t, cc, func(fd int) {
			for _, o := range []struct {
				what              string
				level, name, want int
			}{
				{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
				{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15},
				{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
				{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9},
			} {
				if got, err := unix.GetsockoptInt(fd, o.level, o.name); err != nil || got != o.want {
					t.Errorf("cc %q: accepted connection's %s = %d (%v), want %d", cc, o.what, got, err, o.want)
				}
			}
		})
	}
}

func systemCongestion(t *testing.T) string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		testutil.RequireData(t, "the TCP congestion control sysctl", err)
	}
	return strings.TrimSpace(string(b))
}

// The client-facing leg gets cubic (reno where cubic is unavailable),
// whatever the system default, and is inherited by accepted connections.
func TestListenSetsClientCongestionControl(t *testing.T) {
	// Root may set any available algorithm, others only allowed ones.
	list := "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
	if os.Geteuid() == 0 {
		list = "/proc/sys/net/ipv4/tcp_available_congestion_control"
	}
	names, _ := os.ReadFile(list)
	want := fallbackCongestion
	if strings.Contains(" "+strings.TrimSpace(string(names))+" ", " "+DefaultClientCongestion+" ") {
		want = DefaultClientCongestion
	}
	if got := acceptedCongestion(t, DefaultClientCongestion); got != want {
		t.Errorf("accepted connection uses %q, want %q (system default %q)", got, want, systemCongestion(t))
	}
}

func TestListenEmptyCongestionKeepsSystemDefault(t *testing.T) {
	if got, want := acceptedCongestion(t, ""), systemCongestion(t); got != want {
		t.Errorf("accepted connection uses %q, want the system default %q", got, want)
	}
}

func TestListenUnknownCongestionControlFails(t *testing.T) {
	ln, err := Listen(context.Background(), "127.0.0.1:0", "no-such-cc")
	if err == nil {
		ln.Close()
		t.Fatal("Listen with an unknown congestion control succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-cc") {
		t.Errorf("error %q does not name the algorithm", err)
	}
}

// An upstream connection gets keep-alive once it has lived
// upstreamKeepAliveAfter, not at its dial.
func TestUpstreamKeepAliveOnceTheTunnelLasts(t *testing.T) {
	defer func(d time.Duration) { upstreamKeepAliveAfter = d }(upstreamKeepAliveAfter)
	upstreamKeepAliveAfter = 300 * time.Millisecond
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""))
	c, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	defer c.Close()
	keepAlive := func() (on, idle int) {
		var up *net.TCPConn
		env.p.conns.Range(func(k, _ any) bool {
			if tc, ok := k.(*net.TCPConn); ok && tc.RemoteAddr().(*net.TCPAddr).Port == echo.port {
				up = tc
			}
			return up == nil
		})
		if up == nil {
			t.Fatal("no tracked upstream connection")
		}
		rc, err := up.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) {
			on, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
			idle, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		})
		return on, idle
	}
	if on, _ := keepAlive(); on != 0 {
		t.Errorf("keep-alive on at the dial, want it only once the tunnel lasts")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		on, idle := keepAlive()
		if on == 1 && idle == 15 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream keep-alive %d, idle %d s after %v; want on, 15 s", on, idle, upstreamKeepAliveAfter)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
