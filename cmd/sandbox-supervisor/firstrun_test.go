package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// readmeFirstCommand returns the README's first sandbox command (the
// run line of its first block) without its --workdir, so that it starts
// in the current directory as the README says a run without --workdir
// does, with ./bin/sandbox-supervisor replaced by bin and --state-dir st
// added after run.
func readmeFirstCommand(t *testing.T, bin, st string) string {
	t.Helper()
	line := ""
	for _, l := range strings.Split(readmeBlocks(t, "First commands")[0], "\n") {
		if strings.HasPrefix(l, "./bin/sandbox-supervisor run ") {
			line = l
			break
		}
	}
	if !strings.Contains(line, " --workdir /var/tmp/palisade-work ") {
		t.Fatalf("README's first block has no `./bin/sandbox-supervisor run --workdir /var/tmp/palisade-work ...` line")
	}
	cmd := strings.Replace(line, " --workdir /var/tmp/palisade-work ", " ", 1)
	return strings.Replace(cmd, "./bin/sandbox-supervisor run ", bin+" run --state-dir "+st+" ", 1)
}

// Issue 16 item 1: the README's first command without --workdir, pasted
// in a clone in root's home (0700) or a normal user's home (0755 on
// Debian, 0750 on newer Ubuntu), either works or stops with 125 and a
// message naming the directory, the sandbox identity and --workdir, as
// the README says. Before the
// fix root's home ended in exit 126, "fork/exec ...: permission denied".
func TestReadmeFirstCommandFromAHome(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	st := filepath.Join(t.TempDir(), "state")
	// Homes live outside /tmp: the sandbox's /tmp is its own tmpfs, so a
	// clone under the host's /tmp would not show the host's modes.
	base := hostDir(t, "palisade-homes-", 0o755)
	line := readmeFirstCommand(t, bin, st)
	for _, c := range []struct {
		name       string
		uid        int
		mode       os.FileMode
		works      bool
		wantInText []string
	}{
		{"root home 0700", 0, 0o700, false, []string{"uid 10001", "--workdir", "0700"}},
		{"user home 0750", 1000, 0o750, false, []string{"uid 10001", "--workdir", "0750"}},
		{"user home 0755", 1000, 0o755, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := filepath.Join(base, strings.ReplaceAll(c.name, " ", "-"))
			clone := filepath.Join(home, "palisade")
			os.MkdirAll(clone, 0o755)
			os.Chown(home, c.uid, c.uid)
			os.Chown(clone, c.uid, c.uid)
			os.Chmod(home, c.mode)
			cmd := exec.Command("/bin/sh", "-c", line)
			cmd.Dir = clone
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			cmd.Run()
			code := cmd.ProcessState.ExitCode()
			if c.works {
				if code != 0 || !strings.Contains(out.String(), "uid=10001") || !strings.HasSuffix(out.String(), "done\n") {
					t.Fatalf("exit %d, stdout %q, stderr %q; want the README's output", code, out.String(), errb.String())
				}
				return
			}
			if code != 125 {
				t.Fatalf("exit %d, stderr %q; want 125", code, errb.String())
			}
			for _, w := range append(c.wantInText, home) {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("message %q does not name %q", errb.String(), w)
				}
			}
			if ents, _ := os.ReadDir(st); len(ents) != 0 {
				t.Errorf("a refused run left state behind: %v", ents)
			}
		})
	}
}

// Issue 16 item 3: under --profile bounded-tmpfs TMPDIR is
// <workdir>/test-scratch, and it exists, owned by the sandbox identity,
// so mktemp works. Before the fix it was never created.
func TestBoundedTmpfsTMPDIRExists(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	testutil.RequireFeature(t, "cgroup")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--profile", "bounded-tmpfs", "--",
		"/bin/sh", "-c", `f=$(mktemp) && echo made "$f"`)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "made "+filepath.Join(wd, "test-scratch")+"/") {
		t.Fatalf("mktemp under bounded-tmpfs: %v\n%s", err, out)
	}
	fi, err := os.Lstat(filepath.Join(wd, "test-scratch"))
	if err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != 10001 {
		t.Fatalf("test-scratch: %v %v, want a directory owned by uid 10001", fi, err)
	}
}

// Issue 16 item 3: the agent owns the working directory. A symlink it
// planted as test-scratch during an earlier run (to a root-owned
// directory, or dangling into one) is never followed by the root
// supervisor: the bounded-tmpfs run stops with 125 naming the path, and
// nothing outside the workdir changes (no directory made, no owner or
// mode changed).
func TestBoundedTmpfsScratchSymlinkNotFollowed(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	testutil.RequireFeature(t, "cgroup")
	bin := testutil.Binary(t, "sandbox-supervisor")
	for _, dangling := range []bool{false, true} {
		wd, st := sandboxDirs(t)
		target := hostDir(t, "palisade-scratch-target-", 0o755)
		link := target
		if dangling {
			link = filepath.Join(target, "made-by-root")
		}
		plant := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--", "/bin/ln", "-s", link, "test-scratch")
		if out, err := plant.CombinedOutput(); err != nil {
			t.Fatalf("planting run: %v\n%s", err, out)
		}
		if fi, err := os.Lstat(filepath.Join(wd, "test-scratch")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("planted symlink missing: %v", err)
		}
		var errb bytes.Buffer
		cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--profile", "bounded-tmpfs", "--", "/bin/true")
		cmd.Stderr = &errb
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(errb.String(), filepath.Join(wd, "test-scratch")) {
			t.Errorf("dangling=%v: exit %d, stderr %q; want 125 naming test-scratch", dangling, code, errb.String())
		}
		fi, err := os.Lstat(target)
		if err != nil {
			t.Fatal(err)
		}
		if s := fi.Sys().(*syscall.Stat_t); s.Uid != 0 || s.Gid != 0 || fi.Mode().Perm() != 0o755 {
			t.Errorf("dangling=%v: target changed: uid %d gid %d mode %v", dangling, s.Uid, s.Gid, fi.Mode())
		}
		if ents, _ := os.ReadDir(target); len(ents) != 0 {
			t.Errorf("dangling=%v: something was created in the target: %v", dangling, ents)
		}
	}
}
