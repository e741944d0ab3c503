//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// kernelSplice relays between pairs of TCP sockets in the kernel: both
// sockets of a pair are in a sockhash keyed by socket cookie, with an
// sk_skb stream verdict program that redirects each socket's received
// bytes to the egress of its peer (peers: cookie to the peer's cookie).
// User space then only waits for the ends.
type kernelSplice struct {
	socks, peers *ebpf.Map
	prog         *ebpf.Program
}

func newKernelSplice() (*kernelSplice, error) {
	socks, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockHash, KeySize: 8, ValueSize: 8, MaxEntries: 65536})
	if err != nil {
		return nil, fmt.Errorf("sockhash: %w", err)
	}
	peers, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 65536})
	if err != nil {
		socks.Close()
		return nil, fmt.Errorf("peers: %w", err)
	}
	// verdict(skb): peer = peers[cookie(skb)]; no peer: pass (the bytes
	// stay for user space); else redirect to the peer's egress.
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, peers.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(asm.R3, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, socks.FD()),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkRedirectHash.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"), // SK_PASS
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SkSKB, AttachType: ebpf.AttachSkSKBStreamVerdict,
		Instructions: insns, License: "Dual BSD/GPL"})
	if err != nil {
		socks.Close()
		peers.Close()
		return nil, fmt.Errorf("sk_skb verdict: %w", err)
	}
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: socks.FD(), Program: prog, Attach: ebpf.AttachSkSKBStreamVerdict}); err != nil {
		socks.Close()
		peers.Close()
		prog.Close()
		return nil, fmt.Errorf("attach the verdict: %w", err)
	}
	return &kernelSplice{socks: socks, peers: peers, prog: prog}, nil
}

// Close detaches the verdict and frees the maps.
func (k *kernelSplice) Close() error {
	return errors.Join(link.RawDetachProgram(link.RawDetachProgramOptions{Target: k.socks.FD(), Program: k.prog,
		Attach: ebpf.AttachSkSKBStreamVerdict}), k.prog.Close(), k.socks.Close(), k.peers.Close())
}

// cookieOf is the socket cookie of fd, the sockhash's key for it.
func cookieOf(fd int) (uint64, error) {
	v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	return v, err
}

// pair puts a and b in the sockhash, each the other's peer, and makes
// each one's verdict run on what it had received before (SO_RCVLOWAT
// calls the socket's data_ready). It returns the cookies, for unpair.
func (k *kernelSplice) pair(a, b *net.TCPConn) (ca, cb uint64, err error) {
	ra, err := a.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	rb, err := b.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var fa, fb int
	ra.Control(func(fd uintptr) { fa = int(fd) })
	rb.Control(func(fd uintptr) { fb = int(fd) })
	return k.pairFDs(fa, fb)
}

func (k *kernelSplice) pairFDs(fa, fb int) (ca, cb uint64, err error) {
	if ca, err = cookieOf(fa); err != nil {
		return 0, 0, err
	}
	if cb, err = cookieOf(fb); err != nil {
		return 0, 0, err
	}
	if err := k.peers.Update(ca, cb, ebpf.UpdateAny); err != nil {
		return 0, 0, err
	}
	if err := k.peers.Update(cb, ca, ebpf.UpdateAny); err != nil {
		k.peers.Delete(ca)
		return 0, 0, err
	}
	// Neither socket's verdict may run before both are in the sockhash
	// (a redirect to a missing peer drops the bytes): a receive low-water
	// mark above anything that can arrive keeps the kernel from calling
	// data_ready, and lowering it afterwards calls it on what came.
	unix.SetsockoptInt(fa, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1<<30)
	unix.SetsockoptInt(fb, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1<<30)
	err = errors.Join(k.socks.Update(ca, uint64(fa), ebpf.UpdateAny), k.socks.Update(cb, uint64(fb), ebpf.UpdateAny))
	if err != nil {
		k.unpair(ca, cb)
		k.socks.Delete(ca)
		k.socks.Delete(cb)
		return 0, 0, err
	}
	unix.SetsockoptInt(fa, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
	unix.SetsockoptInt(fb, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
	return ca, cb, nil
}

// unpair forgets a pair's peers (closing a socket takes it out of the
// sockhash).
func (k *kernelSplice) unpair(ca, cb uint64) {
	k.peers.Delete(ca)
	k.peers.Delete(cb)
}

// rawSockmapServe is the floor-sockmap-raw relay: kernelSplice without
// Go's poller or a second thread. One locked thread waits in an epoll of
// its own for the listening socket (accept, SO_ORIGINAL_DST when
// originalDst, a blocking connect(2) upstream, pair) and for each pair's
// ends (EPOLLRDHUP, edge-triggered: a relayed byte wakes nothing in user
// space); an end half-closes the other socket, and the pair is closed
// once both have ended. It returns when accept fails (shut ln down to
// stop it), having closed every pair.
func rawSockmapServe(ks *kernelSplice, ln int, upstream netip.AddrPort, originalDst bool) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(ep)
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, ln, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: 0}); err != nil {
		return err
	}
	type pair struct {
		fd     [2]int
		cookie [2]uint64
		ended  [2]bool
	}
	// By id (the event's Fd field; 0 is the listener), never reused: an
	// event for a closed pair's descriptor must not reach a new pair that
	// got the same number.
	pairs := map[int32]*pair{}
	closePair := func(id int32, p *pair) {
		delete(pairs, id)
		ks.unpair(p.cookie[0], p.cookie[1])
		unix.Close(p.fd[0])
		unix.Close(p.fd[1])
	}
	defer func() {
		for id, p := range pairs {
			closePair(id, p)
		}
	}()
	sa := &unix.SockaddrInet4{Port: int(upstream.Port()), Addr: upstream.Addr().As4()}
	var next int32
	evs := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(ep, evs, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range evs[:n] {
			if ev.Fd != 0 {
				p := pairs[ev.Fd]
				if p == nil {
					continue
				}
				if i := int(ev.Pad); ev.Events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
					p.ended = [2]bool{true, true}
				} else if !p.ended[i] {
					p.ended[i] = true
					unix.Shutdown(p.fd[1-i], unix.SHUT_WR)
				}
				if p.ended[0] && p.ended[1] {
					closePair(ev.Fd, p)
				}
				continue
			}
			c, u, err := rawAcceptDial(ln, sa, originalDst)
			if err != nil {
				return err
			}
			if c < 0 {
				continue
			}
			p := &pair{fd: [2]int{c, u}}
			if p.cookie[0], p.cookie[1], err = ks.pairFDs(c, u); err != nil {
				unix.Close(c)
				unix.Close(u)
				continue
			}
			next++
			pairs[next] = p
			for i, fd := range p.fd {
				unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLET, Fd: next, Pad: int32(i)})
			}
		}
	}
}

// rawListen is a listening TCP socket on addr (IPv4), non-blocking, for
// rawSockmapServe.
func rawListen(addr netip.AddrPort) (int, error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}); err != nil {
		unix.Close(ln)
		return -1, err
	}
	if err := unix.Listen(ln, 4096); err != nil {
		unix.Close(ln)
		return -1, err
	}
	return ln, nil
}
