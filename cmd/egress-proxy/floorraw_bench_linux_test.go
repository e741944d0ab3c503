//go:build linux

package main

import (
	"net/netip"
	"runtime"

	"golang.org/x/sys/unix"
)

// rawRelayServe is the floor-raw row's relay: the floor's work (accept,
// SO_ORIGINAL_DST when originalDst, a blocking connect(2) upstream,
// copying both ways, half-closes) in user space but without Go's
// poller or a second thread, as rawSockmapServe runs its sockmap: one
// locked thread and an epoll of its own, level-triggered, with
// non-blocking reads and writes through a buffer per direction (a
// direction whose bytes wait for the destination stops reading its
// source until they are written). It is the control for
// floor-sockmap-raw: what that row gains over the floor beyond this one
// is the kernel splice's. It returns when accept fails (shut ln down to
// stop it), having closed every pair.
func rawRelayServe(ln int, upstream netip.AddrPort, originalDst bool) error {
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
	// Direction i copies fd[i] to fd[1-i]; pend[i] is what it read and
	// has not written yet, eof[i] that fd[i] has ended (and fd[1-i] was
	// half-closed once pend[i] was written).
	type pair struct {
		fd   [2]int
		buf  [2][]byte
		pend [2][]byte
		eof  [2]bool
	}
	// By id, never reused (rawSockmapServe says why).
	pairs := map[int32]*pair{}
	var free [][]byte // buffers of closed pairs, for the next ones
	closePair := func(id int32, p *pair) {
		delete(pairs, id)
		unix.Close(p.fd[0])
		unix.Close(p.fd[1])
		free = append(free, p.buf[0], p.buf[1])
	}
	buffer := func() []byte {
		if n := len(free); n > 0 {
			b := free[n-1]
			free = free[:n-1]
			return b
		}
		return make([]byte, 64<<10)
	}
	defer func() {
		for id, p := range pairs {
			closePair(id, p)
		}
	}()
	// interest sets what fd[i] waits for: to read while its direction
	// has nothing pending and it has not ended, to write while the
	// other direction's bytes wait.
	interest := func(id int32, p *pair, i int) {
		var ev uint32
		if len(p.pend[i]) == 0 && !p.eof[i] {
			ev |= unix.EPOLLIN
		}
		if len(p.pend[1-i]) > 0 {
			ev |= unix.EPOLLOUT
		}
		unix.EpollCtl(ep, unix.EPOLL_CTL_MOD, p.fd[i], &unix.EpollEvent{Events: ev, Fd: id, Pad: int32(i)})
	}
	// flush writes direction d's pending bytes; false on an error.
	flush := func(p *pair, d int) bool {
		for len(p.pend[d]) > 0 {
			n, err := unix.Write(p.fd[1-d], p.pend[d])
			if err == unix.EAGAIN {
				return true
			}
			if err != nil {
				return false
			}
			p.pend[d] = p.pend[d][n:]
		}
		if p.eof[d] {
			unix.Shutdown(p.fd[1-d], unix.SHUT_WR)
		}
		return true
	}
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
				i, ok := int(ev.Pad), true
				before := [2]int{len(p.pend[0]), len(p.pend[1])}
				beforeEOF := p.eof
				if ev.Events&unix.EPOLLOUT != 0 {
					ok = flush(p, 1-i)
				}
				read := false
				if ok && ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0 && len(p.pend[i]) == 0 && !p.eof[i] {
					m, err := unix.Read(p.fd[i], p.buf[i])
					read = err == nil
					switch {
					case err == unix.EAGAIN:
					case err != nil:
						ok = false
					case m == 0:
						p.eof[i] = true
						ok = flush(p, i)
					default:
						p.pend[i] = p.buf[i][:m]
						ok = flush(p, i)
					}
				}
				changed := before != [2]int{len(p.pend[0]), len(p.pend[1])} || beforeEOF != p.eof
				// A hang-up or error is reported for as long as it lasts:
				// one that neither read nor wrote ends the pair (else it
				// would spin).
				stuck := ev.Events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 && !changed && !read
				if !ok || stuck || (p.eof[0] && p.eof[1] && len(p.pend[0]) == 0 && len(p.pend[1]) == 0) {
					closePair(ev.Fd, p)
					continue
				}
				if changed {
					interest(ev.Fd, p, 0)
					interest(ev.Fd, p, 1)
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
			unix.SetNonblock(u, true)
			next++
			p := &pair{fd: [2]int{c, u}, buf: [2][]byte{buffer(), buffer()}}
			pairs[next] = p
			for i, fd := range p.fd {
				unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: next, Pad: int32(i)})
			}
		}
	}
}

// rawAcceptDial accepts one connection on the non-blocking listener ln
// (reading its original destination when originalDst, as the proxy's
// transparent listener does) and connects a new socket to sa, blocking
// (a veth peer completes the handshake inside the call). It returns
// c = -1 when there was nothing to accept or that connection is given
// up (both ends closed), and an error only when the listener failed.
func rawAcceptDial(ln int, sa unix.Sockaddr, originalDst bool) (c, u int, err error) {
	c, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
	if err == unix.EAGAIN || err == unix.EINTR || err == unix.ECONNABORTED {
		return -1, -1, nil
	}
	if err != nil {
		return -1, -1, err
	}
	if originalDst {
		if _, err := unix.GetsockoptIPv6Mreq(c, unix.IPPROTO_IP, unix.SO_ORIGINAL_DST); err != nil {
			unix.Close(c)
			return -1, -1, nil
		}
	}
	u, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Close(c)
		return -1, -1, nil
	}
	if err := unix.Connect(u, sa); err != nil {
		unix.Close(c)
		unix.Close(u)
		return -1, -1, nil
	}
	return c, u, nil
}
