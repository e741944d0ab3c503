package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// lifecycleSetup checks what the lifecycle tests need and returns the
// supervisor binary, a workdir and a state root.
func lifecycleSetup(t *testing.T) (string, string, string) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	wd, st := sandboxDirs(t)
	return testutil.Binary(t, "sandbox-supervisor"), wd, st
}

// detached starts a sandbox with run --detach --json and returns its name
// and id; the sandbox is deleted when the test ends.
func detached(t *testing.T, bin, st, wd string, args ...string) (string, string) {
	t.Helper()
	return detachedAs(t, testutil.UniqueName("det-"), bin, st, wd, args...)
}

// detachedAs is detached with the sandbox name given.
func detachedAs(t *testing.T, name, bin, st, wd string, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"run", "--detach", "--json", "--state-dir", st, "--workdir", wd, "--name", name}, args...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run --detach: %v: %s", err, errb.String())
	}
	var r struct {
		Name     string `json:"name"`
		ID       string `json:"id"`
		OwnerPID int    `json:"owner_pid"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.Name != name || len(r.ID) != 32 || r.OwnerPID <= 0 {
		t.Fatalf("run --detach --json printed %q (%v)", out, err)
	}
	t.Cleanup(func() { exec.Command(bin, "delete", "--state-dir", st, name).Run() })
	return r.Name, r.ID
}

// execIn runs `exec` with args and returns stdout+stderr and the status.
func execIn(t *testing.T, bin, st string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"exec", "--state-dir", st}, args...)...)
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

func labelsOf(t *testing.T, st, name string) state.Labels {
	t.Helper()
	store, err := state.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	l, err := store.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// pidGone waits up to d for pid to end (a zombie has ended).
func pidGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if _, err := state.ProcStartTime(pid); errors.Is(err, fs.ErrNotExist) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two concurrent execs into one detached sandbox, one of them on a
// terminal, share its /tmp, PID and network namespaces and identity; exit
// statuses and signals come back as from run; --env adds but cannot
// override a reserved variable.
func TestDetachedSandboxConcurrentExecs(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, _ := detached(t, bin, st, wd)

	// The terminal exec writes to /tmp and waits for the other to
	// answer; the other reads it and answers: both run at once.
	m, slave := testutil.Pty(t)
	script := `echo shared > /tmp/shared; i=0; while [ ! -e /tmp/done ] && [ $i -lt 400 ]; do sleep 0.025; i=$((i+1)); done; ` +
		`echo "tty=$(tty) uid=$(id -u) pidns=$(readlink /proc/self/ns/pid) netns=$(readlink /proc/self/ns/net) done=$(cat /tmp/done)"`
	ttyCmd := exec.Command(bin, "exec", "--state-dir", st, "--tty", name, "--", script)
	ttyCmd.Stdin, ttyCmd.Stdout, ttyCmd.Stderr = slave, slave, slave
	if err := ttyCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer ttyCmd.Process.Kill()
	chunks := make(chan []byte, 64)
	go func() {
		for {
			buf := make([]byte, 4096)
			n, err := m.Read(buf)
			if n > 0 {
				chunks <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	pipeScript := `i=0; while [ ! -e /tmp/shared ] && [ $i -lt 400 ]; do sleep 0.025; i=$((i+1)); done; ` +
		`echo "shared=$(cat /tmp/shared) uid=$(id -u) pidns=$(readlink /proc/self/ns/pid) netns=$(readlink /proc/self/ns/net) env=$FOO"; ` +
		`ps_seen=0; for c in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $c | grep -q 'while \[ ! -e /tmp/done' && ps_seen=1; done; echo "sees_tty_exec=$ps_seen"; echo yes > /tmp/done`
	out, code := execIn(t, bin, st, "--env", "FOO=bar", name, "--", pipeScript)
	if code != 0 {
		t.Fatalf("pipe exec: exit %d: %s", code, out)
	}
	if err := ttyCmd.Wait(); err != nil {
		t.Fatalf("tty exec: %v", err)
	}
	var ttyOut bytes.Buffer
	for deadline := time.After(5 * time.Second); !strings.Contains(ttyOut.String(), "done=yes"); {
		select {
		case c := <-chunks:
			ttyOut.Write(c)
			continue
		case <-deadline:
		}
		break
	}
	field := func(s, k string) string {
		for _, f := range strings.Fields(s) {
			if v, ok := strings.CutPrefix(f, k+"="); ok {
				return v
			}
		}
		return ""
	}
	tout := ttyOut.String()
	if field(out, "shared") != "shared" || field(out, "sees_tty_exec") != "1" || field(out, "env") != "bar" {
		t.Errorf("pipe exec did not share /tmp or the PID namespace with the tty exec, or lost --env: %q", out)
	}
	if !strings.HasPrefix(field(tout, "tty"), "/dev/pts/") || field(tout, "done") != "yes" {
		t.Errorf("tty exec: %q", tout)
	}
	for _, k := range []string{"uid", "pidns", "netns"} {
		if field(out, k) == "" || field(out, k) != field(tout, k) {
			t.Errorf("%s: pipe exec %q, tty exec %q", k, field(out, k), field(tout, k))
		}
	}
	if field(out, "uid") != "10001" {
		t.Errorf("exec runs as uid %q, want the policy's 10001", field(out, "uid"))
	}
	if hostNet, _ := os.Readlink("/proc/self/ns/net"); hostNet == field(out, "netns") {
		t.Errorf("exec runs in the host's network namespace %s", hostNet)
	}

	// Statuses, signals, reserved variables, the login shell.
	if _, code := execIn(t, bin, st, name, "--", "exit 9"); code != 9 {
		t.Errorf("exit 9: got %d", code)
	}
	if _, code := execIn(t, bin, st, "--no-login-shell", name, "--", "sh", "-c", "kill -TERM $$"); code != 128+15 {
		t.Errorf("SIGTERM: got %d, want 143", code)
	}
	if _, code := execIn(t, bin, st, "--no-login-shell", name, "--", "/nonexistent"); code != 127 {
		t.Errorf("missing command: got %d, want 127", code)
	}
	if out, code := execIn(t, bin, st, "--workdir", "/nonexistent", name, "--", "true"); code != 125 || !strings.Contains(out, "--workdir /nonexistent") {
		t.Errorf("missing --workdir: exit %d (%s), want 125 naming it", code, out)
	}
	if out, code := execIn(t, bin, st, "--workdir", "/tmp", name, "--", "pwd"); code != 0 || strings.TrimSpace(out) != "/tmp" {
		t.Errorf("--workdir /tmp: exit %d, pwd %q", code, out)
	}
	// A directory that exists but the sandbox identity cannot enter is a
	// setup failure naming it too, not a command that is not executable
	// (126: the fork's chdir fails with EACCES, as an exec would).
	locked := filepath.Join(wd, "locked")
	if err := os.Mkdir(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, code := execIn(t, bin, st, "--workdir", locked, name, "--", "true"); code != 125 || !strings.Contains(out, locked) || !strings.Contains(out, "cannot enter") {
		t.Errorf("--workdir %s (root's, 0700): exit %d (%s), want 125 naming it", locked, code, out)
	}
	if out, code := execIn(t, bin, st, "--no-login-shell", "--workdir", locked, name, "--", "/nonexistent"); code != 125 || !strings.Contains(out, locked) {
		t.Errorf("--workdir %s with a missing command: exit %d (%s), want 125 naming the directory (the fork fails there first)", locked, code, out)
	}
	for _, kv := range []string{"HTTPS_PROXY=http://evil.example:1", "SSL_CERT_FILE=/tmp/ca.pem", "PALISADE_SANDBOX=other"} {
		if out, code := execIn(t, bin, st, "--env", kv, name, "--", "true"); code != 2 || !strings.Contains(out, "reserved") {
			t.Errorf("--env %s: exit %d (%s), want a usage error", kv, code, out)
		}
	}
	if out, _ := execIn(t, bin, st, name, "--", "echo $0"); strings.TrimSpace(out) != "bash" && strings.TrimSpace(out) != "sh" {
		t.Errorf("default exec runs %q, want a login shell", out)
	}
	if out, _ := execIn(t, bin, st, "--no-login-shell", name, "--", "echo", "$0"); strings.TrimSpace(out) != "$0" {
		t.Errorf("--no-login-shell went through a shell: %q", out)
	}
}

// delete --expect-id with a wrong id changes nothing (exit 3); with the
// right id the sandbox is gone: processes, cgroup, state.
func TestDeleteExpectID(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, id := detached(t, bin, st, wd)
	before := labelsOf(t, st, name)
	cmd := exec.Command(bin, "delete", "--state-dir", st, "--expect-id", strings.Repeat("0", 32), name)
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 3 || !strings.Contains(string(out), "nothing changed") {
		t.Fatalf("wrong id: exit %d: %s", cmd.ProcessState.ExitCode(), out)
	}
	after := labelsOf(t, st, name)
	if after.Status != before.Status || after.InitPID != before.InitPID || pidGone(before.InitPID, 0) || pidGone(before.CreatorPID, 0) {
		t.Fatalf("a refused delete changed the sandbox: %+v -> %+v", before, after)
	}
	if out, code := execIn(t, bin, st, name, "--", "true"); code != 0 {
		t.Fatalf("the sandbox stopped working after a refused delete: %d %s", code, out)
	}
	cmd = exec.Command(bin, "delete", "--state-dir", st, "--expect-id", id, name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("right id: %v: %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(st, name)); !os.IsNotExist(err) {
		t.Errorf("state directory left: %v", err)
	}
	if !pidGone(before.InitPID, time.Second) || !pidGone(before.CreatorPID, time.Second) {
		t.Errorf("init %d or owner %d still runs", before.InitPID, before.CreatorPID)
	}
	if _, err := os.Stat(cgroupPath(before.Cgroup)); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left: %v", before.Cgroup, err)
	}
	if out, code := execIn(t, bin, st, name, "--", "true"); code != 125 {
		t.Errorf("exec after delete: exit %d (%s), want 125", code, out)
	}
}

// An exec into a sandbox whose working directory its identity can no
// longer enter (here the host made it root's, 0700) fails with 125
// naming the directory: the fork's chdir fails there with EACCES, which
// would otherwise be reported as a command that is not executable (126).
func TestExecWorkdirTheIdentityCannotEnter(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, _ := detached(t, bin, st, wd)
	if out, code := execIn(t, bin, st, name, "--", "true"); code != 0 {
		t.Fatalf("exec before: exit %d (%s)", code, out)
	}
	if err := os.Chown(wd, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wd, 0o700); err != nil {
		t.Fatal(err)
	}
	out, code := execIn(t, bin, st, "--no-login-shell", name, "--", "/bin/true")
	if code != 125 || !strings.Contains(out, wd) || !strings.Contains(out, "uid 10001") {
		t.Errorf("exec into a workdir uid 10001 cannot enter: exit %d (%s), want 125 naming it and the identity", code, out)
	}
}

// exec --expect-id runs the command only in the sandbox with that id:
// with another id, or once the name has passed to a new sandbox, it exits
// 125 and runs nothing (issue 29 item 6: it exited 3, which a command
// returns too); with the right id it runs as a plain exec does.
func TestExecExpectID(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, oldID := detached(t, bin, st, wd)
	ran := func(marker string) bool {
		_, err := os.Stat(filepath.Join(wd, marker))
		return err == nil
	}
	out, code := execIn(t, bin, st, "--expect-id", strings.Repeat("0", 32), name, "--", "echo x > wrong-id")
	if code != 125 || !strings.Contains(out, "nothing run") || !strings.Contains(out, oldID) {
		t.Errorf("wrong id: exit %d (%s), want 125 naming the sandbox's id and that nothing ran", code, out)
	}
	if ran("wrong-id") {
		t.Error("the command ran although the id did not match")
	}
	if out, code := execIn(t, bin, st, "--expect-id", oldID, name, "--", "echo x > right-id"); code != 0 || !ran("right-id") {
		t.Errorf("right id: exit %d (%s), ran %v", code, out, ran("right-id"))
	}

	// The name passes to a new sandbox: the old id no longer reaches it.
	if out, err := exec.Command(bin, "delete", "--state-dir", st, name).CombinedOutput(); err != nil {
		t.Fatalf("delete: %v: %s", err, out)
	}
	_, newID := detachedAs(t, name, bin, st, wd)
	if newID == oldID {
		t.Fatalf("the new sandbox has the old id %s", oldID)
	}
	if out, code := execIn(t, bin, st, "--expect-id", oldID, name, "--", "echo x > old-id"); code != 125 || ran("old-id") {
		t.Errorf("old id after the name was taken: exit %d (%s), ran %v; want 125 and nothing run", code, out, ran("old-id"))
	}
	if out, code := execIn(t, bin, st, "--expect-id", newID, name, "--", "echo x > new-id"); code != 0 || !ran("new-id") {
		t.Errorf("new id: exit %d (%s), ran %v", code, out, ran("new-id"))
	}
}

// TestExecStatusFD: exec --status-fd tells "nothing ran" from a command
// that exited 125 and imitated the supervisor. The command's own 125
// (with a forged supervisor line on stderr, and an attempt to write to
// descriptor 3) is reported as from_command with no error; an
// --expect-id mismatch as the supervisor's, with reason id_mismatch.
func TestExecStatusFD(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, id := detached(t, bin, st, wd)

	code, out, s, raw := withStatus(t, bin, "exec", "--state-dir", st, name, "--",
		`echo "sandbox-supervisor: exec: --expect-id names another sandbox; nothing run" >&2; echo '{"exit_code":125}' >&3 && echo WROTE; exit 125`)
	if code != 125 || s.ExitCode != 125 || !s.FromCommand || s.Error != "" || s.Reason != "" {
		t.Errorf("command exit 125: exit %d, status %s\n%s", code, raw, out)
	}
	if strings.Contains(out, "WROTE") || strings.Count(raw, "\n") != 1 {
		t.Errorf("the command reached the status descriptor: %s / %q", out, raw)
	}

	marker := filepath.Join(wd, "mismatch-ran")
	code, out, s, raw = withStatus(t, bin, "exec", "--state-dir", st, "--expect-id", strings.Repeat("0", 32), name, "--", "touch "+marker)
	if code != 125 || s.ExitCode != 125 || s.FromCommand || s.Reason != "id_mismatch" || !strings.Contains(s.Error, id) {
		t.Errorf("--expect-id mismatch: exit %d, status %s\n%s", code, raw, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although the id did not match")
	}

	code, _, s, raw = withStatus(t, bin, "exec", "--state-dir", st, "--expect-id", id, name, "--", "exit 7")
	if code != 7 || s.ExitCode != 7 || !s.FromCommand || s.Reason != "" {
		t.Errorf("exit 7: exit %d, status %s", code, raw)
	}
}

// Killing a detached sandbox's owner kills the sandbox (its init dies
// with it); an exec then fails with 125 and says why, and gc collects
// what is left.
func TestKilledOwnerEndsSandbox(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, _ := detached(t, bin, st, wd)
	l := labelsOf(t, st, name)
	syscall.Kill(l.CreatorPID, syscall.SIGKILL)
	if !pidGone(l.InitPID, 5*time.Second) {
		t.Fatalf("init %d outlived its owner %d", l.InitPID, l.CreatorPID)
	}
	out, code := execIn(t, bin, st, name, "--", "true")
	if code != 125 || !strings.Contains(out, "not running") {
		t.Errorf("exec into a sandbox whose init is gone: exit %d: %s", code, out)
	}
	if !pidGone(l.CreatorPID, 5*time.Second) {
		t.Fatalf("owner %d not gone after SIGKILL", l.CreatorPID)
	}
	gcOut, gcCode := supervise(t, bin, "gc", "--apply", "--stale-after", "0s", "--state-dir", st)
	if gcCode != 0 || !strings.Contains(gcOut, "removed "+name) {
		t.Fatalf("gc: exit %d: %s", gcCode, gcOut)
	}
	if _, err := os.Stat(filepath.Join(st, name)); !os.IsNotExist(err) {
		t.Errorf("state directory left after gc: %v", err)
	}
	if _, err := os.Stat(cgroupPath(l.Cgroup)); !os.IsNotExist(err) {
		t.Errorf("cgroup left after gc: %v", err)
	}
}

// The main process's final state is in the state directory as soon as it
// ends, and status shows it after the owner is gone.
func TestDetachedFinalState(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	for _, c := range []struct {
		script, outcome, reason string
		code                    int
	}{
		{"exit 0", "completed", "main_process_completed", 0},
		{"exit 7", "failed", "main_process_failed", 7},
		{"kill -KILL $$", "failed", "main_process_failed", 137},
		{"init", "error", "infrastructure_failure: init ended unexpectedly", 125},
		{"notfound", "failed", "main_process_failed", 127},
	} {
		var name string
		if c.script == "notfound" {
			name, _ = detached(t, bin, st, wd, "--", "/nonexistent")
		} else if c.script == "init" {
			// The sandbox's init dies under it: an infrastructure failure,
			// not the main process's result.
			name, _ = detached(t, bin, st, wd)
			syscall.Kill(labelsOf(t, st, name).InitPID, syscall.SIGKILL)
		} else {
			name, _ = detached(t, bin, st, wd, "--", "sh", "-c", c.script)
		}
		var l state.Labels
		deadline := time.Now().Add(5 * time.Second)
		for {
			l = labelsOf(t, st, name)
			if l.Status == state.StatusExited && pidGone(l.CreatorPID, 0) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if l.Status != state.StatusExited || l.ExitCode == nil || *l.ExitCode != c.code || l.Outcome != c.outcome || l.Reason != c.reason {
			t.Errorf("%s: labels %+v", c.script, l)
			continue
		}
		out, code := supervise(t, bin, "status", name, "--state-dir", st)
		if code != 0 || !strings.Contains(out, "outcome:       "+c.outcome) {
			t.Errorf("%s: status after the owner is gone: %d %s", c.script, code, out)
		}
		if _, err := os.Stat(filepath.Join(st, name, "exec.sock")); !os.IsNotExist(err) {
			t.Errorf("%s: exec socket left after the sandbox ended", c.script)
		}
	}
}

// readUntil reads from c until the bytes read end with suffix, or fails
// after d.
func readUntil(t *testing.T, c net.Conn, suffix string, d time.Duration) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	var b []byte
	buf := make([]byte, 64<<10)
	for !bytes.HasSuffix(b, []byte(suffix)) {
		n, err := c.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			t.Fatalf("read %d bytes, then %v; want them to end with %q", len(b), err, suffix)
		}
	}
	return b
}

// attach replays the last 1 MiB of a detached sandbox's output to each
// client, then the live output; one client at a time holds the stdin
// lease (the others' input is dropped), and it passes on when its
// holder leaves while the main process's stdin stays open.
func TestAttachReplayAndStdinLease(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, _ := detached(t, bin, st, wd, "--", "sh", "-c",
		`head -c 1500000 /dev/zero | tr '\0' a; echo; echo ready; read x; echo got-$x; read y; echo got-$y; sleep 5`)
	sock := filepath.Join(st, name, "attach.sock")
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Wait until the whole output is there, then attach twice.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := dial()
		b := readUntil(t, c, "\n", 10*time.Second)
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		rest, _ := io.ReadAll(c)
		c.Close()
		if bytes.HasSuffix(append(b, rest...), []byte("ready\n")) || time.Now().After(deadline) {
			break
		}
	}
	a := dial()
	replay := readUntil(t, a, "ready\n", 10*time.Second)
	if len(replay) != 1<<20 {
		t.Errorf("replay of %d bytes, want the last 1 MiB (%d)", len(replay), 1<<20)
	}
	b := dial()
	readUntil(t, b, "ready\n", 10*time.Second)
	// b does not hold the lease: its line is dropped; a's goes through.
	b.Write([]byte("from-b\n"))
	time.Sleep(100 * time.Millisecond)
	a.Write([]byte("from-a\n"))
	readUntil(t, b, "got-from-a\n", 10*time.Second)
	readUntil(t, a, "got-from-a\n", 10*time.Second)
	// a leaves; the lease passes to b, and stdin is still open.
	a.Close()
	time.Sleep(100 * time.Millisecond)
	b.Write([]byte("second\n"))
	readUntil(t, b, "got-second\n", 10*time.Second)
}

// Signals sent to an exec client reach the exec'd command; a client that
// dies takes its command's process group with it.
func TestExecSignalsAndHangup(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, _ := detached(t, bin, st, wd)
	start := func(script string) (*exec.Cmd, *bufio.Reader) {
		cmd := exec.Command(bin, "exec", "--state-dir", st, "--no-login-shell", name, "--", "/bin/sh", "-c", script)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		r := bufio.NewReader(out)
		if l, err := r.ReadString('\n'); l != "ready\n" {
			t.Fatalf("exec: %q %v", l, err)
		}
		return cmd, r
	}
	cmd, r := start(`trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
	cmd.Process.Signal(syscall.SIGTERM)
	if l, _ := r.ReadString('\n'); l != "got-term\n" {
		t.Errorf("after SIGTERM to the client the command printed %q", l)
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Errorf("exec client exit %d, want the command's 3", code)
	}

	cmd, _ = start(`sleep 30 & echo $! > /tmp/hang.pids; echo $$ >> /tmp/hang.pids; echo ready; wait`)
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, code := execIn(t, bin, st, name, "--", `for p in $(cat /tmp/hang.pids); do kill -0 $p 2>/dev/null && echo alive $p; done; true`)
		if code == 0 && !strings.Contains(out, "alive") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead client's command and its child still run: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A sandbox whose supervisor runs in the foreground (as a systemd unit
// runs it) takes execs too.
func TestExecIntoForegroundRun(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name := testutil.UniqueName("fg-")
	run := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--name", name, "--", "/bin/sh", "-c", "echo main > /tmp/who; sleep 30")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Process.Kill(); run.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, code := execIn(t, bin, st, name, "--", "cat /tmp/who")
		if code == 0 && strings.TrimSpace(out) == "main" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec into the foreground run: %d %s", code, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := exec.Command(bin, "delete", "--state-dir", st, name).CombinedOutput(); err != nil {
		t.Fatalf("delete: %v %s", err, out)
	}
	run.Wait()
	if code := run.ProcessState.ExitCode(); code != 128+15 {
		t.Errorf("the foreground run ended %d after delete, want 143 (its command got SIGTERM)", code)
	}
}

