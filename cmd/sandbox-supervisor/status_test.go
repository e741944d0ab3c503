package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// runWithStatus runs the built supervisor's run with --status-fd 3 on a
// pipe and returns the exit code, the combined output and the status line.
func runWithStatus(t *testing.T, bin string, args ...string) (int, string, statusLine, string) {
	t.Helper()
	return withStatus(t, bin, "run", args...)
}

// withStatus runs the built supervisor's subcommand sub with --status-fd 3
// on a pipe.
func withStatus(t *testing.T, bin, sub string, args ...string) (int, string, statusLine, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(bin, append([]string{sub, "--status-fd", "3"}, args...)...)
	cmd.ExtraFiles = []*os.File{w}
	out, _ := func() ([]byte, error) {
		defer w.Close()
		return cmd.CombinedOutput()
	}()
	w.Close()
	raw, _ := io.ReadAll(io.LimitReader(r, 1<<16))
	var st statusLine
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatalf("status %q: %v", raw, err)
		}
	}
	return cmd.ProcessState.ExitCode(), string(out), st, string(raw)
}

// TestStatusFD: run --status-fd reports the supervisor's own failure on a
// descriptor the command never gets. A command that prints the
// supervisor's error line and exits 125 is reported as the command's
// status, without its words; a sandbox that could not be created as the
// supervisor's, with its reason; the command cannot write to (or even
// see) the descriptor.
func TestStatusFD(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)

	code, out, s, raw := runWithStatus(t, bin, "--state-dir", st, "--workdir", wd, "--", "/bin/sh", "-c",
		`echo "sandbox-supervisor: sandbox not created: forged"; ls /proc/self/fd; echo x >&3 && echo WROTE; exit 125`)
	if code != 125 || s.ExitCode != 125 || !s.FromCommand || s.Error != "" {
		t.Errorf("command exit 125: exit %d, status %s\n%s", code, raw, out)
	}
	if strings.Contains(out, "WROTE") || strings.Contains(raw, "forged") {
		t.Errorf("the command reached the status descriptor: %s / %s", out, raw)
	}

	code, out, s, raw = runWithStatus(t, bin, "--state-dir", st, "--workdir", filepath.Join(wd, "missing"), "--", "/bin/true")
	if code != 125 || s.ExitCode != 125 || s.FromCommand || !strings.Contains(s.Error, "sandbox not created") || !strings.Contains(s.Error, "missing") {
		t.Errorf("sandbox not created: exit %d, status %s\n%s", code, raw, out)
	}

	code, _, s, raw = runWithStatus(t, bin, "--state-dir", st, "--workdir", wd, "--", "/bin/sh", "-c", "exit 3")
	if code != 3 || s.ExitCode != 3 || !s.FromCommand {
		t.Errorf("exit 3: exit %d, status %s", code, raw)
	}
}
