package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// readmeSection returns the text of README.md's "## heading" section.
func readmeSection(t *testing.T, heading string) string {
	return testutil.DocSection(t, "README.md", heading)
}

// readmeBlocks returns the sh blocks of a README section, in order.
func readmeBlocks(t *testing.T, heading string) []string {
	return testutil.DocShBlocks(t, "README.md", heading)
}

// copyTree copies the module's tracked and untracked, not ignored, files
// to dst: a fresh clone of what is being tested.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	git := testutil.RequireCommand(t, "git")
	cmd := exec.Command(git, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = src
	out, err := cmd.Output()
	if err != nil {
		testutil.RequireData(t, "the module as a git checkout (git ls-files)", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		fi, err := os.Lstat(filepath.Join(src, rel))
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a file
		}
		in, err := os.Open(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755)
		o, err := os.OpenFile(filepath.Join(dst, rel), os.O_CREATE|os.O_WRONLY|os.O_EXCL, fi.Mode().Perm())
		if err == nil {
			_, err = io.Copy(o, in)
			o.Close()
		}
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// #29 item 1: every command of the README's "First commands", run
// verbatim as root (no sudo: a root-only host or container has none) in a
// fresh copy of the repository in a directory like root's home (0700),
// does what the README says. Before, both commands started with sudo
// and a root-only host answered "sudo: command not found" (127), and the
// first one, from root's home, stopped with 125.
func TestReadmeFirstCommandsVerbatimAsRoot(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	make := testutil.RequireCommand(t, "make")
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir() // 0700, root's: like /root
	clone := filepath.Join(home, "palisade")
	copyTree(t, root, clone)
	env := append(os.Environ(), "PATH="+filepath.Join(runtime.GOROOT(), "bin")+":"+os.Getenv("PATH"), "MAKE="+make)
	blocks := readmeBlocks(t, "First commands")
	if len(blocks) != 2 {
		t.Fatalf("README's First commands has %d sh blocks, want 2 (this test checks what each prints)", len(blocks))
	}
	run := func(block string) (string, string, int) {
		cmd := exec.Command("/bin/sh", "-c", block)
		cmd.Dir, cmd.Env = clone, env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}

	// Build, make the working directory, run: the output the README
	// promises. (/var/tmp/palisade-work is the README's own directory and
	// stays, as it does for a reader.)
	out, errs, code := run(blocks[0])
	if code != 0 || !strings.Contains(out, "uid=10001 gid=10001 groups=10001\n") || !strings.HasSuffix(out, "done\n") ||
		!strings.Contains(errs, "cat: /etc/shadow: Permission denied") || !strings.Contains(errs, "ls: cannot open directory '/root': Permission denied") {
		t.Fatalf("first block: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, b := range []string{"sandbox-supervisor", "ocsf-collector", "egress-proxy"} {
		if _, err := os.Stat(filepath.Join(clone, "bin", b)); err != nil {
			t.Errorf("make build did not put %s in ./bin: %v", b, err)
		}
	}

	// The events pipeline: the command's output in build.log, its
	// events through fd 3 as mac.action_event.v1 records.
	out, errs, code = run(blocks[1])
	if log, _ := os.ReadFile(filepath.Join(clone, "build.log")); code != 0 || string(log) != "built\n" {
		t.Fatalf("second block: exit %d, build.log %q\nstderr:\n%s", code, log, errs)
	}
	launched := false
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec struct{ Schema, Reason string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Schema != "mac.action_event.v1" {
			t.Fatalf("collector output line %q is not a mac.action_event.v1 record (%v)", l, err)
		}
		launched = launched || strings.Contains(rec.Reason, "launched sh")
	}
	if !launched {
		t.Errorf("no launch record in:\n%s", out)
	}
	if strings.Contains(strings.Join(blocks, "\n"), "sudo") {
		t.Errorf("a first command uses sudo: the README writes them for root")
	}
}

// #29 item 1: the README says, next to the test command, what the test
// run installs: every package .ci/run installs, by name.
func TestReadmeListsWhatCIInstalls(t *testing.T) {
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(ci), "for pair in ")
	list, _, ok2 := strings.Cut(list, "; do")
	if !ok || !ok2 {
		t.Fatal(".ci/run has no `for pair in PATH:PACKAGE ...; do` install list")
	}
	var pkgs []string
	for _, f := range strings.Fields(strings.ReplaceAll(list, "\\\n", " ")) {
		if _, pkg, ok := strings.Cut(f, ":"); ok && !slices.Contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
	}
	if len(pkgs) < 5 {
		t.Fatalf(".ci/run installs %v: the list did not parse", pkgs)
	}
	tests := readmeSection(t, "Tests")
	if !strings.Contains(tests, "```sh\nmake test\n```") {
		t.Errorf("README's ## Tests does not give the test command `make test` in an sh block")
	}
	for _, p := range pkgs {
		if !strings.Contains(tests, "`"+p+"`") {
			t.Errorf("README's ## Tests does not name `%s`, which .ci/run installs", p)
		}
	}
}
