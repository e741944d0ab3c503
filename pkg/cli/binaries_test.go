package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// These tests hold every binary in cmd/ to the conventions of this
// package, through the real binaries (issue 29 item 6).

func binaries(t *testing.T) []string {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) != 8 {
		t.Fatalf("cmd/ holds %d binaries (%v); this test knows eight", len(names), names)
	}
	return names
}

type result struct {
	stdout, stderr string
	code           int
}

func runBin(t *testing.T, bin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("%s %v: %v", bin, args, err)
		}
	}
	return result{o.String(), e.String(), cmd.ProcessState.ExitCode()}
}

var versionLine = regexp.MustCompile(`^(\S+) (\S+) commit ([0-9a-f]{40}(\+modified)?( \(\S+\))?|unknown) (go\S+) (\S+/\S+)\n$`)

// Every binary answers --version with one line: its name, the module
// version, the commit and the Go version, exit 0 (none had --version).
func TestVersionOnEveryBinary(t *testing.T) {
	for _, name := range binaries(t) {
		r := runBin(t, testutil.Binary(t, name), "--version")
		m := versionLine.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil || m[1] != name || m[6] != runtime.Version() {
			t.Errorf("%s --version: exit %d, stdout %q, stderr %q; want \"%s VERSION commit HASH %s OS/ARCH\"",
				name, r.code, r.stdout, r.stderr, name, runtime.Version())
		}
	}
}

// make build stamps the commit of the tree it builds and whether the tree
// had uncommitted changes, also in a linked git worktree, where go build's
// own VCS stamp finds nothing.
func TestMakeBuildStampsCommit(t *testing.T) {
	testutil.RequireCommand(t, "make")
	testutil.RequireCommand(t, "git")
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	top, err := git("rev-parse", "--show-toplevel")
	if err == nil && top != root {
		err = os.ErrNotExist
	}
	testutil.RequireData(t, "the repository as a git checkout (the build stamps its commit)", err)
	out := t.TempDir()
	mk := exec.Command("make", "-C", root, "build", "OUT="+out)
	if b, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, b)
	}
	head, err := git("rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	status, err := git("status", "--porcelain")
	if err != nil {
		t.Fatal(err)
	}
	want := "commit " + head
	if status != "" {
		want += "+modified"
	}
	for _, name := range binaries(t) {
		r := runBin(t, filepath.Join(out, name), "--version")
		if r.code != 0 || !strings.Contains(r.stdout, want+" (") {
			t.Errorf("%s --version from make build: %q, want %q", name, r.stdout, want)
		}
	}
}

// singleDashFlag is a flag longer than one letter spelled -name (a
// one-letter flag is -x, as in -o OUT).
var singleDashFlag = regexp.MustCompile(`(?m)^\s+-[A-Za-z][-A-Za-z0-9]+\b`)

// helpOK checks one help text: exit 0, exit codes named, every flag
// spelled --name (-x for one letter), and a Flags: heading never left
// empty.
func helpOK(t *testing.T, what string, r result, wantExit bool) {
	t.Helper()
	text := r.stdout + r.stderr
	if r.code != 0 {
		t.Errorf("%s: exit %d\n%s", what, r.code, text)
	}
	if wantExit && !strings.Contains(text, "Exit status") {
		t.Errorf("%s: no \"Exit status\" in the help\n%s", what, text)
	}
	if m := singleDashFlag.FindAllString(text, -1); len(m) > 0 {
		t.Errorf("%s: flags spelled with one dash: %q", what, m)
	}
	if i := strings.Index(text, "Flags:\n"); i >= 0 {
		rest := strings.TrimLeft(text[i+len("Flags:\n"):], "\n")
		if !strings.HasPrefix(rest, "  -") {
			t.Errorf("%s: empty Flags: section\n%s", what, text)
		}
	}
}

// Every binary's --help names its exit codes and spells every flag
// --name; sandbox-supervisor's and policy-sync's commands too.
func TestHelpOnEveryBinary(t *testing.T) {
	for _, name := range binaries(t) {
		bin := testutil.Binary(t, name)
		helpOK(t, name+" --help", runBin(t, bin, "--help"), true)
		switch name {
		case "sandbox-supervisor":
			for _, c := range commandList(t, name, runBin(t, bin, "frobnicate")) {
				helpOK(t, name+" "+c+" --help", runBin(t, bin, c, "--help"), c == "exec" || c == "attach")
			}
		case "policy-sync":
			for _, c := range commandList(t, name, runBin(t, bin, "frobnicate")) {
				helpOK(t, name+" help "+c, runBin(t, bin, "help", c), false)
			}
		case "confinement-probe":
			helpOK(t, name+" route --help", runBin(t, bin, "route", "--help"), true)
		}
	}
}

// commandList is the command names an unknown-command error lists.
func commandList(t *testing.T, name string, r result) []string {
	t.Helper()
	m := regexp.MustCompile(`commands: ([a-z, -]+) \(see`).FindStringSubmatch(r.stderr)
	if r.code != 2 || m == nil {
		t.Fatalf("%s frobnicate: exit %d, stderr %q; want 2 listing the commands", name, r.code, r.stderr)
	}
	return strings.Split(m[1], ", ")
}

// sandbox-supervisor's unknown-command message lists every command (it
// left out exec, delete, attach and logs).
func TestUnknownCommandListsAll(t *testing.T) {
	bin := testutil.Binary(t, "sandbox-supervisor")
	got := commandList(t, "sandbox-supervisor", runBin(t, bin, "frobnicate"))
	help := runBin(t, bin, "--help").stdout
	for _, c := range []string{"run", "exec", "attach", "delete", "logs", "spec", "list", "status", "gc", "preflight"} {
		if !strings.Contains(strings.Join(got, " ")+" ", c+" ") {
			t.Errorf("unknown-command message lists %v, not %s", got, c)
		}
		if !regexp.MustCompile(`(?m)^  ` + c + `\b`).MatchString(help) {
			t.Errorf("--help lists no %s command", c)
		}
	}
}
