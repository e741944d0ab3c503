//go:build linux

package finalizer

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/termsafe"
)

// Regression tests for issue 24, built like issue 17's (attack_linux_test.go):
// each attack is planted by the sandbox identity inside a real sandbox,
// the workspaces are then preserved (given to root), and the built
// finalizer-recover runs as root exactly as docs/finalizer.md says.

// TestAttackEvidenceRemotePushesIntoRootDir (item 1): task 1's agent
// plants a bare repository evil.git whose receive.denyCurrentBranch is
// updateInstead and whose linked-worktree entry names a root-only
// directory (HEAD on an unborn branch, so receive-pack's checks pass on
// an empty index). Task 1 is preserved: evil.git is root's now, and git's
// ownership check passes. Task 2's agent points remote_url (and its
// config) at evil.git and makes its contract pass. Before the fix,
// finalizer-recover --execute pushed there and root's receive-pack
// checked the agent's tree out into the root-only directory
// (/etc/cron.d would be root code execution).
//
// Now the operator names the canonical remote (--remote); the evidence's
// URL differs and the recovery is refused naming both. An operator who
// names evil.git itself is refused too: it lies in a task workspace.
func TestAttackEvidenceRemotePushesIntoRootDir(t *testing.T) {
	a := newAttack(t)
	task1 := filepath.Join(a.f.dir, "task1")
	if out, err := exec.Command("cp", "-a", a.f.ws, task1).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	evil := filepath.Join(task1, "evil.git")
	a.plantIn(t, task1, `git init -q --bare evil.git
git -C repo push -q ../evil.git BASE:refs/heads/main
git -C evil.git config receive.denyCurrentBranch updateInstead
git -C evil.git symbolic-ref HEAD refs/heads/unborn
mkdir -p evil.git/worktrees/x
echo OUTSIDE/victim/.git > evil.git/worktrees/x/gitdir
echo 'ref: refs/heads/main' > evil.git/worktrees/x/HEAD
echo ../.. > evil.git/worktrees/x/commondir
`)
	evilMain := a.f.git(a.f.dir, "--git-dir", evil, "rev-parse", "main")
	a.plant(t, `perl -0pi -e 's#"remote_url": "[^"]*"#"remote_url": "`+evil+`"# or die "no remote_url"' `+EvidenceFile+`
git -C repo config remote.origin.url `+evil+`
printf '#!/bin/sh\nexit 0\n' > repo/scripts/contract.sh
`)
	if data, _ := os.ReadFile(filepath.Join(a.f.ws, EvidenceFile)); !strings.Contains(string(data), evil) {
		t.Fatalf("the agent's edit did not land: %s", data)
	}
	for _, c := range []struct {
		name, remote string
		want         []string
	}{
		{"operator names the canonical remote", a.f.remote, []string{`remote_url "` + evil + `"`, `does not match --remote "` + a.f.remote + `"`}},
		{"operator names evil.git", evil, []string{"a task workspace (it holds " + EvidenceFile}},
	} {
		t.Logf("== %s", c.name)
		args := []string{a.f.ws, "--evidence-id", a.f.ev.EvidenceID, "--remote", c.remote, "--approve-new-file", "docs/added.md",
			"--approve-new-file", "src/new.go", "--execute", "--gate-sandbox", a.sup}
		for _, args := range [][]string{{"inspect", a.f.ws, "--remote", c.remote}, args} {
			r := a.run(t, 3*time.Minute, args...)
			for _, w := range c.want {
				a.refusedNaming(t, r, w)
			}
		}
	}
	// Nothing outside the workspaces was written: the root-only victim
	// directory holds what it held (content, mode, mtime), and neither
	// remote moved.
	a.checkOutside(t, false)
	if got := a.f.git(a.f.dir, "--git-dir", evil, "rev-parse", "main"); got != evilMain {
		t.Errorf("evil.git's main moved to %s", got)
	}
}

// rawUnsafe lists the runes in s a terminal would act on or that hide or
// reorder text (termsafe.Unsafe), newlines and tabs excepted.
func rawUnsafe(s string) []rune {
	var bad []rune
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				bad = append(bad, r)
				continue
			}
		}
		if r != '\n' && r != '\t' && termsafe.Unsafe(r) {
			bad = append(bad, r)
		}
	}
	return bad
}

