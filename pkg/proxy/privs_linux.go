//go:build linux

package proxy

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Capabilities the proxy keeps when it runs as root: reading another
// user's /proc/<pid>/fd and /proc/<pid>/exe for attribution needs ptrace
// read access (CAP_SYS_PTRACE), and hashing an executable the proxy's
// uid cannot read needs CAP_DAC_READ_SEARCH.
var KeepCapabilities = []int{unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH}

// ErrCapsCgo is returned by DropCapabilities in a binary linked with cgo:
// the Go runtime cannot then change the credentials of every thread.
var ErrCapsCgo = errors.New("proxy: cannot drop capabilities on all threads of a cgo-linked binary (build with CGO_ENABLED=0)")

// DropCapabilities reduces the effective, permitted and inheritable
// capability sets of every thread of the process to keep (which also
// clears the ambient set) and sets no_new_privs. Call it after the
// listeners are bound and the files that need privilege are open.
func DropCapabilities(keep []int) error {
	var mask uint64
	for _, c := range keep {
		if c < 0 || c > 63 {
			return fmt.Errorf("proxy: capability %d out of range", c)
		}
		mask |= 1 << uint(c)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(mask), Permitted: uint32(mask)},
		{Effective: uint32(mask >> 32), Permitted: uint32(mask >> 32)},
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		if e == syscall.ENOTSUP {
			return ErrCapsCgo
		}
		return fmt.Errorf("proxy: capset: %w", e)
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		return fmt.Errorf("proxy: prctl(PR_SET_NO_NEW_PRIVS): %w", e)
	}
	return nil
}

// NoCoreDumps keeps the process's memory (the inspection CA's private
// key lives only there) out of core files and away from same-uid
// debuggers: RLIMIT_CORE 0, and the process is made non-dumpable, which
// also makes its /proc/<pid> files root-owned. Call it before the key is
// generated.
func NoCoreDumps() error {
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("proxy: setrlimit(RLIMIT_CORE, 0): %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("proxy: prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}
