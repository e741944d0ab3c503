//go:build linux

package proxy

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// peerAuthorized reports whether the peer of a control connection is root
// or the proxy's own user (SO_PEERCRED).
func peerAuthorized(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return cred.Uid == 0 || int(cred.Uid) == os.Geteuid()
}
