//go:build linux

package finalizer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Regression tests for issue 17: an agent plants files in its working
// directory during a sandboxed run; later the operator runs the root tool
// on the preserved, root-owned workspace as docs/finalizer.md says. Every
// attack is planted by the sandbox identity inside a real sandbox
// (sandbox-supervisor run --workdir WORKSPACE), then the built
// finalizer-recover runs as root. Each test asserts that the tool refuses
// naming the planted path (or finishes in bounded time), that nothing
// outside the workspace was read, written, deleted or executed (sentinel
// files with known content and old atimes/mtimes; hooks that would write
// a marker), and that the canonical remote did not move.

// attack is one planted workspace and its sentinels.
type attack struct {
	f       *fixture
	sup     string // sandbox-supervisor
	tool    string // finalizer-recover
	uid     int
	gid     int
	outside string // root-only sentinels, outside the workspace
	marker  string // a planted program would create it
	secret  string // content of the root-only files
	before  map[string]sentinelState
	remote  string // canonical main before
}

type sentinelState struct {
	mode         fs.FileMode
	size         int64
	mtime, atime int64
	content      string
}

var sentinelTime = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)

func newAttack(t *testing.T) *attack {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	f := newFixture(t, fixtureOpts{})
	uid, gid, err := sandbox.ResolveIdentity("sandbox", "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	rand.Read(b)
	a := &attack{
		f: f, sup: testutil.Binary(t, "sandbox-supervisor"), tool: testutil.Binary(t, "finalizer-recover"),
		uid: int(uid), gid: int(gid), outside: filepath.Join(f.dir, "outside"),
		secret: "root-only-" + hex.EncodeToString(b),
	}
	a.marker = filepath.Join(a.outside, "pwned")
	for _, d := range []string{"", "victim", "victim/sub", "objdir"} {
		if err := os.MkdirAll(filepath.Join(a.outside, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"secret.txt":       a.secret + "\n",
		"shadow":           "root:$6$" + a.secret + ":19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n",
		"victim/keep.txt":  "keep " + a.secret + "\n",
		"victim/sub/x.txt": "x\n",
		"token.json": fmt.Sprintf(`{"schema":%q,"evidence_id":%q,"task_id":%q,"status":"refused","token":%q}`,
			ProgressSchema, f.ev.EvidenceID, f.ev.TaskID, "TOKEN-"+a.secret),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(a.outside, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Old times: under relatime any read moves atime, any write mtime.
	filepath.WalkDir(a.outside, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			err = os.Chtimes(p, sentinelTime, sentinelTime)
		}
		return err
	})
	a.before = a.sentinels(t, true)
	a.remote = f.remoteMain()
	return a
}

// sentinels records the state of every sentinel without reading any
// (reading moves atime); withContent reads them too, after the times.
func (a *attack) sentinels(t *testing.T, withContent bool) map[string]sentinelState {
	t.Helper()
	out := map[string]sentinelState{}
	filepath.WalkDir(a.outside, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		info, _ := d.Info()
		out[p] = sentinelState{mode: info.Mode(), size: st.Size, mtime: st.Mtim.Nano(), atime: st.Atim.Nano()}
		return nil
	})
	if withContent {
		for p, s := range out {
			if s.mode.IsRegular() {
				data, _ := os.ReadFile(p)
				s.content = string(data)
				out[p] = s
			}
		}
		// Reading moved the atimes: put them back.
		for p := range out {
			os.Chtimes(p, sentinelTime, sentinelTime)
		}
		for p, s := range out {
			var st syscall.Stat_t
			syscall.Lstat(p, &st)
			s.atime, s.mtime = st.Atim.Nano(), st.Mtim.Nano()
			out[p] = s
		}
	}
	return out
}

// checkOutside asserts nothing outside the workspace was read, written,
// created, deleted or executed, and the canonical remote did not move
// (unless moved is allowed).
func (a *attack) checkOutside(t *testing.T, remoteMayMove bool) {
	t.Helper()
	if _, err := os.Lstat(a.marker); err == nil {
		t.Errorf("a planted program ran as root: %s exists", a.marker)
	}
	after := a.sentinels(t, false)
	var diffs []string
	for p, b := range a.before {
		s, ok := after[p]
		switch {
		case !ok:
			diffs = append(diffs, "deleted "+p)
		case s.mtime != b.mtime || s.size != b.size || s.mode != b.mode:
			diffs = append(diffs, "written "+p)
		case s.atime != b.atime:
			diffs = append(diffs, "read "+p)
		}
	}
	for p := range after {
		if _, ok := a.before[p]; !ok {
			diffs = append(diffs, "created "+p)
		}
	}
	for p, b := range a.before {
		if b.mode.IsRegular() {
			if data, err := os.ReadFile(p); err == nil && string(data) != b.content {
				diffs = append(diffs, "content changed "+p)
			}
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("outside the workspace: %s", strings.Join(diffs, "; "))
	}
	if !remoteMayMove && a.f.remoteMain() != a.remote {
		t.Errorf("the canonical remote moved")
	}
}

// giveWorkspace hands the workspace to the sandbox identity (the agent
// owns its working directory during a run) or back to root (the preserved
// workspace, as docs/finalizer.md describes it).
func (a *attack) giveWorkspace(t *testing.T, toAgent bool) {
	t.Helper()
	a.giveDir(t, a.f.ws, toAgent)
}

// giveDir hands any task workspace to the agent or back to root.
func (a *attack) giveDir(t *testing.T, dir string, toAgent bool) {
	t.Helper()
	uid, gid := 0, 0
	if toAgent {
		uid, gid = a.uid, a.gid
	}
	if err := lchownTree(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// sandboxCmd is the agent's run in a real sandbox with the workspace as
// working directory.
func (a *attack) sandboxCmd(script string) *exec.Cmd {
	return a.sandboxCmdIn(a.f.ws, script)
}

// sandboxCmdIn is the agent's run in a real sandbox with workdir as its
// working directory.
func (a *attack) sandboxCmdIn(workdir, script string, extra ...string) *exec.Cmd {
	script = strings.NewReplacer("OUTSIDE", a.outside, "MARKER", a.marker, "BASE", a.f.base).Replace(script)
	args := append([]string{"run", "--workdir", workdir, "--log-level", "warn"}, extra...)
	cmd := exec.Command(a.sup, append(args, "--", "sh", "-c", "set -e\n"+script)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Join(a.f.dir, "home"), "TMPDIR=" + a.f.dir}
	return cmd
}

// plant runs script as the agent in a sandbox, then gives the workspace
// back to root.
func (a *attack) plant(t *testing.T, script string) {
	t.Helper()
	a.plantIn(t, a.f.ws, script)
}

// plantIn runs script as the agent in a sandbox whose working directory
// is the task workspace dir, then preserves dir (gives it to root).
func (a *attack) plantIn(t *testing.T, dir, script string) {
	t.Helper()
	a.giveDir(t, dir, true)
	out, err := a.sandboxCmdIn(dir, script).CombinedOutput()
	if err != nil {
		t.Fatalf("planting in the sandbox: %v\n%s", err, out)
	}
	a.giveDir(t, dir, false)
}

type toolRun struct {
	stdout, stderr string
	code           int
	took           time.Duration
	timedOut       bool
}

// run runs the built finalizer-recover as root with args. After limit it
// gets SIGTERM, 5 s later SIGKILL.
func (a *attack) run(t *testing.T, limit time.Duration, args ...string) toolRun {
	t.Helper()
	return a.runEnv(t, limit, a.f.env, args...)
}

// runEnv is run with the environment env.
func (a *attack) runEnv(t *testing.T, limit time.Duration, env []string, args ...string) toolRun {
	t.Helper()
	cmd := exec.Command(a.tool, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	r := toolRun{}
	var err error
	select {
	case err = <-done:
	case <-time.After(limit):
		r.timedOut = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			err = <-done
		}
	}
	r.took = time.Since(start)
	r.stdout, r.stderr = out.String(), errb.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	t.Logf("finalizer-recover %s: exit %d after %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

// recoverArgs is the documented recovery of the fixture, sandboxed gates.
func (a *attack) recoverArgs(extra ...string) []string {
	return append([]string{a.f.ws, "--evidence-id", a.f.ev.EvidenceID, "--remote", a.f.remote, "--approve-new-file", "docs/added.md",
		"--approve-new-file", "src/new.go", "--execute", "--gate-sandbox", a.sup}, extra...)
}

// refusedNaming asserts a refusal (exit 1, in bounded time) whose message
// names want, and that no secret reached the output.
func (a *attack) refusedNaming(t *testing.T, r toolRun, want string) {
	t.Helper()
	if r.timedOut {
		t.Errorf("finalizer-recover did not finish within its limit (%s)", r.took)
	}
	if r.code != 1 {
		t.Errorf("exit %d, want 1 (refused)", r.code)
	}
	if !strings.Contains(r.stdout+r.stderr, want) {
		t.Errorf("the refusal does not name %q", want)
	}
	if strings.Contains(r.stdout+r.stderr, a.secret) {
		t.Errorf("root-only content reached the output")
	}
	if _, err := os.Lstat(filepath.Join(a.f.ws, RecordFile)); err == nil {
		t.Errorf("a refused recovery wrote a record")
	}
}

func (a *attack) repoPath(rel string) string { return quotePath(filepath.Join(a.f.repo, rel)) }

// TestAttack1CaseFoldedRemoteRunsHook: [remote "ORIGIN"] with the
// canonical URL and a planted bare repository ./origin with hooks. Git
// compares remote names exactly, so "origin" would be the local path and
// its hooks would run as root on the push. (The agent also makes its
// contract script pass, so that nothing stops the recovery before the
// push.)
func TestAttack1CaseFoldedRemoteRunsHook(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `cd repo
sed -i 's/\[remote "origin"\]/[remote "ORIGIN"]/' .git/config
git init -q --bare origin
for h in pre-receive update post-receive post-update reference-transaction push-to-checkout; do
  printf '#!/bin/sh\ncat >/dev/null\necho "$0" >> MARKER\nexit 0\n' > origin/hooks/$h
  chmod +x origin/hooks/$h
done
git push -q ./origin BASE:refs/heads/main
echo origin >> .git/info/exclude
printf '#!/bin/sh\nexit 0\n' > scripts/contract.sh
`)
	for _, args := range [][]string{{"inspect", a.f.ws}, a.recoverArgs()} {
		r := a.run(t, 2*time.Minute, args...)
		a.refusedNaming(t, r, "remote.ORIGIN.url")
		if !strings.Contains(r.stdout+r.stderr, a.repoPath(".git/config")) {
			t.Errorf("the refusal does not name the config file")
		}
		if strings.Contains(r.stdout, "recoverable:              true") || strings.Contains(r.stdout, `"recoverable": true`) {
			t.Errorf("the plan says recoverable")
		}
	}
	a.checkOutside(t, false)
}

// TestAttack2WorktreeSymlinkDeletes: .git/worktrees/x is a symlink to a
// root-owned directory; git worktree prune would empty it.
func TestAttack2WorktreeSymlinkDeletes(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `mkdir -p repo/.git/worktrees && ln -s OUTSIDE/victim repo/.git/worktrees/x`)
	r := a.run(t, 2*time.Minute, a.recoverArgs()...)
	a.refusedNaming(t, r, a.repoPath(".git/worktrees"))
	a.checkOutside(t, false)
}

// TestAttack3FetchHeadSymlinkOverwrites: .git/FETCH_HEAD is a symlink to
// a root-only file; a fetch in the agent's repository would rewrite it.
func TestAttack3FetchHeadSymlinkOverwrites(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `ln -s OUTSIDE/secret.txt repo/.git/FETCH_HEAD`)
	r := a.run(t, 2*time.Minute, a.recoverArgs()...)
	a.refusedNaming(t, r, a.repoPath(".git/FETCH_HEAD")+": a symbolic link")
	a.checkOutside(t, false)
}

// TestAttack4ReflogSymlinkAppends: a reflog under .git/logs is a symlink;
// fetch and push would append to its target.
func TestAttack4ReflogSymlinkAppends(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `rm -f repo/.git/logs/refs/remotes/origin/main
mkdir -p repo/.git/logs/refs/remotes/origin
ln -s OUTSIDE/secret.txt repo/.git/logs/refs/remotes/origin/main`)
	r := a.run(t, 2*time.Minute, a.recoverArgs()...)
	a.refusedNaming(t, r, a.repoPath(".git/logs/refs/remotes/origin/main")+": a symbolic link")
	a.checkOutside(t, false)
}

// TestAttack5ObjectDirSymlinksCreate: every missing .git/objects/XX is a
// symlink to a root-owned directory; new loose objects would land there.
func TestAttack5ObjectDirSymlinksCreate(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `cd repo/.git/objects
for a in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do for b in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do
  [ -e $a$b ] || ln -s OUTSIDE/objdir $a$b
done; done`)
	r := a.run(t, 2*time.Minute, a.recoverArgs()...)
	a.refusedNaming(t, r, quotePath(filepath.Join(a.f.repo, ".git", "objects"))+"/")
	if !strings.Contains(r.stdout+r.stderr, ": a symbolic link") {
		t.Errorf("the refusal does not say why")
	}
	a.checkOutside(t, false)
}

// TestAttack6PackedRefsSymlinkLeaks: .git/packed-refs is a symlink to a
// root-only file; git's parse error would print its first line.
func TestAttack6PackedRefsSymlinkLeaks(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `rm -f repo/.git/packed-refs && ln -s OUTSIDE/shadow repo/.git/packed-refs`)
	for _, args := range [][]string{{"inspect", a.f.ws}, {"inspect", a.f.ws, "--json"}, a.recoverArgs(), a.recoverArgs("--json")} {
		r := a.run(t, 2*time.Minute, args...)
		a.refusedNaming(t, r, a.repoPath(".git/packed-refs")+": a symbolic link")
	}
	a.checkOutside(t, false)
}

// TestAttack7Hangs: a FIFO as .git/HEAD, as the evidence or as the
// progress file, and the evidence as /dev/zero or a huge sparse file:
// the tool refuses at once instead of blocking or exhausting memory
// (before the fix SIGTERM could not stop it either).
func TestAttack7Hangs(t *testing.T) {
	cases := []struct {
		name, script, want string
		args               func(a *attack) []string
	}{
		{"HEAD FIFO", `rm repo/.git/HEAD && mkfifo repo/.git/HEAD`, "repo/.git/HEAD: a FIFO", nil},
		{"evidence FIFO", `rm ` + EvidenceFile + ` && mkfifo ` + EvidenceFile, EvidenceFile + ": a FIFO", nil},
		{"progress FIFO", `rm ` + ProgressFile + ` && mkfifo ` + ProgressFile, ProgressFile + ": a FIFO", nil},
		{"evidence /dev/zero", `rm ` + EvidenceFile + ` && ln -s /dev/zero ` + EvidenceFile, EvidenceFile + ": a symbolic link", nil},
		{"evidence sparse", `truncate -s 64G ` + EvidenceFile, EvidenceFile + ": 68719476736 bytes, more than the", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAttack(t)
			a.plant(t, c.script)
			for _, args := range [][]string{{"inspect", a.f.ws}, a.recoverArgs()} {
				r := a.run(t, 20*time.Second, args...)
				a.refusedNaming(t, r, c.want)
				if r.took > 20*time.Second {
					t.Errorf("took %s", r.took)
				}
			}
			a.checkOutside(t, false)
		})
	}
}

