//go:build !unix

package finalizer

import "os/exec"

func setProcessGroup(cmd *exec.Cmd) {}
