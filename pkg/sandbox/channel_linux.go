//go:build linux

package sandbox

import (
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// maxMessage bounds one control message (the InitConfig is the largest).
const maxMessage = 1 << 20

// channel is one end of the SOCK_SEQPACKET control socket: each datagram
// is one JSON Message, optionally carrying one fd.
type channel struct {
	fd  int
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
	return &channel{fd: fd}, nil
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
	return &channel{fd: fds[0]}, os.NewFile(uintptr(fds[1]), "palisade-init-ctl"), nil
}

func (c *channel) send(m Message, fd int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxMessage {
		return fmt.Errorf("control message %s too large (%d bytes)", m.Type, len(b))
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	for {
		err = unix.Sendmsg(c.fd, b, oob, nil, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("control send %s: %w", m.Type, err)
	}
	return nil
}

// recv returns the next message and the fd it carried (-1 if none). At
// end of stream it returns an error wrapping os.ErrClosed.
func (c *channel) recv() (Message, int, error) {
	// Size the buffer to the datagram (MSG_PEEK|MSG_TRUNC reports its
	// length) instead of allocating the 1 MiB maximum for every message.
	var n, oobn int
	var err error
	for {
		n, _, _, _, err = unix.Recvmsg(c.fd, nil, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return Message{}, -1, fmt.Errorf("control recv: %w", err)
	}
	if n > maxMessage {
		return Message{}, -1, fmt.Errorf("control recv: message of %d bytes exceeds %d", n, maxMessage)
	}
	if cap(c.buf) < n || cap(c.buf) == 0 {
		c.buf = make([]byte, max(n, 4096))
	}
	buf := c.buf[:cap(c.buf)]
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err = unix.Recvmsg(c.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return Message{}, -1, fmt.Errorf("control recv: %w", err)
	}
	if n == 0 && oobn == 0 {
		return Message{}, -1, fmt.Errorf("control recv: %w", os.ErrClosed)
	}
	fd := -1
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil && len(cmsgs) > 0 {
			if fds, err := unix.ParseUnixRights(&cmsgs[0]); err == nil && len(fds) > 0 {
				fd = fds[0]
				for _, extra := range fds[1:] {
					unix.Close(extra)
				}
			}
		}
	}
	var m Message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return Message{}, -1, fmt.Errorf("control recv: bad message: %w", err)
	}
	return m, fd, nil
}

func (c *channel) close() error { return unix.Close(c.fd) }
