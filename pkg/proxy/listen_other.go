//go:build !linux

package proxy

import "syscall"

// listenerOptions is a no-op off Linux: accepted connections keep the
// system's congestion control.
func listenerOptions(string) func(network, address string, rc syscall.RawConn) error {
	return nil
}

// acceptedKeepAlive leaves keep-alive to Go's net package per connection.
const acceptedKeepAlive = 0
