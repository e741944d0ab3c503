//go:build linux

package proxy

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// FDsPerTunnel is what one open tunnel costs the proxy in file
// descriptors: the client and upstream sockets and one splice pipe (two
// fds) per direction.
const FDsPerTunnel = 6

// CheckFDLimit reports an error when RLIMIT_NOFILE (whose soft limit the
// Go runtime raises to the hard limit at start) cannot hold maxConns
// tunnels. Beyond it accepts fail with EMFILE (the accept loop backs
// off) and splice falls back to copying through user space.
func CheckFDLimit(maxConns int) error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("proxy: getrlimit(RLIMIT_NOFILE): %w", err)
	}
	need := uint64(maxConns)*FDsPerTunnel + 64
	if rl.Cur < need {
		return fmt.Errorf("proxy: RLIMIT_NOFILE is %d, but %d connections need about %d descriptors; raise the limit or lower --max-conns", rl.Cur, maxConns, need)
	}
	return nil
}
