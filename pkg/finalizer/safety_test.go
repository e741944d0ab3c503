package finalizer

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAllowedConfigExactNames: section and key names fold, the
// subsection (the remote's name) does not, as in git.
func TestAllowedConfigExactNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"remote.origin.url", true},
		{"REMOTE.origin.URL", true},
		{"remote.ORIGIN.url", false},
		{"remote.Origin.pushurl", false},
		{"remote.origin.receivepack", false},
		{"remote.origin.uploadpack", false},
		{"remote.other.url", false},
		{"core.hooksPath", false},
		{"core.sshCommand", false},
		{"core.FileMode", true},
		{"core.x.filemode", false},
		{"url.https://x/.insteadOf", false},
		{"branch.Main.merge", true},
		{"branch.merge", false},
		{"include.path", false},
		{"includeIf.gitdir:/x.path", false},
		{"extensions.objectFormat", true},
		{"extensions.worktreeConfig", false},
	} {
		e := splitConfigName(c.name, "v")
		if got := allowedConfig(e, "origin"); got != c.ok {
			t.Errorf("allowedConfig(%q) = %v, want %v (parsed %+v)", c.name, got, c.ok, e)
		}
	}
	if e := splitConfigName("remote.a.b.c.url", ""); e.section != "remote" || e.subsection != "a.b.c" || e.key != "url" {
		t.Errorf("dotted subsection parsed as %+v", e)
	}
}

// TestCheckRemoteURL: the evidence URL is what git talks to; a local
// remote must be a bare repository outside every workspace that nobody
// but this user can change, helpers are refused, and no user, host or
// path may start with '-'.
func TestCheckRemoteURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	bare := func(p string) string {
		t.Helper()
		if out, err := exec.Command("git", "init", "-q", "--bare", p).CombinedOutput(); err != nil {
			t.Fatalf("git init %s: %v\n%s", p, err, out)
		}
		return p
	}
	remote := bare(filepath.Join(dir, "remote.git"))
	inWS := bare(filepath.Join(ws, "repo", "origin"))
	other := filepath.Join(dir, "task1")
	evil := bare(filepath.Join(other, "evil.git"))
	os.WriteFile(filepath.Join(other, EvidenceFile), []byte("{}"), 0o644)
	wt := bare(filepath.Join(dir, "wt.git"))
	os.MkdirAll(filepath.Join(wt, "worktrees", "x"), 0o755)
	alt := bare(filepath.Join(dir, "alt.git"))
	os.WriteFile(filepath.Join(alt, "objects", "info", "alternates"), []byte(remote+"/objects\n"), 0o644)
	cd := bare(filepath.Join(dir, "cd.git"))
	os.WriteFile(filepath.Join(cd, "commondir"), []byte(remote+"\n"), 0o644)
	loose := bare(filepath.Join(dir, "loose.git"))
	os.Chmod(filepath.Join(loose, "refs", "heads"), 0o777)
	lnk := bare(filepath.Join(dir, "lnk.git"))
	os.Symlink("/etc/cron.d", filepath.Join(lnk, "refs", "heads", "main"))
	plain := filepath.Join(dir, "plain")
	os.Mkdir(plain, 0o755)
	if err := os.Symlink(inWS, filepath.Join(dir, "sneaky")); err != nil {
		t.Fatal(err)
	}
	// A link root did not make: its owner could re-point it.
	foreign := filepath.Join(dir, "foreign")
	os.Symlink(remote, foreign)
	foreignOK := os.Geteuid() == 0 && os.Lchown(foreign, 10001, 10001) == nil
	for _, c := range []struct {
		url, err string
		local    bool
	}{
		{"https://git.example.invalid/org/repo.git", "", false},
		{"ssh://git@git.example.invalid/org/repo.git", "", false},
		{"ssh://git.example.invalid:2222/org/repo.git", "", false},
		{"git@git.example.invalid:org/repo.git", "", false},
		{remote, "", true},
		{"file://" + remote, "", true},
		{"ext::sh -c touch% /tmp/pwned", "remote helpers", false},
		{"gopher://x/y", "transport", false},
		{"ext::sh", "remote helpers", false},
		{"fd::3", "remote helpers", false},
		{"origin", "clean absolute path", false},
		{"./origin", "clean absolute path", false},
		{inWS, "outside the workspace", false},
		{filepath.Join(dir, "sneaky"), "outside the workspace", false},
		{"-uupload-pack=touch /tmp/x", "starts with '-'", false},
		{"ssh://-oProxyCommand=touch% /tmp/pwned/x", "host starts with '-'", false},
		{"ssh://-oProxyCommand=x@host/repo", "user starts with '-'", false},
		{"ssh://[-oProxyCommand=x]/repo", "host starts with '-'", false},
		{"git+ssh://host/-path", "path starts with '-'", false},
		{"-oProxyCommand=x:repo", "starts with '-'", false},
		{"git@-oProxyCommand=x:repo", "host starts with '-'", false},
		{"host:-upload-pack=x", "path starts with '-'", false},
		{"https:///nohost", "no host", false},
		{filepath.Join(dir, "missing"), "not a local repository", false},
		{evil, "a task workspace (it holds " + EvidenceFile, false},
		{wt, "linked worktrees", false},
		{alt, "alternates borrow objects", false},
		{cd, "commondir points git at another repository", false},
		{loose, "writable by others", false},
		{lnk, "a symbolic link", false},
		{plain, "not a bare repository", false},
	} {
		rt, err := checkRemoteURL(context.Background(), c.url, ws)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.url, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want %q", c.url, err, c.err)
		case c.err == "" && rt.local != c.local:
			t.Errorf("%q: local %v", c.url, rt.local)
		}
	}
	if foreignOK {
		if _, err := checkRemoteURL(context.Background(), foreign, ws); err == nil || !strings.Contains(err.Error(), "symbolic link owned by uid 10001") {
			t.Errorf("a remote reached through another user's symlink: %v", err)
		}
	}
}

