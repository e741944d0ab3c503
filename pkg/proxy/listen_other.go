//go:build !linux

package proxy

import "syscall"

// congestionControl is a no-op off Linux: accepted connections keep the
// system's congestion control.
func congestionControl(string) func(network, address string, rc syscall.RawConn) error {
	return nil
}
