//go:build unix

package finalizer

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the gate in its own process group and makes
// cancellation kill the whole group, so a timed-out gate leaves no
// grandchildren behind.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