// TestAttackGateOutputDrivesTerminal (item 3): the agent writes the
// contract script the gate runs. (a) It prints OSC 52 (a clipboard
// write), a title, clear-screen and home, a forged "pushed … to
// origin/main" line, a C1 CSI, a bidi override, a line separator and a
// carriage return, then passes: before the fix all of it reached root's
// terminal byte for byte. (b) It prints "sandbox-supervisor: sandbox not
// created: <OSC 52> FORGED" and exits 125: before the fix that line,
// escape bytes included, became the tool's error and the record's error.
// Now gate output is escaped and every line carries the gate's name, the
// supervisor's own outcome travels on its --status-fd, and no escape
// byte reaches the terminal or the record.
func TestAttackGateOutputDrivesTerminal(t *testing.T) {
	const forged = "pushed 0123456789012345678901234567890123456789 to origin/main"
	for _, c := range []struct {
		name, script string
		pushed       bool
	}{
		{"passes", `cat > repo/scripts/contract.sh <<'X'
#!/bin/sh
printf '\033]52;c;cHduZWQ=\007\033]0;owned\007\033[2J\033[H'
printf '` + forged + `\n'
printf '\302\2331m bidi:\342\200\256 sep:\342\200\250 cr:\rX\n' >&2
test -f canon.txt && grep -q agent feature.txt
X
`, true},
		{"forges the supervisor", `cat > repo/scripts/contract.sh <<'X'
#!/bin/sh
printf 'sandbox-supervisor: sandbox not created: \033]52;c;cHduZWQ=\007 FORGED\n' >&2
exit 125
X
`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAttack(t)
			a.plant(t, c.script)
			r := a.run(t, 3*time.Minute, a.recoverArgs()...)
			if bad := rawUnsafe(r.stdout + r.stderr); len(bad) > 0 {
				t.Errorf("raw control, separator or bidi runes reached the terminal: %q", bad)
			}
			for _, line := range strings.Split(r.stdout+r.stderr, "\n") {
				if strings.HasPrefix(line, forged) || strings.Contains(line, "FORGED") && !strings.HasPrefix(line, "[contract] ") {
					t.Errorf("a gate's line stands on its own: %q", line)
				}
			}
			data, err := os.ReadFile(filepath.Join(a.f.ws, RecordFile))
			if err != nil {
				t.Fatal(err)
			}
			if bad := rawUnsafe(string(data)); len(bad) > 0 {
				t.Errorf("raw control, separator or bidi runes in the record: %q", bad)
			}
			var rec Record
			if err := json.Unmarshal(data, &rec); err != nil {
				t.Fatal(err)
			}
			if c.pushed {
				if r.code != 0 || rec.Status != RecordPushed || !strings.Contains(r.stdout, "pushed "+rec.PushedCommit+" to origin/main") {
					t.Errorf("exit %d, record %+v: the recovery should push", r.code, rec)
				}
			} else {
				if r.code != 1 || rec.FailedStep != StepGate || strings.Contains(rec.Error, "FORGED") || strings.Contains(rec.Error, "sandbox not created") {
					t.Errorf("exit %d, step %q, error %q: want a gate failure (exit 125 of the gate) without the gate's words", r.code, rec.FailedStep, rec.Error)
				}
			}
			a.checkOutside(t, c.pushed)
		})
	}
}

// diskUse is the disk space the files below dir occupy (st_blocks).
func diskUse(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		var st syscall.Stat_t
		if err == nil && syscall.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

// peakUse samples how much of the filesystem at dir is in use, every
// 2 ms, until stop is closed, and returns the highest sample.
func peakUse(dir string, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var peak int64
		for {
			var st unix.Statfs_t
			if unix.Statfs(dir, &st) == nil {
				if used := int64(st.Blocks-st.Bfree) * st.Bsize; used > peak {
					peak = used
				}
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return out
}

// TestAttackSparsePackFillsTmp (item 4): the agent repacks its objects
// and extends the pack to 3 GiB with a hole (truncate: a few hundred KiB
// on disk). Before the fix inspect, read-only by contract, copied 3 GiB
// of zeros into $TMPDIR (47 s on the reporting host) before git fsck
// refused; here $TMPDIR is a 512 MiB tmpfs of the test's own, which the
// old code filled to ENOSPC. Now inspect and the recovery refuse within
// seconds, naming the pack, and $TMPDIR never holds more than twice what
// the workspace's .git occupies on disk (plus 1 MiB).
func TestAttackSparsePackFillsTmp(t *testing.T) {
	a := newAttack(t)
	tmp := filepath.Join(a.f.dir, "tmpfs")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=512m,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs for $TMPDIR: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(tmp, unix.MNT_DETACH) })
	env := append(append([]string{}, a.f.env...), "TMPDIR="+tmp)

	// The control: a clean workspace is inspected (its mirror built and
	// checked) within the same bound.
	bound := 2*diskUse(t, filepath.Join(a.f.repo, ".git")) + 1<<20
	stop := make(chan struct{})
	peak := peakUse(tmp, stop)
	r := a.runEnv(t, 60*time.Second, env, "inspect", a.f.ws, "--remote", a.f.remote)
	close(stop)
	if p := <-peak; r.code != 0 || p > bound {
		t.Errorf("clean workspace: exit %d, $TMPDIR peak %d bytes, bound %d", r.code, p, bound)
	} else {
		t.Logf("clean workspace: $TMPDIR peak %d bytes (bound %d)", p, bound)
	}

	a.plant(t, `cd repo
git repack -q -a -d
chmod u+w .git/objects/pack/pack-*.pack
truncate -s 3G .git/objects/pack/pack-*.pack
test $(ls .git/objects/pack/*.pack | wc -l) = 1
`)
	packs, _ := filepath.Glob(filepath.Join(a.f.repo, ".git", "objects", "pack", "*.pack"))
	if len(packs) != 1 {
		t.Fatalf("planted packs: %q", packs)
	}
	bound = 2*diskUse(t, filepath.Join(a.f.repo, ".git")) + 1<<20
	for _, args := range [][]string{{"inspect", a.f.ws}, a.recoverArgs()} {
		stop := make(chan struct{})
		peak := peakUse(tmp, stop)
		r := a.runEnv(t, 60*time.Second, env, args...)
		close(stop)
		a.refusedNaming(t, r, quotePath(packs[0])+": a sparse file (3221225472 bytes")
		if r.took > 20*time.Second {
			t.Errorf("took %s", r.took)
		}
		if p := <-peak; p > bound {
			t.Errorf("$TMPDIR held %d bytes at its peak, more than twice the .git's disk use plus 1 MiB (%d)", p, bound)
		} else {
			t.Logf("$TMPDIR peak %d bytes (bound %d), %s", p, bound, r.took)
		}
	}
	a.checkOutside(t, false)
}