// logs prints a sandbox's own events from its events file; --follow
// prints new ones as they come (here an exec's launch) and ends when the
// sandbox does.
func TestLogsFollow(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	events := filepath.Join(t.TempDir(), "events.jsonl")
	// Another sandbox's line in the same file is not this one's.
	os.WriteFile(events, []byte(`{"class_uid":1007,"activity_name":"Launch","type_name":"Process Activity: Launch","time":1,"metadata":{"uid":"other"},"message":"not mine"}`+"\n"), 0o600)
	name, _ := detached(t, bin, st, wd, "--events", events)
	follow := exec.Command(bin, "logs", "--follow", "--state-dir", st, name)
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follow.Process.Kill(); follow.Wait() })
	lines := make(chan string, 64)
	go func() {
		r := bufio.NewReader(out)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
		}
	}()
	if _, code := execIn(t, bin, st, "--no-login-shell", name, "--", "/bin/true"); code != 0 {
		t.Fatalf("exec: %d", code)
	}
	var got []string
	deadline := time.After(5 * time.Second)
wait:
	for {
		select {
		case l := <-lines:
			got = append(got, l)
			if strings.Contains(l, "Process Activity: Launch") && strings.Contains(l, "true") {
				break wait
			}
		case <-deadline:
			t.Fatalf("logs --follow did not show the exec's launch: %q", got)
		}
	}
	for _, l := range got {
		if strings.Contains(l, "not mine") {
			t.Errorf("logs showed another sandbox's event: %q", l)
		}
	}
	if out, err := exec.Command(bin, "delete", "--state-dir", st, name).CombinedOutput(); err != nil {
		t.Fatalf("delete: %v %s", err, out)
	}
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("logs --follow still runs after the sandbox was deleted")
	}
}