func TestQuotePath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"src/new.go":                "src/new.go",
		"with space.txt":            "with space.txt",
		"zz\nrecoverable: true":     `"zz\nrecoverable: true"`,
		"esc\x1b[2Jclear":           `"esc\x1b[2Jclear"`,
		`quote".txt`:                `"quote\".txt"`,
		"tab\tname":                 `"tab\tname"`,
		"bad\xffutf8":               `"bad\xffutf8"`,
		"":                          `""`,
		" leading":                  `" leading"`,
		"caf\u00e9/\u65e5\u672c.md": "caf\u00e9/\u65e5\u672c.md",
	} {
		if got := quotePath(in); got != want {
			t.Errorf("quotePath(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestLocalRemoteHooksNeverRun: a local canonical remote's own hooks and
// hooksPath do not run on the push or the fetch (git does not pass -c to a
// local receive-pack/upload-pack; recovery starts them with hooks off).
func TestLocalRemoteHooksNeverRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	marker := filepath.Join(f.dir, "remote-hook-ran")
	hooks := filepath.Join(f.dir, "remote-hooks")
	for _, dir := range []string{filepath.Join(f.remote, "hooks"), hooks} {
		for _, h := range []string{"pre-receive", "update", "post-receive", "post-update", "reference-transaction"} {
			f.write(dir, h, "#!/bin/sh\ncat >/dev/null\necho \"$0\" >> "+marker+"\n", 0o755)
		}
	}
	f.git(f.remote, "config", "core.hooksPath", hooks)
	o := f.opts()
	o.Execute = true
	_, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err != nil || rec.Status != RecordPushed || f.remoteMain() != rec.PushedCommit {
		t.Fatalf("Recover = %v, record %+v", err, rec)
	}
	if data, err := os.ReadFile(marker); err == nil {
		t.Fatalf("a hook of the local remote ran: %s", data)
	}
}

// TestSpecialFilesRefused plants each kind of special file the scans
// refuse (directly, without a sandbox: the attack tests plant them as the
// agent) and checks that inspection refuses naming the path before any
// git command could touch it.
func TestSpecialFilesRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path, want string
		plant            func(f *fixture, p string) error
	}{
		{"symlink in .git", ".git/ORIG_HEAD", "a symbolic link", func(f *fixture, p string) error { return os.Symlink("/etc/passwd", p) }},
		{"FIFO in .git", ".git/MERGE_MSG", "a FIFO", func(f *fixture, p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"socket in .git", ".git/sock", "a socket", func(f *fixture, p string) error {
			l, err := net.Listen("unix", p)
			if err == nil {
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				l.Close()
			}
			return err
		}},
		{"hard link in .git", ".git/description2", "a hard link (2 names", func(f *fixture, p string) error {
			return os.Link(filepath.Join(f.repo, ".git", "description"), p)
		}},
		{"commondir", ".git/commondir", "commondir points git at another repository", func(f *fixture, p string) error {
			return os.WriteFile(p, []byte(f.remote+"\n"), 0o644)
		}},
		{"http-alternates", ".git/objects/info/http-alternates", "alternates borrow objects", func(f *fixture, p string) error {
			return os.WriteFile(p, []byte("https://example.invalid/\n"), 0o644)
		}},
		{"worktrees", ".git/worktrees", "linked worktrees", func(f *fixture, p string) error { return os.MkdirAll(filepath.Join(p, "x"), 0o755) }},
		{"FIFO in the working tree", "build/fifo", "a FIFO", func(f *fixture, p string) error {
			os.MkdirAll(filepath.Dir(p), 0o755)
			return syscall.Mkfifo(p, 0o644)
		}},
		{"nested .git", "vendor/x/.git", "a nested repository or gitfile", func(f *fixture, p string) error {
			os.MkdirAll(filepath.Dir(p), 0o755)
			return os.WriteFile(p, []byte("gitdir: /root/.git\n"), 0o644)
		}},
		{"symlinked .gitignore", "src/.gitignore", "a symbolic link git would read", func(f *fixture, p string) error { return os.Symlink("/etc/shadow", p) }},
		{".git is a symlink", ".git", "a symbolic link, not a directory", func(f *fixture, p string) error {
			if err := os.Rename(p, p+".real"); err != nil {
				return err
			}
			return os.Symlink(".git.real", p)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, fixtureOpts{})
			p := filepath.Join(f.repo, c.path)
			if err := c.plant(f, p); err != nil {
				t.Fatal(err)
			}
			plan, err := Inspect(context.Background(), f.ws, Options{Env: f.env})
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(plan.Refusals, "\n")
			if plan.Recoverable || !strings.Contains(got, quotePath(p)) || !strings.Contains(got, c.want) {
				t.Fatalf("refusals %q, want %s: %s", plan.Refusals, quotePath(p), c.want)
			}
			if plan.Head != "" || len(plan.NewFiles)+len(plan.ModifiedFiles) > 0 {
				t.Errorf("git looked at the repository anyway: head %q, files %q %q", plan.Head, plan.NewFiles, plan.ModifiedFiles)
			}
		})
	}
}

