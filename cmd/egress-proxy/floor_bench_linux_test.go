//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/fence"
	"github.com/palisade-sandbox/palisade/pkg/nsthread"
	"github.com/palisade-sandbox/palisade/pkg/runtimetune"
)

// The "floor" row of BenchmarkSandboxConnectRate: the least a
// transparent relay of egress-proxy's design does per connection, in the
// same harness as the transparent row. It accepts, reads the original
// destination (SO_ORIGINAL_DST), dials the upstream, copies both ways on
// two goroutines (io.Copy: splice), half-closes and closes — with no
// attribution, decision, SSRF check, SNI check or event, with the
// proxy's per-connection economies (floorRelay), and the Go runtime set
// as egress-proxy sets its own in sandbox mode (runtimetune, one P). What the
// transparent row loses to it is what the proxy's own steps cost; what
// the floor loses to direct is the design's (a second connection, a
// user-space hop each way). The floor-sockmap rows take the user-space
// hop out (the kernel relays once the sockets are paired:
// ksplice_bench_linux_test.go), floor-raw takes Go's poller out
// (floorraw_bench_linux_test.go).

// floorEnv, set to "LISTEN UPSTREAM [MODE]", makes the test binary the
// floor relay (see init and floorRelay's modes); startFloor starts it in
// the bench host namespace.
const floorEnv = "PALISADE_BENCH_FLOOR_RELAY"

// The TEST-NET-3 address the floor row's client connects to, which the
// bench host namespace redirects to the floor relay on floorPort
// (redirectSynthetic).
const (
	floorAddr = "203.0.113.7"
	floorPort = 3141
	// The floor-sockmap rows', likewise.
	sockmapFloorAddr    = "203.0.113.8"
	sockmapFloorPort    = 3142
	rawSockmapFloorAddr = "203.0.113.9"
	rawSockmapFloorPort = 3143
	rawFloorAddr        = "203.0.113.10"
	rawFloorPort        = 3144
	// floor and floor-raw with TCP_DEFER_ACCEPT on the listener.
	deferFloorAddr    = "203.0.113.11"
	deferFloorPort    = 3145
	rawDeferFloorAddr = "203.0.113.12"
	rawDeferFloorPort = 3146
)

func init() {
	if v := os.Getenv(floorEnv); v != "" {
		f := strings.Fields(v)
		fmt.Fprintln(os.Stderr, floorRelay(f[0], f[1], strings.Join(f[2:], "")))
		os.Exit(1)
	}
}

