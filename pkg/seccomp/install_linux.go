//go:build linux

package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Install loads filter with seccomp(SECCOMP_SET_MODE_FILTER,
// SECCOMP_FILTER_FLAG_TSYNC) so that it covers every thread of the
// process, and everything they exec, for good. no_new_privs must already be
// set on the calling thread (ErrNoNewPrivs otherwise); lock the OS thread,
// set it, and call Install on that thread. A thread that cannot be
// synchronised is reported as *TSYNCError, and then nothing is installed.
func Install(filter []bpf.RawInstruction) error {
	if len(filter) == 0 || len(filter) > MaxInstructions {
		return fmt.Errorf("seccomp: filter has %d instructions, want 1..%d", len(filter), MaxInstructions)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("seccomp: prctl(PR_GET_NO_NEW_PRIVS): %w", err)
	}
	if nnp != 1 {
		return fmt.Errorf("seccomp: %w", ErrNoNewPrivs)
	}

	prog := make([]unix.SockFilter, len(filter))
	for i, ins := range filter {
		prog[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	switch {
	case errno == unix.ESRCH:
		return &TSYNCError{}
	case errno == unix.EINVAL:
		return fmt.Errorf("seccomp: kernel rejected the filter or SECCOMP_FILTER_FLAG_TSYNC (needs Linux >= 3.17): %w", errno)
	case errno != 0:
		return fmt.Errorf("seccomp: seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", errno)
	case r != 0:
		return &TSYNCError{TID: int(r)}
	}

	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("seccomp: verify installed filter: prctl(PR_GET_SECCOMP): %w", err)
	}
	if mode != 2 { // SECCOMP_MODE_FILTER
		return errors.New("seccomp: filter installed but the thread reports seccomp mode " + fmt.Sprint(mode))
	}
	return nil
}
