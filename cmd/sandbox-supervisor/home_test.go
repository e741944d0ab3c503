package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The sandbox's PATH keeps the caller's entries under the policy's
// read_only paths, in order, then the standard ones (#29: go in
// /usr/local/go/bin was not found); HOME is a directory of the sandbox's
// own, not the working directory (npm's cache landed in the project),
// writable, the same for execs into a detached sandbox, kept and removed
// with the sandbox's state.
func TestSandboxPathAndHome(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	gitCore := "/usr/lib/git-core"
	if _, err := os.Stat(filepath.Join(gitCore, "git-http-backend")); err != nil {
		testutil.RequireData(t, "git http-backend (package git)", err)
	}
	// The bundled default policy reads /usr, /bin, /sbin, /lib, /lib64
	// and /etc: /usr/lib/git-core stays, /opt/x, /var/tmp, the workdir
	// and the relative entry go.
	callerPath := strings.Join([]string{"/opt/x/bin", gitCore, "/usr/bin", "/var/tmp", wd, "rel", "/usr/lib/git-core/"}, ":")
	script := `echo "path=$PATH"; echo "home=$HOME"; command -v git-http-backend | sed 's/^/found=/'; ` +
		`echo x > "$HOME/cache" && echo "home_write=ok"; ls -ld "$HOME" | cut -d' ' -f1,3 | sed 's/^/home_mode=/'`
	cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--", "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+callerPath)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run: %v\n%s%s", err, out, errb.String())
	}
	r := results(out)
	want := map[string]string{
		"path":       gitCore + ":/usr/bin:" + strings.ReplaceAll(sandbox.DefaultPath, ":/usr/bin", ""),
		"home":       sandbox.DefaultHome,
		"found":      gitCore + "/git-http-backend",
		"home_write": "ok",
		"home_mode":  "drwx------ 10001",
	}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("%s = %q, want %q", k, r[k], v)
		}
	}
	if entries, _ := os.ReadDir(wd); len(entries) != 0 {
		t.Errorf("the run wrote into the working directory: %v", entries)
	}
	if entries, _ := os.ReadDir(st); len(entries) != 0 {
		t.Errorf("state (with HOME) left behind after the run: %v", entries)
	}

	// A detached sandbox: every exec gets the same HOME, with what the
	// last one left there; delete removes it.
	name, _ := detached(t, bin, st, wd)
	if out, code := execIn(t, bin, st, name, "--", `echo one > "$HOME/note"; echo "$HOME"`); code != 0 || strings.TrimSpace(out) != sandbox.DefaultHome {
		t.Fatalf("first exec: %d %q", code, out)
	}
	if out, code := execIn(t, bin, st, name, "--", `cat "$HOME/note"`); code != 0 || strings.TrimSpace(out) != "one" {
		t.Fatalf("second exec does not see HOME's file: %d %q", code, out)
	}
	kept := filepath.Join(st, name, sandbox.HomeDirName, "note")
	if b, err := os.ReadFile(kept); err != nil || string(b) != "one\n" {
		t.Errorf("HOME is not kept with the sandbox at %s: %q %v", kept, b, err)
	}
	if out, err := exec.Command(bin, "delete", "--state-dir", st, name).CombinedOutput(); err != nil {
		t.Fatalf("delete: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Dir(kept)); !os.IsNotExist(err) {
		t.Errorf("HOME survived delete: %v", err)
	}
}

// --home DIR: created for the sandbox identity (0700) when missing and
// used as HOME; never created or bound through a symlink, inside the
// working directory, or below a directory the sandbox identity can write.
func TestSandboxHomeFlag(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	base := t.TempDir() // root's, mode 0700
	home := filepath.Join(base, "agent-home")
	run := func(home string) (string, string, int) {
		cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--home", home, "--", "/bin/sh", "-c", `echo "$HOME"; touch "$HOME/f"`)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, _ := cmd.Output()
		return strings.TrimSpace(string(out)), errb.String(), cmd.ProcessState.ExitCode()
	}
	if out, errs, code := run(home); code != 0 || out != home {
		t.Fatalf("--home %s: %d %q %s", home, code, out, errs)
	}
	fi, err := os.Stat(filepath.Join(home, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 10001 {
		t.Errorf("file written in HOME owned by %d", st.Uid)
	}
	if di, _ := os.Stat(home); di.Mode().Perm() != 0o700 || di.Sys().(*syscall.Stat_t).Uid != 10001 {
		t.Errorf("--home created with mode %v uid %d", di.Mode(), di.Sys().(*syscall.Stat_t).Uid)
	}

	// Refusals, each before anything runs, naming the cause; the symlink
	// target is never chowned or bound.
	target := t.TempDir()
	os.Chmod(target, 0o755)
	link := filepath.Join(base, "link") // as an agent would plant it
	os.Symlink(target, link)
	os.Lchown(link, 10001, 10001)
	agentDir := filepath.Join(base, "agents")
	os.Mkdir(agentDir, 0o755)
	os.Chown(agentDir, 10001, 10001)
	for _, c := range []struct{ home, want string }{
		{link, "is a symbolic link owned by uid 10001"},
		{filepath.Join(wd, ".home"), "lies inside the working directory"},
		{filepath.Join(agentDir, "h"), "is owned by the sandbox identity"},
		{filepath.Join(base, "missing", "h"), "does not exist; create it first"},
	} {
		out, errs, code := run(c.home)
		if code != 125 || !strings.Contains(errs, c.want) || strings.Contains(out, "/") {
			t.Errorf("--home %s: exit %d, stdout %q, stderr %q; want 125 and %q", c.home, code, out, errs, c.want)
		}
	}
	if ti, _ := os.Stat(target); ti.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the symlink's target was chowned")
	}
	if entries, _ := os.ReadDir(wd); len(entries) != 0 {
		t.Errorf("a refused --home left %v in the working directory", entries)
	}
}

// results parses "name=value" lines (the first = splits).
func results(out []byte) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}