// TestAttack8ProgressSwappedDuringRecovery: a live agent process swaps
// finalizer-progress.json for a symlink to a root-only JSON file while
// the recovery runs, after the tool read it and before it rewrites it;
// the tool must not copy that file's fields (a token) into the
// workspace, nor read that file at all. To make the race deterministic
// the test tells the agent when: once the gate clone exists (the tool has
// read the progress file long before), during a gate that takes 3 s.
func TestAttack8ProgressSwappedDuringRecovery(t *testing.T) {
	a := newAttack(t)
	a.f.ev.VerificationCommands = [][]string{{"sh", "-c", "sleep 3; test -f src/new.go && test -f docs/added.md"}}
	a.f.saveEvidence()
	a.plant(t, `true`)
	// The agent is still alive and owns the workspace directory; the
	// repository itself is root's.
	if err := os.Lchown(a.f.ws, a.uid, a.gid); err != nil {
		t.Fatal(err)
	}
	agent := a.sandboxCmd(`exec perl -e '
$| = 1;
symlink("OUTSIDE/token.json", ".lnk") or die "symlink: $!";
open(my $w, ">", ".watching") or die; close $w;
my $deadline = time + 150;
while (time < $deadline && ! -e ".swap-now") { select(undef, undef, undef, 0.001); }
rename(".lnk", "` + ProgressFile + `") or die "rename: $!";
print "agent: swapped\n";
while (time < $deadline) {
  if (! -l "` + ProgressFile + `" && open(my $f, "<", "` + ProgressFile + `")) {
    local $/; my $c = <$f>; close $f;
    if ($c =~ /recovered/) { open(my $o, ">", "loot.txt") or die; print $o $c; close $o; print "agent: read it back\n"; exit 0; }
  }
  select(undef, undef, undef, 0.001);
}
print "agent: gave up\n";
'`)
	var agentOut bytes.Buffer
	agent.Stdout, agent.Stderr = &agentOut, &agentOut
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	agent.WaitDelay = 5 * time.Second
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Wait() }()
	stopAgent := func(grace time.Duration) {
		select {
		case <-agentDone:
			return
		case <-time.After(grace):
		}
		agent.Process.Signal(syscall.SIGTERM)
		select {
		case <-agentDone:
		case <-time.After(10 * time.Second):
			agent.Process.Kill()
			<-agentDone
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Lstat(filepath.Join(a.f.ws, ".watching")); err == nil {
			break // the agent is watching
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not start: %s", agentOut.String())
		}
	}

	// Tell the agent to swap once the tool is running its gates.
	trigger := make(chan struct{})
	go func() {
		defer close(trigger)
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if m, _ := filepath.Glob(filepath.Join(a.f.dir, "finalizer-recover-gate-*")); len(m) > 0 {
				os.WriteFile(filepath.Join(a.f.ws, ".swap-now"), nil, 0o644)
				return
			}
		}
	}()
	r := a.run(t, 3*time.Minute, a.recoverArgs()...)
	<-trigger
	stopAgent(20 * time.Second)
	t.Logf("agent: %s", agentOut.String())
	if !strings.Contains(agentOut.String(), "agent: swapped\nagent: read it back") {
		t.Errorf("the agent never swapped the progress file during the recovery (exit %d); the test proves nothing", r.code)
	}
	token := "TOKEN-" + a.secret
	for _, name := range []string{ProgressFile, RecordFile, "loot.txt"} {
		// Never through a symlink: the test must not read the sentinel either.
		fd, err := syscall.Open(filepath.Join(a.f.ws, name), syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		data := make([]byte, 1<<16)
		n, _ := syscall.Read(fd, data)
		syscall.Close(fd)
		if n > 0 && strings.Contains(string(data[:n]), token) {
			t.Errorf("the root-only token was copied into the workspace's %s", name)
		}
	}
	if st, err := os.Lstat(filepath.Join(a.f.ws, ProgressFile)); err != nil || !st.Mode().IsRegular() {
		t.Errorf("progress file after the recovery: %v, %v", st, err)
	}
	// A clean recovery still pushes; the swap only targets its last step.
	a.checkOutside(t, true)
}

