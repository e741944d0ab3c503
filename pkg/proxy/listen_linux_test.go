//go:build linux

package proxy

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// acceptedCongestion listens with cc, connects once over loopback and
// returns the congestion control of the accepted connection.
func acceptedCongestion(t *testing.T, cc string) string {
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
	var got string
	var gerr error
	rc.Control(func(fd uintptr) {
		got, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	if gerr != nil {
		t.Fatal(gerr)
	}
	return strings.TrimRight(got, "\x00")
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