// TestLocalPushNeverChecksOut: even a local remote that got past
// checkLocalRemote (here handed to execute directly) cannot make root's
// receive-pack check the pushed tree out: receive.denyCurrentBranch=
// updateInstead and a linked worktree naming a victim directory, with
// HEAD on an unborn branch so that receive-pack's own checks pass, would
// write the agent's files there; recovery starts receive-pack with
// denyCurrentBranch=refuse, so the push is refused and the victim keeps
// only what it had.
func TestLocalPushNeverChecksOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	evil := filepath.Join(f.dir, "evil.git")
	victim := filepath.Join(f.dir, "victim")
	f.git(f.dir, "clone", "-q", "--bare", f.remote, evil)
	f.git(evil, "config", "receive.denyCurrentBranch", "updateInstead")
	f.git(evil, "symbolic-ref", "HEAD", "refs/heads/unborn")
	f.write(evil, "worktrees/x/gitdir", victim+"/.git\n", 0o644)
	f.write(evil, "worktrees/x/HEAD", "ref: refs/heads/main\n", 0o644)
	f.write(evil, "worktrees/x/commondir", "../..\n", 0o644)
	f.write(victim, "keep.txt", "keep\n", 0o644)
	evilMain := f.git(f.dir, "--git-dir", evil, "rev-parse", "main")

	ctx := context.Background()
	opts := f.opts()
	opts.Recovery, opts.Execute = true, true
	w := &wsHandles{}
	defer w.close()
	plan, m, err := inspect(ctx, f.ws, opts, w)
	defer m.remove()
	if err != nil || !plan.Recoverable {
		t.Fatalf("inspect: %v, refusals %q", err, plan.Refusals)
	}
	plan.remote = remoteTarget{url: evil, local: true}
	step, err := execute(ctx, plan, opts, &Record{}, io.Discard, m, w)
	if step != StepPush || err == nil {
		t.Errorf("execute: step %q, %v; want the push refused", step, err)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the push checked files out into the victim directory: %q", names)
	}
	if got := f.git(f.dir, "--git-dir", evil, "rev-parse", "main"); got != evilMain {
		t.Errorf("the evil remote's main moved")
	}
}