// TestAttack9CommondirRedirects: .git/commondir (and, separately,
// objects/info/alternates) pointing at another repository. The refusal
// must come before git looks at that repository: neither its HEAD nor its
// file names may appear in the plan.
func TestAttack9CommondirRedirects(t *testing.T) {
	for _, c := range []struct{ name, script, want string }{
		{"commondir", `printf '%s\n' OUTSIDE/other/.git > repo/.git/commondir`, ".git/commondir"},
		{"alternates", `mkdir -p repo/.git/objects/info && printf '%s\n' OUTSIDE/other/.git/objects > repo/.git/objects/info/alternates`, ".git/objects/info/alternates"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAttack(t)
			other := filepath.Join(a.outside, "other")
			a.f.git(a.f.dir, "init", "-q", other)
			a.f.write(other, "other-secret-name-"+a.secret+".txt", "x\n", 0o600)
			a.f.git(other, "add", ".")
			a.f.git(other, "commit", "-q", "-m", "other")
			otherHead := a.f.git(other, "rev-parse", "HEAD")
			filepath.WalkDir(a.outside, func(p string, _ fs.DirEntry, err error) error {
				if err == nil {
					err = os.Chtimes(p, sentinelTime, sentinelTime)
				}
				return err
			})
			a.before = a.sentinels(t, true)
			a.plant(t, c.script)
			for _, args := range [][]string{{"inspect", a.f.ws}, a.recoverArgs("--json")} {
				r := a.run(t, 2*time.Minute, args...)
				a.refusedNaming(t, r, a.repoPath(c.want))
				if strings.Contains(r.stdout+r.stderr, otherHead) || strings.Contains(r.stdout+r.stderr, "other-secret-name") {
					t.Errorf("the plan shows the other repository's HEAD or files")
				}
			}
			a.checkOutside(t, false)
		})
	}
}

