//go:build linux

package attribution

import (
	"os"
	"testing"
)

// In the test's own pid namespace a process's namespace pid is its pid.
func TestSandboxPIDOfSelf(t *testing.T) {
	got, err := SandboxPID("", os.Getpid())
	if err != nil || got != os.Getpid() {
		t.Errorf("SandboxPID(self) = %d, %v; want %d", got, err, os.Getpid())
	}
}
