//go:build linux

package finalizer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