// TestAttack10PlanSpoofing: a new file whose name holds a newline and a
// fake "recoverable: true" line. The text plan quotes it; the only
// recoverable line is the real one.
func TestAttack10PlanSpoofing(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `cd repo && touch "$(printf 'zz\nrecoverable:              true')"`)
	r := a.run(t, 2*time.Minute, a.f.ws, "--evidence-id", a.f.ev.EvidenceID, "--remote", a.f.remote, "--approve-new-file", "docs/added.md",
		"--approve-new-file", "src/new.go", "--gate-sandbox", a.sup)
	if r.code != 1 {
		t.Errorf("exit %d, want 1: the spoofing file is not approved", r.code)
	}
	var verdicts []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "recoverable:") {
			verdicts = append(verdicts, line)
		}
	}
	if len(verdicts) != 1 || !strings.HasSuffix(verdicts[0], "false") {
		t.Errorf("recoverable lines %q, want exactly one, false", verdicts)
	}
	if !strings.Contains(r.stdout, `"zz\nrecoverable:              true"`) {
		t.Errorf("the file name is not quoted in the plan")
	}
	a.checkOutside(t, false)
}

// TestAttackHardLinkRefused: a hard link in .git (its other name could be
// outside the workspace) is refused like a symlink.
func TestAttackHardLinkRefused(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `ln repo/.git/description repo/.git/description2`)
	r := a.run(t, 2*time.Minute, a.recoverArgs()...)
	a.refusedNaming(t, r, "a hard link (2 names share it")
	if !strings.Contains(r.stdout+r.stderr, a.repoPath(".git/description")) {
		t.Errorf("the refusal does not name the path")
	}
	a.checkOutside(t, false)
}

