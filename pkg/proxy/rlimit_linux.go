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
		return fdLimitError(rl.Cur, maxConns, need)
	}
	return nil
}

func fdLimitError(cur uint64, maxConns int, need uint64) error {
	return fmt.Errorf("proxy: RLIMIT_NOFILE is %d, but %d connections need about %d descriptors; raise the limit or lower --max-conns", cur, maxConns, need)
}

// FitFDLimit makes RLIMIT_NOFILE hold maxConns tunnels. When it does not,
// it raises the limit (soft and hard: a process with CAP_SYS_RESOURCE,
// i.e. root, may go up to fs.nr_open); when that is refused and maxConns
// was not asked for (the default), it lowers maxConns to what the limit
// holds. It returns the connection limit to use and a note for the debug
// log ("" when nothing changed). An explicit maxConns that cannot fit is
// an error (CheckFDLimit's), for a warning: the caller asked for more
// than the process can hold.
func FitFDLimit(maxConns int, explicit bool) (int, string, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return maxConns, "", fmt.Errorf("proxy: getrlimit(RLIMIT_NOFILE): %w", err)
	}
	return fitFDs(rl, maxConns, explicit, func(r unix.Rlimit) error {
		return unix.Setrlimit(unix.RLIMIT_NOFILE, &r)
	})
}

func fitFDs(rl unix.Rlimit, maxConns int, explicit bool, set func(unix.Rlimit) error) (int, string, error) {
	need := uint64(maxConns)*FDsPerTunnel + 64
	if rl.Cur >= need {
		return maxConns, "", nil
	}
	raised := unix.Rlimit{Cur: need, Max: max(rl.Max, need)}
	if err := set(raised); err == nil {
		return maxConns, fmt.Sprintf("raised RLIMIT_NOFILE from %d to %d for %d connections", rl.Cur, need, maxConns), nil
	}
	if rl.Max > rl.Cur && set(unix.Rlimit{Cur: rl.Max, Max: rl.Max}) == nil {
		rl.Cur = rl.Max
	}
	fits := 0
	if rl.Cur > 64 {
		fits = int((rl.Cur - 64) / FDsPerTunnel)
	}
	if explicit || fits < 1 {
		return maxConns, "", fdLimitError(rl.Cur, maxConns, need)
	}
	return fits, fmt.Sprintf("--max-conns lowered from %d to %d to fit RLIMIT_NOFILE %d (the limit could not be raised)", maxConns, fits, rl.Cur), nil
}
