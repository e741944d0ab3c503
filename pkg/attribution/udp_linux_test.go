//go:build linux

package attribution

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// A UDP datagram from the sandbox (a DNS query, in the proxy) is
// attributed to the process holding its socket, whether the socket is
// connected (glibc's resolver, bash's /dev/udp) or only bound (sendto),
// through sock_diag and through the /proc tables; a socket that is gone
// is ErrNotFound. Both backends answer (the eBPF one through /proc).
func TestLookupUDP(t *testing.T) {
	testutil.RequireCommand(t, "python3")
	s := newTestSandbox(t, 64)
	var pc net.PacketConn
	if err := inNS(s.proxyNS, func() (err error) {
		pc, err = net.ListenPacket("udp4", proxyV4+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	server := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	send := func(tag, script string) (netip.AddrPort, int) {
		t.Helper()
		if _, err := fmt.Fprintf(s.stdin, "shell %s %s\n", tag, script); err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(s.waitLine(tag, 20*time.Second))
		pid, _ := strconv.Atoi(f[2])
		pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				t.Fatalf("%s: no datagram: %v", tag, err)
			}
			if string(buf[:n]) == tag {
				return from.(*net.UDPAddr).AddrPort(), pid
			}
		}
	}
	dst := server.String()
	connected, cpid := send("udpconn", fmt.Sprintf(`exec 3<>/dev/udp/%s/%d; printf udpconn >&3; echo "ready udpconn $$"; sleep 60`, proxyV4, server.Port()))
	bound, bpid := send("udpbound", fmt.Sprintf(`exec python3 -c 'import os, socket, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"udpbound", (%q, %d)); print("ready udpbound %%d" %% os.getpid(), flush=True); time.sleep(60)'`, proxyV4, server.Port()))
	t.Logf("connected %v (pid %d), bound %v (pid %d), server %s", connected, cpid, bound, bpid, dst)
	// (bash execs its last command: the socket's holder runs sleep.)
	exe := func(pid int) string {
		p, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return p
	}
	sleep, python := exe(cpid), exe(bpid)

	for _, noDiag := range []bool{false, true} {
		b := s.backend(t, func(c *ProcConfig) { c.NoSockDiag = noDiag })
		id, err := b.LookupUDP(context.Background(), connected, server)
		if err != nil || id.PID != cpid || id.Exe != sleep {
			t.Errorf("sock_diag off %v: connected socket: %+v %v, want sleep pid %d", noDiag, id, err, cpid)
		}
		id, err = b.LookupUDP(context.Background(), bound, server)
		switch {
		case noDiag:
			// The /proc tables show a bound socket without its peer:
			// only sock_diag's receiver lookup finds it.
			if err == nil && (id.PID != bpid || id.Exe != python) {
				t.Errorf("/proc tables: bound socket attributed to %+v", id)
			}
		case err != nil || id.PID != bpid || id.Exe != python:
			t.Errorf("bound socket: %+v %v, want python3 pid %d", id, err, bpid)
		}
		gone := netip.AddrPortFrom(connected.Addr(), connected.Port()+1)
		if _, err := b.LookupUDP(context.Background(), gone, server); !errors.Is(err, ErrNotFound) {
			t.Errorf("sock_diag off %v: no such socket: %v, want ErrNotFound", noDiag, err)
		}
	}
}
