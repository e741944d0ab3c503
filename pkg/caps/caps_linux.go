//go:build linux

package caps

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lastCap reads the highest capability number the kernel knows.
func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("caps: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("caps: cap_last_cap: %w", err)
	}
	return n, nil
}

// PrepareThread drops, on the calling thread only, everything that would
// survive the child's setuid: the ambient set, the whole bounding set and
// the inheritable set; then it sets no_new_privs. Permitted and effective
// stay so that the forked child can still call setgroups/setgid/setuid.
// The caller must hold the goroutine locked to its OS thread and never
// unlock it (the thread is tainted; it must exit with the goroutine).
func PrepareThread() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("caps: clear ambient set: %w", err)
	}
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("caps: drop capability %d from bounding set: %w", c, err)
		}
	}
	for c := 0; c <= last; c++ {
		if on, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil || on != 0 {
			return fmt.Errorf("caps: capability %d still in bounding set", c)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("caps: capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("caps: clear inheritable set: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("caps: set no_new_privs: %w", err)
	}
	return nil
}

// ReadStatus reads and parses /proc/<pid>/status.
func ReadStatus(pid int) (Status, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Status{}, fmt.Errorf("caps: %w", err)
	}
	return ParseStatus(string(b))
}