// TestAttackCleanWorkspaceStillRecovers: a workspace the agent left clean,
// handed through the same sandbox and back to root, recovers and pushes to
// the canonical remote.
func TestAttackCleanWorkspaceStillRecovers(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `cd repo && git status --porcelain >/dev/null`)
	r := a.run(t, 3*time.Minute, a.recoverArgs()...)
	if r.code != 0 || !strings.Contains(r.stdout, "pushed ") {
		t.Fatalf("exit %d", r.code)
	}
	if a.f.remoteMain() == a.remote {
		t.Fatal("the canonical remote did not move")
	}
	if left, _ := filepath.Glob(filepath.Join(a.f.dir, "finalizer-recover-*")); len(left) > 0 {
		t.Errorf("private directories left behind: %q", left)
	}
	a.checkOutside(t, true)
}

// TestSignalsStopTheTool: SIGTERM or SIGINT stops finalizer-recover while
// a gate runs: the gate's process group is killed, the failure recorded,
// and the tool exits promptly; nothing is pushed.
func TestSignalsStopTheTool(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			f := newFixture(t, fixtureOpts{})
			started := filepath.Join(f.dir, "gate-started")
			survived := filepath.Join(f.dir, "gate-survived")
			f.ev.ContractCommand = []string{"sh", "-c", "touch " + started + "; sleep 30; touch " + survived}
			f.ev.TestEvidence = []TestEvidence{{Argv: f.ev.ContractCommand, ExitCode: exitCodeP(0)}}
			f.saveEvidence()
			before := f.remoteMain()
			cmd := exec.Command(testutil.Binary(t, "finalizer-recover"), f.ws, "--evidence-id", f.ev.EvidenceID, "--remote", f.remote,
				"--approve-new-file", "docs/added.md", "--approve-new-file", "src/new.go", "--execute", "--unsandboxed-gates")
			cmd.Env = f.env
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			deadline := time.Now().Add(60 * time.Second)
			for {
				if _, err := os.Lstat(started); err == nil {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					<-done
					t.Fatalf("the gate never started:\n%s", out.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			sent := time.Now()
			cmd.Process.Signal(sig)
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("exit 0 after %s", sig)
				}
				if took := time.Since(sent); took > 10*time.Second {
					t.Errorf("took %s to stop", took)
				}
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("%s did not stop finalizer-recover:\n%s", sig, out.String())
			}
			time.Sleep(200 * time.Millisecond)
			if _, err := os.Lstat(survived); err == nil {
				t.Errorf("the gate outlived the tool")
			}
			if f.remoteMain() != before {
				t.Errorf("the remote moved")
			}
			if left, _ := filepath.Glob(filepath.Join(f.dir, "finalizer-recover-*")); len(left) > 0 {
				t.Errorf("private directories left behind: %q", left)
			}
			t.Logf("%s", out.String())
		})
	}
}

