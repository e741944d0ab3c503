//go:build linux

package proxy

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// NoCoreDumps leaves the process non-dumpable with no core limit, so the
// inspection CA's key cannot reach a core file. Run in a child copy of
// the test binary: the change lasts for the process's life.
func TestNoCoreDumps(t *testing.T) {
	if os.Getenv("PALISADE_NOCORE_CHILD") == "1" {
		// A fresh exec is dumpable; otherwise the check below proves nothing.
		if d, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); d != 1 {
			t.Fatalf("the child starts with PR_GET_DUMPABLE = %d, want 1", d)
		}
		if err := NoCoreDumps(); err != nil {
			t.Fatal(err)
		}
		d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
		if err != nil || d != 0 {
			t.Fatalf("PR_GET_DUMPABLE = %d, %v; want 0", d, err)
		}
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_CORE, &rl); err != nil || rl.Cur != 0 || rl.Max != 0 {
			t.Fatalf("RLIMIT_CORE = %+v, %v; want 0/0", rl, err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoCoreDumps$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PALISADE_NOCORE_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
