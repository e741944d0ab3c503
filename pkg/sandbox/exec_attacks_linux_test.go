//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// Attacks on what an exec does as root inside a sandbox the agent has
// already had time to prepare. Unlike a run's start, an exec comes after
// the agent: anything the init touches on its behalf (the bounded-tmpfs
// storage preflight) is agent-controlled ground.

func init() {
	// pgdata-symlink TARGET replaces the bounded storage's mac-test-pgdata
	// directory with a symlink to TARGET.
	helpers["pgdata-symlink"] = func(args []string) int {
		p := filepath.Join(BoundedStoragePath, "mac-test-pgdata")
		if err := os.RemoveAll(p); err != nil {
			return 1
		}
		if err := os.Symlink(args[0], p); err != nil {
			return 1
		}
		return 0
	}
}

// keptAlive creates and starts a kept-alive sandbox from o and returns it
// with a function that execs args into it (no login shell).
func (f *fixture) keptAlive(ctx context.Context, o Options) (*Sandbox, func(args ...string) (string, Result, error)) {
	f.t.Helper()
	o.Args, o.KeepAlive = nil, true
	var errb bytes.Buffer
	o.Stdin, o.Stdout, o.Stderr = strings.NewReader(""), &errb, &errb
	// Each sandbox gets its own events sink: one that is still alive
	// (destroyed at cleanup) reports denials from its own goroutine.
	o.Events = NewOCSFEvents(ocsf.NewWriter(io.Discard), "agent-test", "test", nil)
	s, err := Create(ctx, o)
	f.t.Cleanup(s.Destroy)
	if err != nil {
		f.t.Fatalf("Create: %v\nstderr: %s", err, errb.String())
	}
	if err := s.Start(ctx); err != nil {
		f.t.Fatalf("Start: %v\nstderr: %s", err, errb.String())
	}
	return s, func(args ...string) (string, Result, error) {
		var out bytes.Buffer
		res, err := Exec(ctx, ExecOptions{StateRoot: o.StateRoot, Name: s.Name(), Args: args, NoLoginShell: true,
			Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
		return out.String(), res, err
	}
}

// The storage preflight reruns, as root, for every exec. The agent
// replaces mac-test-pgdata with a symlink to a root-owned directory it
// cannot write (here one in its read-write workdir, a host directory):
// the next exec must neither chown nor create anything through it, and
// must refuse to start the command on storage that is not what the
// preflight promises.
func TestExecStoragePreflightFollowsNoSymlink(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	victim := filepath.Join(f.workdir, "root-owned")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(victim, "made-by-root")
	env, err := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t", Profile: ProfileBoundedTmpfs})
	if err != nil {
		t.Fatal(err)
	}
	o := f.options(nil, env)
	o.Profile = ProfileBoundedTmpfs
	for _, target := range []string{victim, missing} {
		_, exec := f.keptAlive(ctx, o)
		if out, res, err := exec(f.exe, "pgdata-symlink", target); err != nil || res.ExitCode != 0 {
			t.Fatalf("plant the symlink to %s: exit %d, %v: %s", target, res.ExitCode, err, out)
		}
		out, res, err := exec("/bin/true")
		if err == nil && res.ExitCode == 0 {
			t.Errorf("exec ran on storage whose mac-test-pgdata is a symlink to %s", target)
		} else if err == nil || !strings.Contains(err.Error(), "mac-test-pgdata") {
			t.Errorf("exec refused without naming mac-test-pgdata: exit %d, %v: %s", res.ExitCode, err, out)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(victim, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 || st.Gid != 0 {
			t.Fatalf("the exec's preflight chowned %s (a host directory) to %d:%d through the agent's symlink", victim, st.Uid, st.Gid)
		}
		if _, err := os.Lstat(missing); err == nil {
			t.Fatalf("the exec's preflight created %s as root through the agent's symlink", missing)
		}
	}
}

// An exec's caller hands it stdin, stdout and stderr: often the
// operator's terminal, or a CI job's log. A process the exec started and
// detached (setsid, in the background) outlives the exec in a long-lived
// sandbox; it must not keep those descriptors: after Exec returns it can
// neither read what is typed to the caller next (the operator's next
// password) nor write into the caller's output (forging a later
// command's result).
func TestExecLeavesNoCallerDescriptorBehind(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env, err := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := f.keptAlive(ctx, f.options(nil, env))
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	stolen := filepath.Join(f.workdir, "stolen")
	script := `exec 3<&0 4>&1; setsid sh -c 'sleep 2; read l <&3; echo "$l" > ` + stolen + `; echo LATE >&4' </dev/null >/dev/null 2>&1 & echo done`
	res, err := Exec(ctx, ExecOptions{StateRoot: f.stateDir, Name: s.Name(), Args: []string{"/bin/sh", "-c", script},
		NoLoginShell: true, Stdin: inR, Stdout: outW, Stderr: outW})
	outW.Close()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: exit %d, %v", res.ExitCode, err)
	}
	// What the caller's terminal gets after the exec returned.
	if _, err := inW.Write([]byte("typed-after-the-exec\n")); err != nil {
		t.Fatal(err)
	}
	outR.SetReadDeadline(time.Now().Add(5 * time.Second))
	out, _ := io.ReadAll(outR)
	if strings.Contains(string(out), "LATE") {
		t.Errorf("a process the exec left behind wrote to the caller's stdout after Exec returned: %q", out)
	}
	// The process left behind reads its stdin 2 s after starting and
	// records what it got.
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if b, err = os.ReadFile(stolen); err == nil && len(b) > 0 {
			break
		}
	}
	if len(b) == 0 {
		t.Fatalf("the process left behind never recorded its read of stdin (%v)", err)
	}
	if strings.Contains(string(b), "typed-after-the-exec") {
		t.Errorf("a process the exec left behind read the caller's stdin after Exec returned: %q", b)
	}
	if !strings.HasPrefix(string(out), "done") {
		t.Errorf("the exec's own output: %q", out)
	}
}