// TestAttackIndexPathOutside: the agent rewrites its .git/index so that
// an entry is named ../../outside/secret.txt. Git trusts index paths on
// read: status would hash that root-only file and add would commit it.
// The index is refused before git looks at the working tree.
func TestAttackIndexPathOutside(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `cd repo
name=aaaaaaaaaaaaaaaaaaaaaaaa
touch $name && git add $name && rm $name
perl -MDigest::SHA=sha1 -e '
  open(my $f, "<:raw", ".git/index") or die; local $/; my $d = <$f>; close $f;
  my $i = index($d, "aaaaaaaaaaaaaaaaaaaaaaaa"); die "no entry" if $i < 0;
  substr($d, $i, 24) = "../../outside/secret.txt";
  $d = substr($d, 0, -20); $d .= sha1($d);
  open(my $o, ">:raw", ".git/index") or die; print $o $d; close $o;'
git ls-files | grep -qx ../../outside/secret.txt
`)
	for _, args := range [][]string{{"inspect", a.f.ws}, a.recoverArgs()} {
		r := a.run(t, 2*time.Minute, args...)
		a.refusedNaming(t, r, "lists paths outside the working tree or inside a .git (git would read them as root): ../../outside/secret.txt")
	}
	a.checkOutside(t, false)
}

// TestAttackWritableDirLetsLiveAgentSwap: the agent leaves a directory of
// its repository writable by others (chmod 0777), or still its own, so
// that after the workspace is handed to root a live agent process can
// still rename entries in it. While git status or add reads the working
// tree as root, the agent exchanges a modified tracked file with a
// symlink to a root-only file (renameat2 RENAME_EXCHANGE in a loop);
// whenever git's lstat sees the regular file and its open the symlink,
// git hashes the root-only file and add commits it (reproduced with plain
// git: 3 of 10 runs of add --update leaked the first bytes of /etc/shadow
// into blobs). A directory root reads that anyone else can change is
// refused before git runs, naming it.
func TestAttackWritableDirLetsLiveAgentSwap(t *testing.T) {
	for _, c := range []struct {
		name, script, dir string
		uid, gid          bool // the preservation left the agent's uid or gid on dir
	}{
		{name: "world-writable", script: `chmod 0777 repo/src`, dir: "src"},
		{name: "world-writable .git subdir", script: `chmod 0777 repo/.git/refs`, dir: ".git/refs"},
		{name: "group-writable, agent group", script: `chmod 0775 repo/docs`, dir: "docs", gid: true},
		{name: "agent-owned", script: `true`, dir: "src", uid: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAttack(t)
			a.plant(t, c.script)
			// Preserved without a recursive chown: the agent's uid or gid is
			// still on a directory below the root-owned repository.
			uid, gid := -1, -1
			if c.uid {
				uid = a.uid
			}
			if c.gid {
				gid = a.gid
			}
			if err := os.Lchown(filepath.Join(a.f.repo, c.dir), uid, gid); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"inspect", a.f.ws}, a.recoverArgs()} {
				r := a.run(t, 2*time.Minute, args...)
				a.refusedNaming(t, r, a.repoPath(c.dir)+": a directory ")
				if !strings.Contains(r.stdout+r.stderr, "could change it while root reads it") {
					t.Errorf("the refusal does not say why")
				}
			}
			a.checkOutside(t, false)
		})
	}
}

// TestAttackBranchNameSpoofsPlan: the agent rewrites canonical_branch in
// its evidence with a terminal escape (ESC c resets the terminal,
// clearing the plan printed so far), a carriage return or a bidi
// override. The evidence is refused, naming the field, and no raw
// control or format character reaches the operator's terminal.
func TestAttackBranchNameSpoofsPlan(t *testing.T) {
	for _, c := range []struct{ name, branch string }{
		{"ESC", `main\\u001bc`},
		{"CR", `main\\r`},
		{"bidi", `niam\\u202e`},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAttack(t)
			a.plant(t, `perl -0pi -e 's/"canonical_branch": "main"/"canonical_branch": "`+c.branch+`"/ or die "no branch"' `+EvidenceFile)
			if data, _ := os.ReadFile(filepath.Join(a.f.ws, EvidenceFile)); !strings.Contains(string(data), `"canonical_branch": "`+strings.ReplaceAll(c.branch, `\\`, `\`)+`"`) {
				t.Fatalf("the agent's edit did not land: %s", data)
			}
			for _, args := range [][]string{{"inspect", a.f.ws}, a.recoverArgs()} {
				r := a.run(t, 2*time.Minute, args...)
				if r.code == 0 {
					t.Errorf("exit 0: the spoofed evidence was accepted")
				}
				out := r.stdout + r.stderr
				if !strings.Contains(out, "canonical_branch") {
					t.Errorf("the refusal does not name canonical_branch")
				}
				if strings.ContainsAny(out, "\x1b\r\u202e") {
					t.Errorf("a raw control or bidi character reached the output: %q", out)
				}
			}
			a.checkOutside(t, false)
		})
	}
}

