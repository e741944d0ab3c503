//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A sandbox is created only with an init binary root owns and nobody
// else can write or swap: each unsafe shape fails the run with
// ExitSandboxFailed, an error naming the path and why, and leaves no
// state behind. The last case is the accepted shape (a root-owned 0755
// copy in a root-owned 0755 directory), so the checks are not simply
// failing everything.
func TestInitBinaryRefused(t *testing.T) {
	f := newFixture(t)
	good := func(t *testing.T, dirMode os.FileMode) (dir, bin string) {
		dir = filepath.Join(t.TempDir(), "bin")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, dirMode)
		bin = filepath.Join(dir, InitBinaryName)
		copyFile(t, f.exe, bin, 0o755)
		return dir, bin
	}
	cases := []struct {
		name string
		make func(t *testing.T) string
		why  string // "" = accepted
	}{
		{"missing", func(t *testing.T) string { d, _ := good(t, 0o755); return filepath.Join(d, "nothing-here") }, "missing"},
		{"relative", func(t *testing.T) string { return "bin/" + InitBinaryName }, "not an absolute path"},
		{"symlink", func(t *testing.T) string {
			d, bin := good(t, 0o755)
			link := filepath.Join(d, "link")
			if err := os.Symlink(bin, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, "a symbolic link"},
		{"directory", func(t *testing.T) string { d, _ := good(t, 0o755); return d }, "not a regular file"},
		{"sandbox-owned", func(t *testing.T) string {
			_, bin := good(t, 0o755)
			os.Chown(bin, SandboxID, SandboxID)
			return bin
		}, "owned by uid 10001, not root"},
		{"group-writable", func(t *testing.T) string {
			_, bin := good(t, 0o755)
			os.Chmod(bin, 0o775)
			return bin
		}, "writable by group or others (mode 0775)"},
		{"not-executable", func(t *testing.T) string {
			_, bin := good(t, 0o755)
			os.Chmod(bin, 0o644)
			return bin
		}, "not executable"},
		{"open-directory", func(t *testing.T) string { _, bin := good(t, 0o777); return bin }, "writable by group or others (mode 0777)"},
		{"sandbox-directory", func(t *testing.T) string {
			d, bin := good(t, 0o755)
			os.Chown(d, SandboxID, SandboxID)
			return bin
		}, "owned by uid 10001, not root"},
		{"accepted", func(t *testing.T) string { _, bin := good(t, 0o755); return bin }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, err := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t"})
			if err != nil {
				t.Fatal(err)
			}
			o := f.options([]string{"/bin/true"}, env)
			o.InitExe = c.make(t)
			var errb bytes.Buffer
			o.Stdout, o.Stderr, o.Stdin = &bytes.Buffer{}, &errb, strings.NewReader("")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := Run(ctx, o)
			if c.why == "" {
				if err != nil || res.ExitCode != 0 {
					t.Fatalf("Run with %s = %+v, %v; want exit 0 (stderr %s)", o.InitExe, res, err, errb.String())
				}
				return
			}
			if err == nil || res.ExitCode != ExitSandboxFailed {
				t.Fatalf("Run with %s = %+v, %v; want exit %d", o.InitExe, res, err, ExitSandboxFailed)
			}
			if !strings.Contains(err.Error(), "init binary "+o.InitExe+": ") || !strings.Contains(err.Error(), c.why) {
				t.Errorf("error %q; want it to name %s and say %q", err, o.InitExe, c.why)
			}
			if ents, _ := os.ReadDir(f.stateDir); len(ents) > 0 {
				t.Errorf("state left behind: %v", ents)
			}
		})
	}
}

// The init runs from the descriptor the supervisor opened and checked,
// not from the path: a file put at the path after the check (here a
// script that would leave a marker and speak no protocol) is never
// executed, and the sandbox runs its command with the checked init.
// Executing the path instead (the mutation) runs the script: the marker
// appears and the run fails.
func TestInitBinaryRunsByDescriptor(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, InitBinaryName)
	copyFile(t, f.exe, bin, 0o755)
	marker := filepath.Join(t.TempDir(), "swapped-init-ran")
	initOpenedForTest = func(path string) {
		swap := path + ".new"
		if err := os.WriteFile(swap, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
			t.Error(err)
		}
		if err := os.Rename(swap, path); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { initOpenedForTest = nil })
	env, err := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	o := f.options([]string{"/bin/sh", "-c", "echo confined as $(id -u)"}, env)
	o.InitExe = bin
	out, errs, res := f.run(o)
	if res.ExitCode != 0 || !strings.Contains(out, "confined as 10001") {
		t.Errorf("run = %+v, stdout %q, stderr %q; want the command run by the checked init", res, out, errs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the file swapped in at %s after the check was executed", bin)
	}
	if b, err := os.ReadFile(bin); err != nil || !bytes.HasPrefix(b, []byte("#!")) {
		t.Errorf("the swap did not happen (%v): the test proves nothing", err)
	}
}
