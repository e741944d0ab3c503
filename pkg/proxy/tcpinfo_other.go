//go:build !linux

package proxy

import (
	"net"
	"time"
)

// tcpIdle cannot read socket activity off Linux: the idle timeout is not
// enforced there.
func tcpIdle(net.Conn) (time.Duration, bool) { return 0, false }
