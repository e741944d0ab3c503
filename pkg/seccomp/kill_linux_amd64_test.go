//go:build linux && amd64

package seccomp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// int80Getpid makes the i386 getpid syscall (number 20) through "int
// 0x80" from this 64-bit process. The kernel handles it with the i386
// table and shows seccomp AUDIT_ARCH_I386. Go has no way to emit that
// instruction without assembly, so this maps three instructions into an
// executable page and calls them as a Go func value (a pointer to a
// pointer to code).
func int80Getpid() (int32, error) {
	code := []byte{
		0xb8, 20, 0, 0, 0, // mov eax, 20 (__NR_getpid on i386)
		0xcd, 0x80, // int 0x80
		0xc3, // ret (the result is in eax, Go's first int32 result register)
	}
	mem, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return 0, err
	}
	copy(mem, code)
	if err := unix.Mprotect(mem, unix.PROT_READ|unix.PROT_EXEC); err != nil {
		return 0, err
	}
	fv := &struct{ fn uintptr }{uintptr(unsafe.Pointer(&mem[0]))}
	f := *(*func() int32)(unsafe.Pointer(&fv))
	return f(), nil
}

// A syscall through a foreign ABI kills the whole process with SIGSYS.
// The control child proves int 0x80 reaches the kernel on this host at
// all (ia32 emulation on); otherwise the test cannot tell SIGSYS from a
// missing ABI and skips with that reason.
func TestForeignArchKillsProcess(t *testing.T) {
	switch {
	case testutil.IsChild("seccomp-int80-control"):
		pid, err := int80Getpid()
		fmt.Printf("\nINT80 %d %d %v\n", pid, os.Getpid(), err)
		os.Exit(0)
	case testutil.IsChild("seccomp-int80"):
		// No core file from the SIGSYS kill.
		unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
		runtime.LockOSThread()
		filter, err := Build(Config{})
		if err == nil {
			err = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
		}
		if err == nil {
			err = Install(filter)
		}
		if err != nil {
			fmt.Printf("\nINSTALL-FAILED %v\n", err)
			os.Exit(3)
		}
		fmt.Printf("\nINSTALLED\n")
		pid, err := int80Getpid()
		fmt.Printf("\nSURVIVED %d %v\n", pid, err)
		os.Exit(0)
	}
	testutil.RequireFeature(t, "seccomp")
	requireCondition(t, "seccomp-test:ia32-syscalls", func() error {
		out, err := childOutput("TestForeignArchKillsProcess", "seccomp-int80-control")
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "INT80" && f[1] == f[2] {
				if _, err := strconv.Atoi(f[1]); err == nil {
					return nil
				}
			}
		}
		return fmt.Errorf("int 0x80 getpid from a 64-bit process did not work (ia32 emulation off?): %v: %s", err, out)
	})

	out, err := testutil.RunInChild(t, "TestForeignArchKillsProcess", "seccomp-int80", nil)
	if !strings.Contains(string(out), "INSTALLED") {
		t.Fatalf("child did not install the filter: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "SURVIVED") {
		t.Fatalf("i386 syscall returned under the filter:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child error %v, want death by SIGSYS", err)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Fatalf("child ended with %v, want killed by SIGSYS", ee)
	}
}
