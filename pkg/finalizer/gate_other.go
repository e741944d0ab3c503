//go:build !unix

package finalizer

import "os/exec"

const noFollow = 0

func setProcessGroup(cmd *exec.Cmd, sandboxed bool) {}
