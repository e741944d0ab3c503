package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Issue 17 attack 11: a policy names a path inside the working directory
// in read_only or read_write. During a first, ordinary run the agent
// replaces that path with a symlink to a root-owned directory outside
// the workdir (which ordinary permissions let the sandbox user read and
// write, so Landlock is the only barrier). The second run must not grant
// the symlink's target: it refuses with 125 naming the entry, and the
// target stays unread and unwritten.
func TestPlantedSymlinkInPolicyPathIsRefused(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	for _, access := range []string{"read_only", "read_write"} {
		t.Run(access, func(t *testing.T) {
			wd, st := sandboxDirs(t)
			// Outside every path the policy grants.
			target := hostDir(t, "palisade-target-", 0o777)
			secret := filepath.Join(target, "secret")
			os.WriteFile(secret, []byte("root-only-content\n"), 0o644)

			entry := filepath.Join(wd, "data")
			if err := os.Mkdir(entry, 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chown(entry, 10001, 10001)

			// Run 1: the bundled default policy (workdir read-write). The
			// agent swaps data/ for a symlink to the target.
			plant := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--",
				"/bin/sh", "-c", "rmdir data && ln -s "+target+" data && ls -ld data")
			plant.Dir = wd
			if out, err := plant.CombinedOutput(); err != nil {
				t.Fatalf("first run (planting): %v\n%s", err, out)
			}
			if fi, err := os.Lstat(entry); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the agent's symlink is not there: %v %v", fi, err)
			}

			// Run 2: a policy that names data/ in read_only or read_write.
			pol := filepath.Join(t.TempDir(), "policy.yaml")
			ro, rw := "[/usr, /bin, /lib, /lib64, /etc]", "[/tmp, /dev/null]"
			if access == "read_only" {
				ro = "[/usr, /bin, /lib, /lib64, /etc, " + entry + "]"
			} else {
				rw = "[/tmp, /dev/null, " + entry + "]"
			}
			os.WriteFile(pol, []byte("version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: "+ro+
				"\n  read_write: "+rw+"\nlandlock:\n  compatibility: hard_requirement\nprocess:\n  run_as_user: sandbox\n  run_as_group: sandbox\n"), 0o600)
			var out, errb bytes.Buffer
			use := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--policy", pol, "--",
				"/bin/sh", "-c", "cat "+secret+"; cat data/secret; echo pwned > "+target+"/written; echo pwned > data/written2; exit 0")
			use.Dir, use.Stdout, use.Stderr = wd, &out, &errb
			use.Run()
			if strings.Contains(out.String(), "root-only-content") {
				t.Errorf("the second run read the symlink's target: %q", out.String())
			}
			for _, f := range []string{"written", "written2"} {
				if _, err := os.Lstat(filepath.Join(target, f)); err == nil {
					t.Errorf("the second run wrote %s into the symlink's target", f)
				}
			}
			if code := use.ProcessState.ExitCode(); code != 125 || !strings.Contains(errb.String(), entry) {
				t.Errorf("second run: exit %d, stderr %q; want 125 naming %s", code, errb.String(), entry)
			}
		})
	}
}

// hostDir makes a root-owned directory with the given mode outside /tmp
// (the sandbox's /tmp is its own tmpfs, so a host path there is not seen
// inside), removed when the test ends.
func hostDir(t *testing.T, prefix string, mode os.FileMode) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, mode)
	return d
}
