//go:build linux

package landlockaudit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Status is the kernel's audit status (struct audit_status), as AUDIT_GET
// returns it.
type Status struct {
	Mask            uint32 `json:"-"`
	Enabled         uint32 `json:"enabled"` // 0 off, 1 on, 2 on and locked
	Failure         uint32 `json:"failure"`
	PID             uint32 `json:"pid"` // the registered audit daemon, 0 when none
	RateLimit       uint32 `json:"rate_limit"`
	BacklogLimit    uint32 `json:"backlog_limit"`
	Lost            uint32 `json:"lost"`
	Backlog         uint32 `json:"backlog"`
	FeatureBitmap   uint32 `json:"-"`
	BacklogWaitTime uint32 `json:"-"`
	BacklogWaitAct  uint32 `json:"-"`
}

const statusSize = int(unsafe.Sizeof(Status{}))

var errTimeout = errors.New("audit: no record waiting")

// control is a netlink audit socket for AUDIT_GET / AUDIT_SET requests.
type control struct {
	fd  int
	seq atomic.Uint32
}

func openControl() (*control, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("audit: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: bind netlink socket: %w", err)
	}
	// AUDIT_GET answers from a kernel thread it starts per request; on
	// a loaded host that takes a while.
	tv := unix.NsecToTimeval(controlTimeout.Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &control{fd: fd}, nil
}

// controlTimeout bounds the wait for the kernel's answer.
const controlTimeout = 5 * time.Second

func (c *control) close() error { return unix.Close(c.fd) }

// request sends one message and returns the payload of the reply of type
// want (0: only the ack is expected).
func (c *control) request(typ uint16, payload []byte, want uint16) ([]byte, error) {
	seq := c.seq.Add(1)
	msg := make([]byte, unix.NLMSG_HDRLEN+len(payload))
	hdr := (*unix.NlMsghdr)(unsafe.Pointer(&msg[0]))
	hdr.Len = uint32(len(msg))
	hdr.Type = typ
	hdr.Flags = unix.NLM_F_REQUEST | unix.NLM_F_ACK
	hdr.Seq = seq
	hdr.Pid = 0
	copy(msg[unix.NLMSG_HDRLEN:], payload)
	if err := unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	var got []byte
	acked := false
	buf := make([]byte, 8192)
	deadline := time.Now().Add(controlTimeout)
	for !acked || (want != 0 && got == nil) {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err == unix.EINTR && time.Now().Before(deadline) {
			// A socket with SO_RCVTIMEO is not restarted after a signal
			// handler ran, and the Go runtime signals its threads
			// (preemption): without the retry AUDIT_GET failed now and
			// then on a busy host, and a sandbox ran without denial
			// events.
			continue
		}
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("short netlink error")
				}
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return nil, unix.Errno(-e)
				}
				acked = true
			case want:
				got = append([]byte(nil), m.Data...)
			}
		}
	}
	return got, nil
}

func (c *control) status() (Status, error) {
	b, err := c.request(unix.AUDIT_GET, nil, unix.AUDIT_GET)
	if err != nil {
		return Status{}, fmt.Errorf("audit: AUDIT_GET: %w", err)
	}
	var s Status
	n := min(len(b), statusSize)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&s)), statusSize), b[:n])
	return s, nil
}

func (c *control) set(s Status) error {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&s)), statusSize)
	if _, err := c.request(unix.AUDIT_SET, b, 0); err != nil {
		return fmt.Errorf("audit: AUDIT_SET mask %#x: %w", s.Mask, err)
	}
	return nil
}

// GetStatus asks the kernel for its audit status.
func GetStatus() (Status, error) {
	c, err := openControl()
	if err != nil {
		return Status{}, err
	}
	defer c.close()
	return c.status()
}

// setStatus sets the fields of s named by s.Mask (AUDIT_STATUS_*).
func setStatus(s Status) error {
	c, err := openControl()
	if err != nil {
		return err
	}
	defer c.close()
	return c.set(s)
}

// RegisterDaemon registers the calling process as the audit daemon
// (AUDIT_SET with AUDIT_STATUS_PID) on a socket that it returns, and
// enables audit. It exists for tests that stand in for auditd: closing
// the returned daemon unregisters it. Nothing in the supervisor calls it.
func RegisterDaemon() (*Daemon, error) {
	c, err := openControl()
	if err != nil {
		return nil, err
	}
	if err := c.set(Status{Mask: unix.AUDIT_STATUS_PID | unix.AUDIT_STATUS_ENABLED, PID: uint32(os.Getpid()), Enabled: 1}); err != nil {
		c.close()
		return nil, err
	}
	return &Daemon{c: c}, nil
}

