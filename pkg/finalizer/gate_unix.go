//go:build unix

package finalizer

import (
	"os/exec"
	"syscall"
	"time"
)

// noFollow makes opening a symlink fail instead of following it.
const noFollow = syscall.O_NOFOLLOW

// setProcessGroup puts the gate in its own process group. Cancellation
// kills the whole group of a gate on the host, so a timed-out gate leaves
// no grandchildren behind. A sandboxed gate's supervisor gets SIGTERM,
// which it forwards to the command, and SIGKILL after grace; the sandbox
// dies with its supervisor (parent-death signal, PID namespace).
func setProcessGroup(cmd *exec.Cmd, sandboxed bool) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if sandboxed {
		cmd.Cancel = func() error {
			return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		}
		cmd.WaitDelay = 10 * time.Second
		return
	}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
