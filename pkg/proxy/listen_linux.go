//go:build linux

package proxy

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

func congestionControl(cc string) func(network, address string, rc syscall.RawConn) error {
	if cc == "" {
		return nil
	}
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
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
