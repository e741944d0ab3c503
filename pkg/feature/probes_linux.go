//go:build linux

package feature

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Namespace types the sandbox uses, with the kernel that introduced each.
var namespaceKernels = map[string]string{
	"mnt":    "2.4.19",
	"pid":    "3.8",
	"ipc":    "3.8",
	"uts":    "3.8",
	"net":    "3.8",
	"cgroup": "4.6",
	"user":   "3.8",
}

func init() {
	Register(&Probe{Name: "landlock", MinKernel: "5.13", Confinement: true, Check: func() error {
		abi, err := LandlockABI()
		if err != nil {
			return err
		}
		if abi < 1 {
			return fmt.Errorf("landlock ABI %d", abi)
		}
		return nil
	}})
	Register(&Probe{Name: "seccomp", MinKernel: "3.17", Confinement: true, Check: probeSeccomp})
	for ns, k := range namespaceKernels {
		ns := ns
		Register(&Probe{Name: "ns:" + ns, MinKernel: k, Confinement: ns != "user", Check: func() error {
			if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
				return fmt.Errorf("/proc/self/ns/%s: %w", ns, err)
			}
			return nil
		}})
	}
	Register(&Probe{Name: "cgroup", MinKernel: "4.5", Confinement: true, Check: probeCgroup})
	Register(&Probe{Name: "root", Confinement: true, Check: func() error {
		if os.Geteuid() != 0 {
			return fmt.Errorf("running as uid %d, not root", os.Geteuid())
		}
		return nil
	}})
}

// LandlockABI returns the Landlock ABI version the running kernel offers,
// or an error when Landlock is absent or disabled.
func LandlockABI() (int, error) {
	const landlockCreateRulesetVersion = 1 << 0
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, landlockCreateRulesetVersion)
	if errno != 0 {
		return 0, fmt.Errorf("landlock_create_ruleset(VERSION): %w", errno)
	}
	return int(v), nil
}

func probeSeccomp() error {
	// PR_GET_SECCOMP works everywhere seccomp is compiled in; the filter
	// mode itself is checked by asking for a NULL filter, which fails
	// with EFAULT (mode supported) rather than EINVAL (not supported).
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_GET_SECCOMP): %w", err)
	}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(nil)))
	if errno == unix.EINVAL {
		return fmt.Errorf("seccomp filter mode not supported")
	}
	return nil
}

func probeCgroup() error {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return nil // unified v2
	}
	for _, c := range []string{"pids", "memory", "cpu"} {
		if _, err := os.Stat("/sys/fs/cgroup/" + c + "/tasks"); err == nil {
			return nil // v1 controllers
		}
	}
	return fmt.Errorf("neither a cgroup v2 hierarchy with controllers nor cgroup v1 controllers under /sys/fs/cgroup")
}