// floorRelay serves listen until it fails: every connection is relayed
// to upstream once its original destination has been read, by
// floorServe (mode "") or, with the sockets handed to the kernel, by
// floorServe with a kernelSplice (mode "sockmap") or rawSockmapServe
// (mode "sockmap-raw"), or in user space without Go's poller by
// rawRelayServe (mode "raw").
func floorRelay(listen, upstream, mode string) error {
	up, err := netip.ParseAddrPort(upstream)
	if err != nil || !up.Addr().Is4() {
		return fmt.Errorf("floor relay: upstream %q: want an IPv4 address and port", upstream)
	}
	// A "-defer" suffix (mode "defer" alone for the Go floor) sets
	// TCP_DEFER_ACCEPT on the listener: accept returns once the client's
	// first bytes are there.
	deferAccept := mode == "defer" || strings.HasSuffix(mode, "-defer")
	mode = strings.TrimSuffix(strings.TrimSuffix(mode, "defer"), "-")
	var ks *kernelSplice
	switch mode {
	case "", "raw":
	case "sockmap", "sockmap-raw":
		// Before listening: a relay that cannot splice never answers.
		if ks, err = newKernelSplice(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("floor relay: unknown mode %q", mode)
	}
	if mode == "sockmap-raw" || mode == "raw" {
		ln, err := rawListen(netip.MustParseAddrPort(listen))
		if err != nil {
			return err
		}
		if deferAccept {
			if err := unix.SetsockoptInt(ln, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 1); err != nil {
				return err
			}
		}
		if ks == nil {
			return rawRelayServe(ln, up, true)
		}
		return rawSockmapServe(ks, ln, up, true)
	}
	var lc net.ListenConfig
	if deferAccept {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 1)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	ln, err := lc.Listen(context.Background(), "tcp", listen)
	if err != nil {
		return err
	}
	return floorServe(ln, up, ks, true)
}

// floorServe relays every connection ln accepts to upstream (after
// reading its original destination when originalDst) until ln fails. It
// does what egress-proxy does to make a connection cheap, so that it is
// a floor and not merely a naive relay: goroutines are kept and reused
// (floorWorkers), the upstream's connect(2) is issued from the dialer's
// Control hook (a veth peer completes the handshake inside the call:
// pkg/ssrf's eagerConnect), and no keep-alive is set on a fresh
// upstream connection.
//
// With ks, once dialed the two sockets are handed to the kernel
// (kernelSplice: a sockhash and an sk_skb verdict redirecting each
// one's received bytes to the other's egress) and user space only waits
// (in Go's poller) for the client's end, half-closes upstream and waits
// for its end.
func floorServe(ln net.Listener, upstream netip.AddrPort, ks *kernelSplice, originalDst bool) error {
	sa := &unix.SockaddrInet4{Port: int(upstream.Port()), Addr: upstream.Addr().As4()}
	d := net.Dialer{KeepAlive: -1, Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { unix.Connect(int(fd), sa) })
	}}
	w := make(floorWorkers)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		w.run(func() {
			tc := c.(*net.TCPConn)
			defer tc.Close()
			if originalDst {
				if _, err := fence.OriginalDst(tc); err != nil {
					return
				}
			}
			uc, err := d.Dial("tcp", upstream.String())
			if err != nil {
				return
			}
			defer uc.Close()
			if ks != nil {
				ca, cb, err := ks.pair(tc, uc.(*net.TCPConn))
				if err != nil {
					return
				}
				defer ks.unpair(ca, cb)
				var b [1]byte
				tc.Read(b[:])
				uc.(*net.TCPConn).CloseWrite()
				uc.Read(b[:])
				return
			}
			done := make(chan struct{})
			w.run(func() {
				io.Copy(uc, tc)
				uc.(*net.TCPConn).CloseWrite()
				close(done)
			})
			io.Copy(tc, uc)
			tc.CloseWrite()
			<-done
		})
	}
}

// floorWorkers runs functions on goroutines kept waiting once their
// function returns (as egress-proxy's workers do; unbounded here).
type floorWorkers chan func()

func (w floorWorkers) run(fn func()) {
	select {
	case w <- fn:
	default:
		go func() {
			for {
				fn()
				fn = <-w
			}
		}()
	}
}

// startFloor runs the floor relay (this test binary) in the bench host
// namespace, relaying to upstream, and returns its listening address
// (the key of its pid in sb.pids).
func (sb *benchSandbox) startFloor(b *testing.B, upstream, mode string) string {
	port := map[string]int{"": floorPort, "sockmap": sockmapFloorPort, "sockmap-raw": rawSockmapFloorPort, "raw": rawFloorPort,
		"defer": deferFloorPort, "raw-defer": rawDeferFloorPort}[mode]
	if mode != "" {
		mode = " " + mode
	}
	listen := net.JoinHostPort(benchHostAddr, strconv.Itoa(port))
	cmd := exec.Command(os.Args[0])
	// The Go runtime set as egress-proxy sets its own in sandbox mode:
	// runtimetune's GODEBUG, one P (--procs).
	cmd.Env, _ = runtimetune.Env(append(os.Environ(), floorEnv+"="+listen+" "+upstream+mode, "GOMAXPROCS=1"))
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := nsthread.Run(sb.hostNS, cmd.Start); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sb.pids[listen] = cmd.Process.Pid
	sb.waitListening(b, listen)
	return listen
}
