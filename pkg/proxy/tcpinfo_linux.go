//go:build linux

package proxy

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tcpIdle reports how long ago c last sent or received data, from
// TCP_INFO.
func tcpIdle(c net.Conn) (time.Duration, bool) {
	sc, ok := underlying(c).(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var serr error
	if err := rc.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || serr != nil {
		return 0, false
	}
	ms := min(info.Last_data_recv, info.Last_data_sent)
	return time.Duration(ms) * time.Millisecond, true
}
