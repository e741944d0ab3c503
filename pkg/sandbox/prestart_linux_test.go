//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
)

// prestart starts a cgroup and init for o, with o's stdio.
func prestart(t *testing.T, o Options, pids int64) *Prestarted {
	t.Helper()
	p := Prestart(PrestartOptions{Name: o.Name, StateRoot: o.StateRoot, PidsLimit: pids, TTY: o.TTY, InitExe: o.InitExe,
		Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr})
	if p.err != nil {
		t.Fatalf("Prestart: %v", p.err)
	}
	t.Cleanup(p.Abort)
	return p
}

// assertGone checks that a prestarted init is dead and reaped and its
// cgroup removed.
func assertGone(t *testing.T, p *Prestarted) {
	t.Helper()
	if p.init.cmd.ProcessState == nil {
		t.Errorf("prestarted init %d was not reaped", p.init.cmd.Process.Pid)
	} else if err := syscall.Kill(p.init.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("prestarted init %d still exists: %v", p.init.cmd.Process.Pid, err)
	}
	if _, err := cgroup.Open(p.name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cgroup %s of the prestarted init: Open = %v, want not-exist", p.name, err)
	}
	if dir, _ := p.store.Dir(p.name); exists(dir) {
		t.Errorf("state directory %s of the prestarted init survived", dir)
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func stdio(o *Options) (*bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	o.Stdin, o.Stdout, o.Stderr = strings.NewReader(""), &out, &errb
	return &out, &errb
}

// A prestarted cgroup and init are what the run uses: the sandbox has the
// prestarted name, and nothing of it is left afterwards.
func TestPrestartedInitRunsTheSandbox(t *testing.T) {
	f := newFixture(t)
	o := f.options([]string{f.exe, "attack", "hostname"}, []string{"PATH=/usr/bin:/bin"})
	out, errb := stdio(&o)
	o.PidsLimit = 64
	p := prestart(t, o, 64)
	o.Prestarted = p
	res, err := Run(context.Background(), o)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v; stderr %s", res, err, errb)
	}
	if res.Name != p.name || !strings.Contains(out.String(), p.name) {
		t.Fatalf("sandbox %q (hostname output %s) is not the prestarted %q", res.Name, out, p.name)
	}
	assertGone(t, p)
	if ents, _ := os.ReadDir(f.stateDir); len(ents) != 0 {
		t.Fatalf("state left behind: %v", ents)
	}
}

func init() {
	// timerslack prints the timer slack (ns) the command runs with.
	helpers["timerslack"] = func([]string) int {
		b, err := os.ReadFile("/proc/self/timerslack_ns")
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Print(string(b))
		return 0
	}
}

// The init runs with a coarse timer slack (its runtime's monitor thread
// wakes less often), but the command gets the supervisor's own: a
// sandboxed program's sleeps and timeouts are not made coarser.
func TestCommandKeepsTheSupervisorsTimerSlack(t *testing.T) {
	f := newFixture(t)
	o := f.options([]string{f.exe, "timerslack"}, []string{"PATH=/usr/bin:/bin"})
	out, errb := stdio(&o)
	// A slack of this thread's own, neither the kernel's default nor the
	// init's, which Create reads on this goroutine.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	const mine = 70_000
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, mine, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0)
	res, err := Run(context.Background(), o)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v; stderr %s", res, err, errb)
	}
	if got := strings.TrimSpace(out.String()); got != strconv.Itoa(mine) {
		t.Errorf("the command's timer slack is %s ns, want the supervisor's %d (the init's is %d)", got, mine, initTimerSlack)
	}
}

// A preflight failure kills the prestarted init and removes its cgroup:
// the run fails exactly as it would have without it.
func TestPrestartedInitDiesWithAFailedPreflight(t *testing.T) {
	f := newFixture(t)
	o := f.options([]string{f.exe, "exit", "0"}, []string{"PATH=/usr/bin:/bin"})
	stdio(&o)
	p := prestart(t, o, 0)
	o.Prestarted = p
	o.Probe = missing("landlock")
	res, err := Run(context.Background(), o)
	if err == nil || res.ExitCode != ExitSandboxFailed || !strings.Contains(err.Error(), "landlock") {
		t.Fatalf("Run = %+v, %v; want the preflight's 125", res, err)
	}
	assertGone(t, p)
	if ents, _ := os.ReadDir(f.stateDir); len(ents) != 0 {
		t.Fatalf("a failed preflight left state: %v", ents)
	}
}

// A prestart that does not fit the run (other limits) is discarded; the
// run creates its own sandbox.
func TestPrestartThatDoesNotFitIsDiscarded(t *testing.T) {
	f := newFixture(t)
	o := f.options([]string{f.exe, "exit", "0"}, []string{"PATH=/usr/bin:/bin"})
	_, errb := stdio(&o)
	p := prestart(t, o, 100)
	o.Prestarted = p
	o.PidsLimit = 200
	res, err := Run(context.Background(), o)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v; stderr %s", res, err, errb)
	}
	if res.Name == p.name {
		t.Fatalf("run used the prestarted sandbox %s despite other limits", p.name)
	}
	assertGone(t, p)
}

// Abort without a run (the policy did not load, say) cleans up, and is
// idempotent.
func TestPrestartAbort(t *testing.T) {
	f := newFixture(t)
	o := f.options([]string{"true"}, nil)
	stdio(&o)
	p := prestart(t, o, 0)
	// Before anything else exists, the state directory does: a crash
	// now leaves something gc can find.
	if dir, _ := p.store.Dir(p.name); !exists(dir) {
		t.Fatalf("prestart made no state directory %s", dir)
	}
	if _, err := cgroup.Open(p.name); err != nil {
		t.Fatalf("prestart made no cgroup: %v", err)
	}
	done := make(chan struct{})
	go func() {
		p.Abort()
		p.Abort()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Abort hangs")
	}
	assertGone(t, p)
	// A prestart that could not happen reports why and aborts as a no-op.
	bad := Prestart(PrestartOptions{Name: "../x"})
	if bad.err == nil {
		t.Fatal("Prestart accepted an invalid name")
	}
	bad.Abort()
	var nilp *Prestarted
	nilp.Abort()
}

// valueWriter is an io.Writer of an uncomparable type (== would panic).
type valueWriter struct{ b []byte }

func (valueWriter) Write(p []byte) (int, error) { return len(p), nil }

func TestSameStream(t *testing.T) {
	var a, b bytes.Buffer
	// Two files of their own: os.Stdout and os.Stderr are one *os.File
	// under go test -json (the testing package points os.Stderr at
	// os.Stdout to keep the output in order).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, c := range []struct {
		x, y any
		want bool
	}{
		{&a, &a, true},
		{&a, &b, false},
		{nil, nil, true},
		{&a, nil, false},
		{w, w, true},
		{r, w, false},
		{valueWriter{}, valueWriter{}, false},
	} {
		if got := same(c.x, c.y); got != c.want {
			t.Errorf("same(%T, %T) = %v, want %v", c.x, c.y, got, c.want)
		}
	}
}
