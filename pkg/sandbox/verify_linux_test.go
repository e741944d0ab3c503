//go:build linux

package sandbox

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The init's after-the-fact check refuses, and kills, a command that is
// not confined: here an ordinary child of the (root) test process.
func TestVerifyConfinedKillsAnUnconfinedCommand(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	err := verifyConfined(cmd.Process.Pid, SandboxID, SandboxID, true)
	if err == nil || !strings.Contains(err.Error(), "uid[0]=0") || !strings.Contains(err.Error(), "CapEff") || !strings.Contains(err.Error(), "NoNewPrivs") {
		t.Fatalf("verifyConfined = %v, want a refusal naming uid, capabilities and no_new_privs", err)
	}
	select {
	case werr := <-done:
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("command ended with %v, want SIGKILL", werr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("unconfined command still running after the refusal")
	}
}
