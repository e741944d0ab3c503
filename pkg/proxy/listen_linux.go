//go:build linux

package proxy

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// acceptedKeepAlive: Go sets nothing per accepted connection; it
// inherits the listener's keep-alive (listenerOptions).
const acceptedKeepAlive = -1

// listenerOptions sets, on the listening socket, what its accepted
// connections inherit: keep-alive and congestion control cc ("": the
// system default).
func listenerOptions(cc string) func(network, address string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			for _, o := range []struct{ level, name, value int }{
				{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
				{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, keepAliveIdle},
				{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, keepAliveInterval},
				{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
			} {
				if serr == nil {
					serr = unix.SetsockoptInt(int(fd), o.level, o.name, o.value)
				}
			}
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("proxy: listener keep-alive: %w", serr)
		}
		if cc == "" {
			return nil
		}
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
			if serr != nil && cc == DefaultClientCongestion {
				// Reno, else the system default: the listener
				// works either way.
				_ = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, fallbackCongestion)
				serr = nil
			}
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("proxy: TCP congestion control %q: %w", cc, serr)
		}
		return nil
	}
}
