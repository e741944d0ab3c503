//go:build linux

package caps

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// In a child copy of the test binary: prepare a locked thread, fork
// /bin/cat as uid/gid 10001 from it, and print what the kernel says about
// the cat process.
func TestPrepareThreadThenSetuidLeavesNothing(t *testing.T) {
	if testutil.IsChild("caps-drop") {
		runtime.LockOSThread()
		if err := PrepareThread(); err != nil {
			fmt.Println("PREPARE-ERROR", err)
			os.Exit(3)
		}
		cmd := exec.Command("/bin/cat", "/proc/self/status")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 10001, Gid: 10001, Groups: []uint32{}}}
		out, err := cmd.Output()
		if err != nil {
			fmt.Println("EXEC-ERROR", err)
			os.Exit(3)
		}
		os.Stdout.Write(out)
		os.Exit(0)
	}
	testutil.RequireRoot(t)
	out, err := testutil.RunInChild(t, "TestPrepareThreadThenSetuidLeavesNothing", "caps-drop", nil)
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	s, err := ParseStatus(string(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := Verify(s, Expect{UID: 10001, GID: 10001}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "NoNewPrivs:\t1") {
		t.Fatal("no_new_privs not inherited")
	}
}
