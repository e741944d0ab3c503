//go:build linux && amd64

package probe

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// int80 issues an i386 syscall through int 0x80 (arch_amd64.s).
func int80(nr uintptr) uintptr

// x32Bit marks an x32 syscall number.
const x32Bit = 0x40000000

func init() {
	helpers["foreign-arch"] = func() int {
		int80(20) // i386 getpid: the filter must kill us here
		return 0
	}
	checks["foreign_arch_killed"] = func(Targets) (string, bool) {
		ws, obs, err := helperResult("foreign-arch")
		if err != nil {
			return "helper: " + err.Error(), false
		}
		return obs, ws.Signaled() && ws.Signal() == syscall.SIGSYS
	}
	checks["x32_syscall_denied"] = func(Targets) (string, bool) {
		_, _, errno := unix.RawSyscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
		return wantErrno(errno, unix.EPERM)
	}
}
