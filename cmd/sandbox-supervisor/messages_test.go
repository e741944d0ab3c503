package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Issue 16 item 5, through the binary: messages that send the user the
// right way.
func TestMessagesThatSayWhatToDo(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.Binary(t, "sandbox-supervisor")
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	wd, st := sandboxDirs(t)
	supervisor := func(cred *syscall.Credential, env []string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = "/"
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}

	// The operator template, not a rendered policy: say so, show render.
	tmpl := filepath.Join(root, "policies", "mac-hermes-policy.yaml")
	out, code := supervisor(nil, nil, "run", "--state-dir", st, "--workdir", wd, "--policy", tmpl, "--", "/bin/true")
	if code != 125 || !strings.Contains(out, "unrendered template") || !strings.Contains(out, "policy-sync render --template "+tmpl) ||
		!strings.Contains(out, "--set MAC_HUB_PORT=") || strings.Contains(out, "must be an integer") {
		t.Errorf("run --policy <template>: exit %d\n%s", code, out)
	}
	// No doubled prefix.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nsurprise: true\n"), 0o600)
	out, _ = supervisor(nil, nil, "run", "--state-dir", st, "--workdir", wd, "--policy", bad, "--", "/bin/true")
	if strings.Contains(out, "policy: policy") || !strings.Contains(out, "surprise") {
		t.Errorf("doubled prefix or no field named:\n%s", out)
	}
	// spec --help is spec's.
	out, code = supervisor(nil, nil, "spec", "--help")
	if code != 0 || !strings.HasPrefix(out, "usage: sandbox-supervisor spec") {
		t.Errorf("spec --help: exit %d\n%.200s", code, out)
	}
	// An unknown command: the error, first, with a one-line hint.
	out, code = supervisor(nil, nil, "frobnicate")
	if code != 2 || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d\n%s", code, out)
	}

	// Not root: every command that needs root says so first (a copy of
	// the binary the unprivileged user can execute).
	dir := hostDir(t, "palisade-nonroot-", 0o755)
	exe := filepath.Join(dir, "sandbox-supervisor")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(exe, b, 0o755)
	bin = exe
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"run", "--", "/bin/true"}, 125},
		{[]string{"list"}, 1},
		{[]string{"status", "x"}, 1},
		{[]string{"gc"}, 1},
	} {
		out, code := supervisor(nobody, []string{"HOME=/root"}, c.args...)
		if code != c.want || !strings.Contains(out, "needs root (running as uid 65534)") || strings.Contains(out, "permission denied") {
			t.Errorf("%v as uid 65534: exit %d\n%s\nwant %d and a message saying it needs root", c.args, code, out, c.want)
		}
	}
}
