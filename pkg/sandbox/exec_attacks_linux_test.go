//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
