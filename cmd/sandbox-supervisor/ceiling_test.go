package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

const ceilingTestPolicy = `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /bin, /lib, /lib64, /etc]
  read_write: [/tmp, /dev/null]
`

// run refuses a policy beyond the ceiling with 125 before anything runs,
// naming the first excess; the same policy within the ceiling runs. The
// ceiling comes from --ceiling or $PALISADE_CEILING_FILE.
func TestRunRefusesPolicyBeyondCeiling(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	ceil := filepath.Join(dir, "ceiling.yaml")
	os.WriteFile(ceil, []byte(strings.Replace(ceilingTestPolicy, ", /etc]", "]", 1)), 0o600)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte(ceilingTestPolicy), 0o600)
	marker := filepath.Join(wd, "ran")

	var errb bytes.Buffer
	cmd := exec.Command(bin, "run", "--ceiling", ceil, "--policy", pol, "--state-dir", st, "--workdir", wd, "--", "/bin/sh", "-c", "touch "+marker)
	cmd.Stderr = &errb
	cmd.Run()
	want := "policy exceeds the ceiling " + ceil + ": filesystem_policy.read_only[1]: /etc is not within the ceiling's filesystem_policy"
	if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(errb.String(), want) {
		t.Fatalf("exit %d, stderr %q; want 125 and %q", code, errb.String(), want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran")
	}

	cmd = exec.Command(bin, "run", "--policy", pol, "--state-dir", st, "--workdir", wd, "--", "/bin/sh", "-c", "touch "+marker)
	cmd.Env = append(os.Environ(), ceiling.EnvPath+"="+ceil)
	if out, err := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), want) {
		t.Fatalf("with $%s: %v\n%s", ceiling.EnvPath, err, out)
	}

	os.WriteFile(ceil, []byte(ceilingTestPolicy), 0o600)
	cmd = exec.Command(bin, "run", "--ceiling", ceil, "--policy", pol, "--state-dir", st, "--workdir", wd, "--", "/bin/sh", "-c", "touch "+marker)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("within the ceiling: %v\n%s", err, out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command did not run within the ceiling")
	}

	// A ceiling others may write stops every run.
	os.Chmod(ceil, 0o666)
	cmd = exec.Command(bin, "run", "--ceiling", ceil, "--policy", pol, "--state-dir", st, "--workdir", wd, "--", "/bin/true")
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), "writable by group or others") {
		t.Fatalf("a writable ceiling: exit %d\n%s", cmd.ProcessState.ExitCode(), out)
	}
}
