package sandboxnet

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Issue 29 item 5: the egress proxy logs to its own stream, proxy.log in
// the sandbox's state directory, read with `logs --proxy`; the operator's
// stderr (shared with the sandboxed command) gets none of its lines, only
// the supervisor's warnings for what needs action: a reload that changed
// static sections, here. A denial is logged at info, not as a warning.
// Before, every proxy line, a WARN per denial, went to run's stderr.
func TestProxyLogsToItsOwnStream(t *testing.T) {
	l := newLab(t, "")
	name := testutil.UniqueName("plog-")
	cmd := exec.Command(l.sup, "run", "--keep", "--name", name, "--policy", l.policy, "--hosts-file", l.hosts,
		"--state-dir", l.state, "--workdir", l.wd, "--", "/bin/sh", "-c",
		`curl -sS -m 5 http://denied.test/ ; echo; echo ready > ready; i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; echo done`)
	t.Cleanup(func() { exec.Command(l.sup, "delete", "--state-dir", l.state, name).Run() })
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(filepath.Join(l.wd, "ready")); return err == nil })
	// A reload that changes a static section: the proxy warns, and the
	// operator must hear of it.
	l.write(strings.Replace(fmt.Sprintf(labPolicy, ""), "read_write: [/tmp]", "read_write: [/tmp, /var/tmp]", 1))
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(stderr.String(), "static sections changed") })
	os.WriteFile(filepath.Join(l.wd, "go"), nil, 0o644)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), `"error":"policy_denied"`) || !strings.HasSuffix(stdout.String(), "done\n") {
		t.Errorf("the command's output is not intact:\n%s", stdout.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.Contains(line, "egress-proxy: policy reload: static sections changed") ||
			!strings.Contains(line, "level=WARN") || !strings.Contains(line, "logs --proxy "+name) {
			t.Errorf("run's stderr has a line that is not the supervisor's warning about the reload: %q", line)
		}
	}

	out, err := exec.Command(l.sup, "logs", "--proxy", "--state-dir", l.state, name).CombinedOutput()
	if err != nil {
		t.Fatalf("logs --proxy: %v\n%s", err, out)
	}
	var denied bool
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "msg=connection") && strings.Contains(line, "outcome=policy_denied") && strings.Contains(line, "host=denied.test") {
			denied = true
			if !strings.Contains(line, "level=INFO") {
				t.Errorf("a denial logged as %q, want level=INFO", line)
			}
		}
	}
	if !denied || !strings.Contains(string(out), `msg="egress-proxy listening"`) || !strings.Contains(string(out), "static sections changed") {
		t.Errorf("logs --proxy lacks the proxy's start, the denial or the reload warning:\n%s", out)
	}
	if fi, err := os.Stat(filepath.Join(l.state, name, ProxyLogName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("proxy log: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
}