// Daemon is a registered audit daemon stand-in (see RegisterDaemon).
type Daemon struct{ c *control }

// Drain reads and discards the records the kernel sends the daemon until
// the socket is closed.
func (d *Daemon) Drain() {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(d.c.fd, buf, 0)
		if (err == nil && n == 0) || (err != nil && err != unix.EAGAIN && err != unix.EINTR && err != unix.ENOBUFS) {
			return
		}
	}
}

// Unregister sets the audit pid back to 0 and closes the socket. The
// request goes out on a socket of its own (the kernel checks the
// process, not the socket), so Drain cannot swallow its answer.
func (d *Daemon) Unregister() error {
	c, err := openControl()
	if err == nil {
		err = c.set(Status{Mask: unix.AUDIT_STATUS_PID, PID: 0})
		c.close()
	}
	unix.Shutdown(d.c.fd, unix.SHUT_RDWR)
	d.c.close()
	return err
}

// Reader receives the audit records the kernel multicasts to the
// read-log group (AUDIT_NLGRP_READLOG). Reading needs CAP_AUDIT_READ; it
// changes no audit setting.
type Reader struct {
	fd      int
	buf     []byte
	pending [][]byte
	// Overruns counts ENOBUFS: records the kernel dropped because the
	// receive buffer was full.
	Overruns int
}

// readerBuffer is the receive buffer asked for (SO_RCVBUFFORCE as root):
// room for tens of thousands of records while the reader catches up.
const readerBuffer = 8 << 20

// OpenReader subscribes to the audit read-log multicast group.
func OpenReader() (*Reader, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("audit: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (unix.AUDIT_NLGRP_READLOG - 1)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: join the read-log multicast group (needs CAP_AUDIT_READ): %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, readerBuffer); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, readerBuffer)
	}
	return &Reader{fd: fd, buf: make([]byte, 1<<16)}, nil
}

// SetDeadline makes Read return os.ErrDeadlineExceeded after d of silence
// (0: block).
func (r *Reader) setTimeout(usec int64) error {
	tv := unix.NsecToTimeval(usec * 1000)
	return unix.SetsockoptTimeval(r.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
}

// Read returns the next raw record: its type and text
// ("audit(1700000000.123:42): key=value ..."). The text aliases an
// internal buffer valid until the next Read. It returns errTimeout when
// nothing arrived within the timeout, and an error once the reader is
// closed.
func (r *Reader) Read() (uint16, []byte, error) {
	for {
		if len(r.pending) > 0 {
			m := r.pending[0]
			r.pending = r.pending[1:]
			if len(m) < unix.NLMSG_HDRLEN {
				continue
			}
			typ := binary.NativeEndian.Uint16(m[4:6])
			l := int(binary.NativeEndian.Uint32(m[0:4]))
			if l > len(m) || l < unix.NLMSG_HDRLEN {
				l = len(m)
			}
			return typ, trimNul(m[unix.NLMSG_HDRLEN:l]), nil
		}
		n, _, err := unix.Recvfrom(r.fd, r.buf, 0)
		switch {
		case err == unix.ENOBUFS:
			r.Overruns++
			continue
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, nil, errTimeout
		case err != nil:
			return 0, nil, err
		}
		r.pending = splitNetlink(r.buf[:n], r.pending[:0])
	}
}

// Close ends the subscription; a blocked Read returns.
func (r *Reader) Close() error {
	// shutdown wakes a Recvfrom blocked on another thread; close alone
	// does not.
	unix.Shutdown(r.fd, unix.SHUT_RDWR)
	return unix.Close(r.fd)
}

// splitNetlink splits a datagram into netlink messages (header included).
func splitNetlink(b []byte, out [][]byte) [][]byte {
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			// The kernel's audit multicast sets nlmsg_len to the payload
			// it wrote; a length that does not fit ends the datagram.
			out = append(out, b)
			return out
		}
		out = append(out, b[:l])
		al := (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if al > len(b) {
			break
		}
		b = b[al:]
	}
	return out
}

func trimNul(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == 0 || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}
