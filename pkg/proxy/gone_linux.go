package proxy

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// peerGone reports whether the client of c has closed its end: a peek
// without waiting sees end of file (its FIN) or a reset. Bytes still
// unread, or nothing yet, mean it may still be there.
func peerGone(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || errors.Is(err, unix.ECONNRESET)
		return true
	})
	return gone
}
