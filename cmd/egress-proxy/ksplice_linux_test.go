//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// TestFloorSockmapRelays runs the floor-sockmap rows' relays (floorServe
// with a kernelSplice, and rawSockmapServe) and floor-raw's
// (rawRelayServe) on loopback with a half-closing echo server: every connection's bytes must come back
// whole and in order, and once the client has half-closed, the server's
// end must reach it (the relay propagates each end), and a sockmap relay
// must forget every pair. Half the clients send a short message
// that is queued before the relay pairs the sockets (the pairing's
// low-water mark kick must relay it: without it they hang), half stream
// more while the pairing happens (a verdict run before both sockets
// are in the sockhash would drop bytes: without the high-water guard
// about one connection in 3,000 lost its data): 256 KiB through
// floor-raw, but 1 KiB, the bench's size, through the kernel relays.
// Larger streams stall there: 256 KiB stopped after 134,171 bytes had
// come back in 1-3 of 20 runs of a mode (one connection of 300 each
// time), and 32 KiB came back not at all in 5 of 25 runs of
// floor-sockmap (2026-12-02, Linux 6.18); with 1 KiB, none of 65 runs
// per mode failed. The kernel relay is a bench row, not the product
// (docs/egress-proxy.md, "The kernel splice, measured").
func TestFloorSockmapRelays(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "bpf:sk_msg") // the sockhash and its stream programs
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	upstream := netip.MustParseAddrPort(echo.Addr().String())
	for _, mode := range []string{"sockmap", "sockmap-raw", "raw"} {
		t.Run(mode, func(t *testing.T) {
			// The kernel relay stalls under back-pressure (see
			// TestFloorSockmapRelays' comment), so its streams stay at
			// the bench's 1 KiB.
			streamSize := 256 << 10
			var ks *kernelSplice
			if mode != "raw" {
				streamSize = 1 << 10
				var err error
				if ks, err = newKernelSplice(); err != nil {
					t.Fatal(err) // sockmap is there (bpf:sk_msg, above)
				}
				defer ks.Close()
			}
			var addr string
			done := make(chan error, 1)
			if mode != "sockmap" {
				ln, err := rawListen(netip.MustParseAddrPort("127.0.0.1:0"))
				if err != nil {
					t.Fatal(err)
				}
				sa, _ := unix.Getsockname(ln)
				addr = fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
				go func() {
					if ks == nil {
						done <- rawRelayServe(ln, upstream, false)
					} else {
						done <- rawSockmapServe(ks, ln, upstream, false)
					}
				}()
				defer func() { unix.Shutdown(ln, unix.SHUT_RDWR); <-done; unix.Close(ln) }()
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr = ln.Addr().String()
				go func() { done <- floorServe(ln, upstream, ks, false) }()
				defer func() { ln.Close(); <-done }()
			}
			for i := range 600 {
				size := 100
				if i%2 == 1 {
					size = streamSize
				}
				if err := echoThrough(addr, size); err != nil {
					t.Fatalf("connection %d (%d bytes): %v", i, size, err)
				}
			}
			if ks == nil {
				return
			}
			// Every pair's peers are forgotten once both ends closed.
			deadline := time.Now().Add(5 * time.Second)
			for {
				var k, v uint64
				n := 0
				for it := ks.peers.Iterate(); it.Next(&k, &v); {
					n++
				}
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d peers entries left after every connection ended", n)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// echoThrough sends size random bytes to the echo server through the
// relay at addr and wants them back; then it half-closes and wants the
// server's end (as the bench's client, which closes once its echo came
// back), all within 5 s.
func echoThrough(addr string, size int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte(rand.Uint32())
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		werr <- err
	}()
	got := make([]byte, size)
	if n, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("after %d bytes back: %w", n, err)
	}
	if err := <-werr; err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("the %d bytes back differ from those sent", size)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	if rest, err := io.ReadAll(c); err != nil || len(rest) > 0 {
		return fmt.Errorf("after the half-close: %d more bytes, %v; want the server's end", len(rest), err)
	}
	return nil
}