// TestAttackRepositorySwappedBeforeAdd: the agent, still running and
// owning the workspace directory, lets inspection check its repository
// and then renames it away, putting a symlink to a root-only directory
// in its place before the commit step (here deterministically, between
// inspect and execute). The repository lists keep.txt as modified, a
// name that also exists in that directory. git add reached the working
// tree by name, so it read (and hashed into the mirror) the root-only
// keep.txt; the commit step must read only through the descriptors
// inspection checked, and then refuse because the repository changed.
func TestAttackRepositorySwappedBeforeAdd(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `cd repo
echo agent > keep.txt
git -c user.name=agent -c user.email=agent@example.invalid add keep.txt
git -c user.name=agent -c user.email=agent@example.invalid commit -qm keep -- keep.txt
echo changed > keep.txt
head=$(git rev-parse HEAD)
perl -pi -e "s/\"preserved_head_sha\": \"[0-9a-f]+\"/\"preserved_head_sha\": \"$head\"/" ../`+EvidenceFile)
	if err := os.Lchown(a.f.ws, a.uid, a.gid); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", a.f.dir)
	opts := a.f.opts()
	opts.Recovery, opts.Execute = true, true
	ctx := context.Background()
	w := &wsHandles{}
	defer w.close()
	plan, m, err := inspect(ctx, a.f.ws, opts, w)
	defer m.remove()
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Recoverable || !strings.Contains(strings.Join(plan.ModifiedFiles, " "), "keep.txt") {
		t.Fatalf("the plan does not list keep.txt or is refused: %q %q", plan.ModifiedFiles, plan.Refusals)
	}
	// The agent swaps its repository for a symlink to the root directory.
	out, err := a.sandboxCmd(`mv repo repo.real && ln -s OUTSIDE/victim repo`).CombinedOutput()
	if err != nil {
		t.Fatalf("swapping in the sandbox: %v\n%s", err, out)
	}
	rec := &Record{}
	step, err := execute(ctx, plan, opts, rec, io.Discard, m, w)
	t.Logf("execute: step %q, %v", step, err)
	if err == nil || step != StepCommit || !strings.Contains(err.Error(), "changed while it was being committed") {
		t.Errorf("execute: step %q, %v; want a refusal at the commit step because the repository changed", step, err)
	}
	if objs, err := exec.Command("git", "--git-dir", m.gitDir, "cat-file", "--batch-all-objects", "--batch").Output(); err == nil && strings.Contains(string(objs), a.secret) {
		t.Errorf("root-only content was hashed into the mirror")
	}
	a.checkOutside(t, false)
}

// TestAttackForgedPackIndexFoolsGates: git trusts a pack's .idx for which
// object lives where and does not rehash what it reads. The agent packs a
// tree of its own (scripts/ whose contract.sh just exits 0) next to the
// real scripts/ tree of the base, and swaps their offsets in the .idx. In
// the mirror the base's scripts/ tree now has the agent's content; the
// remote already has that tree id, so its real content is what the push
// publishes. The agent's pending change breaks the real contract
// (feature.txt loses "agent"), the gates pass on the forged tree, and the
// push published a tree the contract gate never passed. Objects whose
// content does not match their id are refused before anything uses them.
func TestAttackForgedPackIndexFoolsGates(t *testing.T) {
	a := newAttack(t)
	a.plant(t, `cd repo
printf 'base\n' > feature.txt
blob=$(printf '#!/bin/sh\nexit 0\n' | git hash-object -w --stdin)
fake=$(printf '100755 blob %s\tcontract.sh\n' $blob | git mktree)
real=$(git rev-parse HEAD:scripts)
git update-ref refs/fake $fake
git repack -q -a -d
git update-ref -d refs/fake
idx=$(ls .git/objects/pack/*.idx)
test $(ls .git/objects/pack/*.idx | wc -l) = 1
perl -MDigest::SHA=sha1 -e '
  my ($idx, $x, $y) = @ARGV;
  open(my $f, "<:raw", $idx) or die; local $/; my $d = <$f>; close $f;
  my $n = unpack("N", substr($d, 8 + 255*4, 4));
  my %pos;
  for my $i (0 .. $n-1) { $pos{unpack("H*", substr($d, 8 + 1024 + 20*$i, 20))} = $i; }
  defined $pos{$x} && defined $pos{$y} or die "objects not in the pack";
  my $off = 8 + 1024 + 24*$n;
  my ($ox, $oy) = (substr($d, $off + 4*$pos{$x}, 4), substr($d, $off + 4*$pos{$y}, 4));
  substr($d, $off + 4*$pos{$x}, 4) = $oy; substr($d, $off + 4*$pos{$y}, 4) = $ox;
  $d = substr($d, 0, -20); $d .= sha1($d);
  chmod(0644, $idx); open(my $o, ">:raw", $idx) or die; print $o $d; close $o;' $idx $real $fake
git cat-file -p HEAD:scripts/contract.sh | grep -qx 'exit 0'
`)
	r := a.run(t, 3*time.Minute, a.recoverArgs()...)
	a.refusedNaming(t, r, "do not match their object ids")
	if !strings.Contains(r.stdout+r.stderr, a.repoPath(".git/objects")) {
		t.Errorf("the refusal does not name the objects directory")
	}
	if a.f.remoteMain() != a.remote {
		if feature := a.f.git(a.f.dir, "--git-dir", a.f.remote, "show", "main:feature.txt"); !strings.Contains(feature, "agent") {
			t.Errorf("the remote got a commit whose real tree fails the contract gate (feature.txt %q)", feature)
		}
	}
	a.checkOutside(t, false)
}