// attachRun runs `attach NAME` with a 20 s bound and returns its output
// and status.
func attachRun(t *testing.T, bin, st, name string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, "attach", "--state-dir", st, name)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("attach %s still running after 20 s; output %q, stderr %q", name, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// Issue 29 item 6: attach exits with the main process's status (it
// exited 0 when the main process exited 7), 128+N for a signal, and
// with the recorded status when the main process had already ended.
func TestAttachExitStatus(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, _ := detached(t, bin, st, wd, "--", "sh", "-c", "echo started; sleep 1; echo ending; exit 7")
	out, errOut, code := attachRun(t, bin, st, name)
	if code != 7 || !strings.Contains(out, "started") || !strings.Contains(out, "ending") {
		t.Errorf("attach: exit %d, output %q, stderr %q; want 7 and the whole output", code, out, errOut)
	}
	// Once the owner is gone (with its attach socket), attach reports
	// the recorded status.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, err := os.Stat(filepath.Join(st, name, "attach.sock"))
		if labelsOf(t, st, name).Status == state.StatusExited && errors.Is(err, fs.ErrNotExist) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, errOut, code := attachRun(t, bin, st, name); code != 7 || !strings.Contains(errOut, "already ended") {
		t.Errorf("attach after the end: exit %d, stderr %q; want 7 saying it already ended", code, errOut)
	}

	name, _ = detached(t, bin, st, wd, "--", "sh", "-c", "sleep 1; kill -TERM $$")
	if _, errOut, code := attachRun(t, bin, st, name); code != 128+int(syscall.SIGTERM) {
		t.Errorf("attach to a main process killed by SIGTERM: exit %d (%s), want %d", code, errOut, 128+int(syscall.SIGTERM))
	}
}

// Issue 29 item 6: a sandbox kept up for exec has no main process:
// attach says so and exits 2 (it hung, silent).
func TestAttachWithoutMainProcess(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, _ := detached(t, bin, st, wd)
	out, errOut, code := attachRun(t, bin, st, name)
	if code != 2 || !strings.Contains(errOut, "no main process") || out != "" {
		t.Errorf("attach to a kept-alive sandbox: exit %d, stdout %q, stderr %q; want 2 saying it has no main process", code, out, errOut)
	}
}
