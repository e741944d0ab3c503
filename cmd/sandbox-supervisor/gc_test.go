package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// supervise runs the supervisor binary with args and returns its stdout
// and exit status.
func supervise(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	if errb.Len() > 0 {
		t.Logf("%v: stderr %s", args, errb.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// Issue 16 item 4, through the binary: after the supervisor is SIGKILLed,
// list and status say "orphaned" (they said "running"); gc
// --stale-after 0s collects it now (0 was read as 24 h); gc --apply lists
// the sandboxes it keeps, with the reason (it printed nothing for them);
// a --keep sandbox can be removed with gc --apply --include-kept NAME
// (no command could remove it).
func TestOrphanedKeptAndGCThroughTheBinary(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)

	kept := testutil.UniqueName("kept-")
	if _, code := supervise(t, bin, "run", "--state-dir", st, "--workdir", wd, "--name", kept, "--keep", "--", "/bin/true"); code != 0 {
		t.Fatalf("kept run: exit %d", code)
	}

	orphan := testutil.UniqueName("orph-")
	cmd := startReady(t, bin, "run", "--state-dir", st, "--workdir", wd, "--name", orphan, "--", "/bin/sh", "-c", "echo ready; exec sleep 60")
	cmd.Process.Kill()
	cmd.Wait()

	out, _ := supervise(t, bin, "list", "--state-dir", st)
	if !lineHas(out, orphan, "orphaned") {
		t.Errorf("list after SIGKILL:\n%s\nwant %s orphaned", out, orphan)
	}
	out, _ = supervise(t, bin, "status", orphan, "--state-dir", st)
	if !strings.Contains(out, "status:        orphaned") || !strings.Contains(out, "cgroup:        palisade/"+orphan) {
		t.Errorf("status after SIGKILL:\n%s\nwant orphaned and cgroup palisade/%s", out, orphan)
	}
	out, _ = supervise(t, bin, "list", "--json", "--state-dir", st)
	if !lineHas(out, `"name":"`+orphan+`"`, `"status":"orphaned"`) {
		t.Errorf("list --json after SIGKILL:\n%s", out)
	}

	// --stale-after 0s: any age. The dry run would collect the orphan now.
	out, _ = supervise(t, bin, "gc", "--state-dir", st, "--stale-after", "0s")
	if !lineHas(out, "collect "+orphan) {
		t.Errorf("gc --stale-after 0s (dry run):\n%s\nwant %s collected", out, orphan)
	}
	// --apply lists what it keeps, with the reason.
	out, code := supervise(t, bin, "gc", "--state-dir", st, "--stale-after", "0s", "--apply")
	if code != 0 || !lineHas(out, "removed "+orphan) || !lineHas(out, "keep    "+kept, "keep=true") {
		t.Errorf("gc --apply: exit %d\n%s\nwant %s removed and %s kept with its reason", code, out, orphan, kept)
	}
	if _, err := os.Stat(st + "/" + kept); err != nil {
		t.Fatalf("the kept sandbox is gone without --include-kept: %v", err)
	}
	// --include-kept removes the kept one; an unknown name is an error.
	if out, code = supervise(t, bin, "gc", "--state-dir", st, "--apply", "--include-kept", "no-such-sbx"); code != 1 {
		t.Errorf("--include-kept of an unknown sandbox: exit %d\n%s", code, out)
	}
	out, code = supervise(t, bin, "gc", "--state-dir", st, "--apply", "--include-kept", kept)
	if code != 0 || !lineHas(out, "removed "+kept, "--include-kept") {
		t.Errorf("gc --apply --include-kept: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(st + "/" + kept); !os.IsNotExist(err) {
		t.Errorf("the kept sandbox's state is still there: %v", err)
	}
}

// Issue 16 item 4: --include-kept refuses while the sandbox's processes
// run.
func TestIncludeKeptRefusesALiveSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	name := testutil.UniqueName("live-")
	// Runs after startReady's kill (cleanups run last first): the kept
	// sandbox's state and cgroups go, so runs leave nothing on the host.
	// The sandbox's init may outlive its killed supervisor for a moment
	// (gc keeps a sandbox whose processes run): retry, bounded.
	t.Cleanup(func() {
		deadline := time.Now().Add(15 * time.Second)
		for {
			supervise(t, bin, "gc", "--state-dir", st, "--apply", "--stale-after", "0s", "--include-kept", name)
			_, err := os.Stat("/sys/fs/cgroup/pids/palisade/" + name)
			if os.IsNotExist(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("the kept sandbox's cgroup is left after gc --include-kept: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	startReady(t, bin, "run", "--state-dir", st, "--workdir", wd, "--name", name, "--keep", "--", "/bin/sh", "-c", "echo ready; exec sleep 60")
	out, _ := supervise(t, bin, "gc", "--state-dir", st, "--apply", "--include-kept", name)
	if !lineHas(out, "keep    "+name, "alive") {
		t.Errorf("gc --include-kept on a running sandbox:\n%s\nwant it kept, its live creator named", out)
	}
	if _, err := os.Stat(st + "/" + name); err != nil {
		t.Errorf("a running sandbox's state was removed: %v", err)
	}
}

// startReady starts the supervisor binary with args and waits for the
// command's "ready" line; the process is killed when the test ends.
func startReady(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("got %q", line)
	}
	return cmd
}

// lineHas reports whether one line of out contains every part.
func lineHas(out string, parts ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// The gc unit runs `sandbox-supervisor gc --apply --log-format json`: the
// admin commands take the log flags every unit passes (gc refused
// --log-format as an unknown flag, exit 2).
func TestAdminCommandsTakeTheUnitsLogFlags(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.Binary(t, "sandbox-supervisor")
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(root + "/deploy/systemd/sandbox-supervisor-gc.service")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, l := range strings.Split(string(unit), "\n") {
		if rest, ok := strings.CutPrefix(l, "ExecStart=/usr/local/bin/sandbox-supervisor "); ok {
			args = strings.Fields(rest)
		}
	}
	if len(args) == 0 {
		t.Fatal("no sandbox-supervisor ExecStart in the gc unit")
	}
	st := t.TempDir()
	for _, a := range [][]string{
		append(args, "--state-dir", st),
		{"list", "--log-format", "json", "--log-level", "warn", "--state-dir", st},
		{"status", "nope", "--log-format", "json", "--state-dir", st},
	} {
		out, code := supervise(t, bin, a...)
		if want := map[string]int{"gc": 0, "list": 0, "status": 1}[a[0]]; code != want {
			t.Errorf("%v: exit %d, want %d\n%s", a, code, want, out)
		}
	}
	if _, code := supervise(t, bin, "gc", "--log-level", "loud", "--state-dir", st); code != 2 {
		t.Errorf("gc --log-level loud: exit %d, want 2", code)
	}
}