// TestSnapshotPathNeverFollows: the commit snapshot copies a regular file
// with its executable bit and a symlink as a link, records nothing for a
// directory, a path below a symlink or a missing one, refuses a FIFO,
// and never creates anything through a symlink it recorded earlier.
func TestSnapshotPathNeverFollows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo, snap, outside := filepath.Join(dir, "repo"), filepath.Join(dir, "snap"), filepath.Join(dir, "outside")
	for _, d := range []string{repo, snap, outside, filepath.Join(repo, "d"), filepath.Join(repo, "real")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(repo, "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(repo, "real", "x"), []byte("x\n"), 0o644)
	os.WriteFile(filepath.Join(outside, "x"), []byte("outside\n"), 0o644)
	os.Symlink(outside, filepath.Join(repo, "lnk"))
	syscall.Mkfifo(filepath.Join(repo, "fifo"), 0o644)
	rd, err := openWorkspaceDir(repo)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.close()
	ctx := context.Background()
	for _, c := range []struct {
		rel     string
		want    string // "file", "exec", "link", "" (nothing)
		refused bool
	}{
		{"run.sh", "exec", false}, {"real/x", "file", false}, {"lnk", "link", false},
		{"lnk/x", "", false}, {"d", "", false}, {"gone", "", false}, {"gone/x", "", false},
		{"fifo", "", true},
	} {
		_, err := rd.snapshotPath(ctx, c.rel, snap, 1<<20)
		if (err != nil) != c.refused {
			t.Errorf("%s: error %v, refused want %v", c.rel, err, c.refused)
		}
		st, lerr := os.Lstat(filepath.Join(snap, c.rel))
		if pst, err := os.Lstat(filepath.Dir(filepath.Join(snap, c.rel))); err == nil && pst.Mode()&os.ModeSymlink != 0 {
			lerr = os.ErrNotExist // below a recorded symlink: not in the snapshot
		}
		got := ""
		switch {
		case lerr != nil:
		case st.Mode()&os.ModeSymlink != 0:
			got = "link"
		case st.Mode().IsRegular() && st.Mode()&0o100 != 0:
			got = "exec"
		case st.Mode().IsRegular():
			got = "file"
		default:
			got = st.Mode().String()
		}
		if got != c.want {
			t.Errorf("%s: snapshot holds %q, want %q", c.rel, got, c.want)
		}
	}
	// The snapshot recorded lnk as a symlink: no later path may create
	// anything through it.
	if err := mkdirNoFollow(snap, "lnk/sub"); err == nil {
		t.Errorf("mkdirNoFollow went through a symlink")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("something was created outside: %v", entries)
	}
}

// TestStatusReadsTheCheckedDirectory: after the repository was opened and
// checked, the agent (owning the workspace) renames it away and puts a
// directory of its own at its name. git status must read the directory
// that was checked, not whatever the name now holds.
func TestStatusReadsTheCheckedDirectory(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	wsd, err := openWorkspaceDir(f.ws)
	if err != nil {
		t.Fatal(err)
	}
	w := &wsHandles{ws: wsd, repoRel: f.ev.Repository}
	defer w.close()
	p := &Plan{ev: &f.ev, Repository: f.repo, Remote: f.ev.Remote, RemoteURL: f.ev.RemoteURL}
	m, stop, err := openRepository(context.Background(), p, w, Options{Env: f.env})
	defer m.remove()
	if err != nil || stop {
		t.Fatalf("openRepository: stop %v, %v, refusals %q", stop, err, p.Refusals)
	}
	if err := os.Rename(f.repo, f.repo+".real"); err != nil {
		t.Fatal(err)
	}
	f.write(f.repo, "fake-only.txt", "planted\n", 0o644)
	entries, err := m.work(w.repo, m.index).status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, string([]byte{e.x, e.y})+" "+e.path)
	}
	all := strings.Join(got, "\n")
	if strings.Contains(all, "fake-only.txt") || !strings.Contains(all, "?? src/new.go") || !strings.Contains(all, " M README.md") {
		t.Errorf("git status read the directory now at the name, not the checked one:\n%s", all)
	}
}
