package proxy

import (
	"context"
	"net"
)

// DefaultClientCongestion is the TCP congestion control of the
// connections the proxy accepts: the client-facing leg of every tunnel.
// For a sandbox that leg is a host-local veth with no bottleneck queue to
// model, and a pacing algorithm such as BBR, when the host's default,
// there only adds pacing timers and caps the rate at a noisy estimate:
// measured on the sandbox path, a BBR client leg costs about a fifth of
// bulk tunnel throughput against cubic (docs/egress-proxy.md). The
// upstream leg keeps the host's default.
const DefaultClientCongestion = "cubic"

// fallbackCongestion is built into every kernel and allowed without
// privilege; the default falls back to it when cubic is unavailable.
const fallbackCongestion = "reno"

// Listen opens a TCP listener whose accepted connections use congestion
// control cc (they inherit it from the listening socket). An empty cc
// keeps the system default. DefaultClientCongestion falls back to reno,
// and then to the system default, when the kernel refuses it; any other
// name the kernel refuses is an error.
//
// Accepted connections also inherit TCP keep-alive (probes after 15 s
// idle, every 15 s, 9 of them: Go's default) from the listening socket,
// set once there instead of with four setsockopt calls per connection
// (on Linux; elsewhere Go sets it per connection).
func Listen(ctx context.Context, addr, cc string) (net.Listener, error) {
	lc := net.ListenConfig{Control: listenerOptions(cc), KeepAlive: acceptedKeepAlive}
	return lc.Listen(ctx, "tcp", addr)
}

// Keep-alive of accepted connections, as Go's net package sets by
// default (net.KeepAliveConfig): idle time, interval, probe count.
const (
	keepAliveIdle     = 15 // seconds
	keepAliveInterval = 15 // seconds
	keepAliveCount    = 9
)
