//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// TestAttackWorkdirBecameSymlink (issue 24, item 2): a first run with
// --workdir W lets the agent replace W/repo with a symbolic link to a
// host directory (rm -rf repo; ln -s TARGET repo). A second run with
// --workdir W/repo, the WORKSPACE/repo layout of docs/finalizer.md,
// followed the link: TARGET (here a root-owned directory, a world-writable
// one, and one where bounded-tmpfs makes root create test-scratch) became
// the sandbox's read-write working directory. Now the second run stops
// with 125 naming the link, and nothing in TARGET changes: no new entry,
// the sentinel's content, mode and mtime, the directory's mode, owner and
// mtime.
func TestAttackWorkdirBecameSymlink(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	testutil.RequireFeature(t, "cgroup")
	bin := testutil.Binary(t, "sandbox-supervisor")
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name    string
		mode    os.FileMode
		profile string
	}{
		{"root-owned target", 0o755, ""},
		{"world-writable target", 0o777, ""},
		{"bounded-tmpfs", 0o755, "bounded-tmpfs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wd, st := sandboxDirs(t)
			target := hostDir(t, "palisade-wd-target-", c.mode)
			secret := "sentinel-" + filepath.Base(target)
			keep := filepath.Join(target, "keep.txt")
			if err := os.WriteFile(keep, []byte(secret+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(keep, old, old)
			os.Chtimes(target, old, old)
			before := statOf(t, target) + statOf(t, keep)

			plant := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--", "/bin/sh", "-c",
				"mkdir -p repo && rm -rf repo && ln -s "+target+" repo")
			if out, err := plant.CombinedOutput(); err != nil {
				t.Fatalf("the agent's run: %v\n%s", err, out)
			}
			if fi, err := os.Lstat(filepath.Join(wd, "repo")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the planted link is missing: %v", err)
			}

			args := []string{"run", "--state-dir", st, "--workdir", filepath.Join(wd, "repo")}
			if c.profile != "" {
				args = append(args, "--profile", c.profile)
			}
			cmd := exec.Command(bin, append(args, "--", "/bin/sh", "-c", "echo pwned > pwned.txt; cat keep.txt")...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.Run()
			t.Logf("second run: exit %d\n%s", cmd.ProcessState.ExitCode(), out.String())
			if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(out.String(), filepath.Join(wd, "repo")+" is a symbolic link owned by uid 10001") {
				t.Errorf("exit %d; want 125 naming the planted link", code)
			}
			if strings.Contains(out.String(), secret) {
				t.Errorf("the sandbox read the target's file")
			}
			if ents, _ := os.ReadDir(target); len(ents) != 1 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("entries were created in the target: %q", names)
			}
			if after := statOf(t, target) + statOf(t, keep); after != before {
				t.Errorf("the target changed:\nbefore %s\nafter  %s", before, after)
			}
			if data, _ := os.ReadFile(keep); string(data) != secret+"\n" {
				t.Errorf("the sentinel's content changed: %q", data)
			}
		})
	}
}

// statOf is path's mode, owner and mtime, for comparing.
func statOf(t *testing.T, path string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s mode %o uid %d gid %d mtime %d; ", path, st.Mode, st.Uid, st.Gid, st.Mtim.Nano())
}
