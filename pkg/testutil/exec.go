package testutil

import (
	"os"
	"os/exec"
	"testing"
)

var lookPath = exec.LookPath

// ChildEnv is the environment variable that tells a re-executed test
// binary which helper to run.
const ChildEnv = "PALISADE_TEST_CHILD"

// RunInChild runs the test binary again as a child process that executes
// only the test named testName with ChildEnv=helper, so that irreversible
// confinement (Landlock, seccomp, setuid) happens in the child and never in
// the test process. The helper test checks IsChild(helper) and does its
// work; the caller gets the combined output and the exit error.
//
//	func TestX(t *testing.T) {
//		if testutil.IsChild("x") { doConfinedThing(); os.Exit(0) }
//		out, err := testutil.RunInChild(t, "TestX", "x", nil)
//	}
func RunInChild(t testing.TB, testName, helper string, extraEnv []string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+testName+"$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(), ChildEnv+"="+helper)
	cmd.Env = append(cmd.Env, extraEnv...)
	return cmd.CombinedOutput()
}

// IsChild reports whether this process is a child started by RunInChild
// for helper.
func IsChild(helper string) bool { return os.Getenv(ChildEnv) == helper }
