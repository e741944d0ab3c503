//go:build linux

package sandbox

import (
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxMessage bounds one control message (the InitConfig is the largest).
const maxMessage = 1 << 20

// channel is one end of the SOCK_SEQPACKET control socket: each datagram
// is one Message in wire form (wire.go), optionally carrying one fd. The
// socket is non-blocking and waits in the Go netpoller: a goroutine parked
// on it costs nothing, where a blocking recvmsg would make the runtime
// hand its P to another thread (a thread wake-up or creation, and a busy
// sysmon) every time the other side takes more than 20 µs to answer.
type channel struct {
	f   io.Closer // an *os.File, or a *net.UnixConn for exec connections
	rc  syscall.RawConn
	buf []byte // reused by recv; grown to a message's size when needed
}

func newChannel(fd int) (*channel, error) {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return nil, fmt.Errorf("fd %d is not a socket: %w", fd, err)
	}
	if typ != unix.SOCK_SEQPACKET {
		return nil, fmt.Errorf("fd %d is not a SOCK_SEQPACKET socket", fd)
	}
	unix.CloseOnExec(fd)
	return fileChannel(fd)
}

// fileChannel wraps fd, made non-blocking, for the netpoller.
func fileChannel(fd int) (*channel, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "palisade-ctl")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &channel{f: f, rc: rc}, nil
}

// connChannel wraps a unixpacket connection (an exec request).
func connChannel(c *net.UnixConn) (*channel, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("exec socket: %w", err)
	}
	return &channel{f: c, rc: rc}, nil
}

// socketPair returns the supervisor's end as a channel and the init's end
// as a file to pass as ExtraFiles[0].
func socketPair() (*channel, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socketpair: %w", err)
	}
	// Large enough for the configuration in one datagram.
	for _, fd := range fds {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, maxMessage*2)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, maxMessage*2)
	}
	c, err := fileChannel(fds[0])
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	return c, os.NewFile(uintptr(fds[1]), "palisade-init-ctl"), nil
}

func (c *channel) send(m Message, fd int) error {
	if fd >= 0 {
		return c.sendFDs(m, fd)
	}
	return c.sendFDs(m)
}

// sendFDs sends m with the given fds (SCM_RIGHTS).
func (c *channel) sendFDs(m Message, fds ...int) error {
	b := encodeMessage(m)
	if len(b) > maxMessage {
		return fmt.Errorf("control message %s too large (%d bytes)", m.Type, len(b))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	var serr error
	err := c.rc.Write(func(s uintptr) bool {
		serr = unix.Sendmsg(int(s), b, oob, nil, 0)
		return serr != unix.EAGAIN && serr != unix.EINTR
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("control send %s: %w", m.Type, err)
	}
	return nil
}

// maxFDs is the most fds one message carries (an exec's stdin, stdout
// and stderr).
const maxFDs = 3

// recv returns the next message and the fd it carried (-1 if none). At
// end of stream it returns an error wrapping os.ErrClosed.
func (c *channel) recv() (Message, int, error) {
	m, fds, err := c.recvFDs()
	if err != nil {
		return m, -1, err
	}
	fd := -1
	for i, f := range fds {
		if i == 0 {
			fd = f
		} else {
			unix.Close(f)
		}
	}
	return m, fd, nil
}

// recvFDs returns the next message and the fds it carried (close-on-exec).
func (c *channel) recvFDs() (Message, []int, error) {
	// Size the buffer to the datagram (MSG_PEEK|MSG_TRUNC reports its
	// length) instead of allocating the 1 MiB maximum for every message.
	// There is one reader, so the datagram peeked at is the one read.
	var n, oobn int
	var rerr error
	err := c.rc.Read(func(s uintptr) bool {
		n, _, _, _, rerr = unix.Recvmsg(int(s), nil, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return Message{}, nil, fmt.Errorf("control recv: %w", err)
	}
	if n > maxMessage {
		return Message{}, nil, fmt.Errorf("control recv: message of %d bytes exceeds %d", n, maxMessage)
	}
	if cap(c.buf) < n || cap(c.buf) == 0 {
		c.buf = make([]byte, max(n, 4096))
	}
	buf := c.buf[:cap(c.buf)]
	oob := make([]byte, unix.CmsgSpace(4*maxFDs))
	err = c.rc.Read(func(s uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(s), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return Message{}, nil, fmt.Errorf("control recv: %w", err)
	}
	if n == 0 && oobn == 0 {
		return Message{}, nil, fmt.Errorf("control recv: %w", os.ErrClosed)
	}
	var fds []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for i := range cmsgs {
				if got, err := unix.ParseUnixRights(&cmsgs[i]); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	m, err := decodeMessage(buf[:n])
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return Message{}, nil, fmt.Errorf("control recv: bad message: %w", err)
	}
	return m, fds, nil
}

func (c *channel) close() error { return c.f.Close() }
