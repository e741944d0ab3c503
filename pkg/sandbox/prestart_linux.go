//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/state"
)

// initTimerSlack is the timer slack (ns) the init runs with. The Go
// runtime's monitor thread (sysmon) sleeps 20 µs at a time while the
// process is busy; with the kernel's default slack of 50 µs it woke
// every 70-90 µs through the init's whole start, each time a context
// switch that displaced the init's own work on a busy CPU (about a third
// of a start's nanosleep calls and a seventh of its context switches).
// The init waits on no timer of its own that this could delay (the
// reaper, the control socket and the exec socket wait for events), and
// every command it starts gets the supervisor's slack back
// (restoreTimerSlack).
const initTimerSlack = 1_000_000

// defaultTimerSlack is the kernel's default timer slack (ns).
const defaultTimerSlack = 50_000

// timerSlackEnv passes the supervisor's timer slack to the init.
const timerSlackEnv = "PALISADE_TIMERSLACK_NS"

// An initProc is the sandbox's init being started: the init's binary
// (InitBinaryName) in new mount, PID, IPC, UTS and network namespaces,
// inside the sandbox cgroup, holding the other end of the control socket.
// It does nothing until the supervisor sends its configuration.
type initProc struct {
	cmd      *exec.Cmd
	exe      string // the init's binary, for messages
	ctl      *channel
	initEnd  *os.File
	startErr chan error
	joined   bool
	err      error // the start's result, once joined
}

// initOpenedForTest, when set, runs once startInit has opened and
// checked the init's binary, before the fork. Only a test sets it (to
// replace the file at the path there).
var initOpenedForTest func(path string)

// startInit starts the init in cg: exe ("" = DefaultInitExe), opened
// and checked by openInitBinary, executed through that descriptor. With
// background set it does not wait for the fork and exec to finish (the
// caller joins it once it has the configuration ready); otherwise the
// init has been started when it returns.
func startInit(cg *cgroup.Group, exe string, tty bool, stdin io.Reader, stdout, stderr io.Writer, background bool) (*initProc, error) {
	if exe == "" {
		var err error
		if exe, err = DefaultInitExe(); err != nil {
			return nil, err
		}
	}
	bin, err := openInitBinary(exe)
	if err != nil {
		return nil, err
	}
	if initOpenedForTest != nil {
		initOpenedForTest(exe)
	}
	ctl, initEnd, err := socketPair()
	if err != nil {
		bin.Close()
		return nil, err
	}
	// The init is forked with a coarse timer slack (initTimerSlack) and
	// told the supervisor's own, which its spawner thread takes back
	// before it forks any command.
	slack, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || slack <= 0 {
		slack = defaultTimerSlack
	}
	cmd := &exec.Cmd{
		// The binary checked above, by descriptor (initBinFD in the
		// child): what is at exe by the time of the exec is not run.
		Path: fmt.Sprintf("/proc/self/fd/%d", initBinFD),
		Args: []string{"palisade-init", InitCommand},
		// The init needs no parallelism; one P starts measurably faster.
		Env:        []string{"GOMAXPROCS=1", timerSlackEnv + "=" + strconv.Itoa(slack)},
		Stdin:      stdin,
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: []*os.File{initEnd, bin},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWNET,
			// The init, and with it the whole PID namespace, dies with
			// the supervisor.
			Pdeathsig: unix.SIGKILL,
		},
	}
	if tty {
		// The command's terminal is the sandbox's own PTY; the init keeps
		// no handle on the caller's terminal.
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, stderr
	}
	p := &initProc{cmd: cmd, exe: exe, ctl: ctl, initEnd: initEnd, startErr: make(chan error, 1)}
	// The init starts inside the sandbox cgroup (no migration afterwards).
	start := func() error {
		// The fork inherits the forking thread's timer slack: this
		// thread's is raised for the fork only (StartIn keeps the
		// goroutine on this thread while it is locked here).
		runtime.LockOSThread()
		unix.Prctl(unix.PR_SET_TIMERSLACK, initTimerSlack, 0, 0, 0)
		err := cg.StartIn(cmd)
		unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0)
		runtime.UnlockOSThread()
		bin.Close()
		return err
	}
	if !background {
		p.startErr <- start()
		return p, nil
	}
	go func() { p.startErr <- start() }()
	return p, nil
}

// join waits for the start to finish and returns its error.
func (p *initProc) join() error {
	if !p.joined {
		p.joined = true
		p.err = <-p.startErr
		p.initEnd.Close()
		if p.err != nil {
			p.err = fmt.Errorf("start %s: %w", p.exe, p.err)
		}
	}
	return p.err
}

// kill ends an init that never got its configuration and reaps it.
func (p *initProc) kill() {
	if p.join() == nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
	p.ctl.close()
}

// Prestarted is a sandbox cgroup and init started before the policy was
// loaded, handed to Run through Options.Prestarted. A fresh process's
// start-up (the Go runtime) is the longest single step of a sandbox start;
// a prestarted init boots while the supervisor loads the policy, runs the
// preflight and records the sandbox. Nothing runs in it until Run sends a
// configuration: if the preflight or anything else fails, Abort kills it
// and removes the cgroup, and the run fails as it would have anyway.
type Prestarted struct {
	mu     sync.Mutex
	opts   PrestartOptions
	limits cgroup.Limits
	name   string
	store  *state.Store
	cg     *cgroup.Group
	init   *initProc
	err    error // why nothing was prestarted (Run then starts normally)
	done   bool  // taken by Run or aborted
}

// Prestart creates the sandbox's cgroup and starts its init. It never
// fails outright: when it cannot prestart (bad limits, a taken name, a
// missing cgroup controller, not root) Run creates the sandbox the normal
// way, after its preflight, and reports the problem there.
func Prestart(o PrestartOptions) *Prestarted {
	// The os package checks, once, that pidfds work before its first
	// process start, with a test fork of its own (~0.3 ms). Let it happen
	// on the other CPU while the cgroup is created, not in the init's
	// start.
	go warmPidfd()
	p := &Prestarted{opts: o}
	p.limits, p.err = sandboxLimits(o.Profile, o.PidsLimit, o.Memory, o.CPUs)
	if p.err != nil {
		return p
	}
	// The state directory comes first: whatever is made for a sandbox
	// afterwards has a state directory for gc to find.
	if p.store, p.err = state.Open(o.StateRoot); p.err != nil {
		return p
	}
	if p.name, p.err = p.store.Reserve(o.Name); p.err != nil {
		return p
	}
	if p.cg, p.err = cgroup.New(p.name, p.limits); p.err != nil {
		p.store.Remove(p.name)
		return p
	}
	// The init is forked here, on the calling goroutine, before anything
	// else: its start is the longest step of a sandbox start, and from a
	// new goroutine the fork waited 0.5-1 ms for a scheduler P (the
	// other one was held by the pidfd check's vfork, or by the policy
	// load this returns to).
	if p.init, p.err = startInit(p.cg, o.InitExe, o.TTY, o.Stdin, o.Stdout, o.Stderr, false); p.err != nil {
		p.cg.Destroy()
		p.cg = nil
		p.store.Remove(p.name)
	}
	return p
}

// take hands the prestarted cgroup and init to Run when they fit o.
func (p *Prestarted) take(o Options, lim cgroup.Limits) (string, *cgroup.Group, *initProc, bool) {
	if p == nil {
		return "", nil, nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fits := p.err == nil && !p.done && p.limits == lim && p.opts.TTY == o.TTY &&
		p.store.Root() == stateRoot(o.StateRoot) &&
		p.opts.InitExe == o.InitExe && (o.Name == "" || o.Name == p.name) &&
		same(p.opts.Stdin, o.Stdin) && same(p.opts.Stdout, o.Stdout) && same(p.opts.Stderr, o.Stderr)
	if !fits {
		p.abortLocked()
		return "", nil, nil, false
	}
	p.done = true
	return p.name, p.cg, p.init, true
}

// stateRoot is the directory state.Open uses for root.
func stateRoot(root string) string {
	if root == "" {
		root = state.DefaultRoot
	}
	// As state.Open resolves it.
	if r, err := fsutil.ResolveTrusted(root); err == nil {
		return r
	}
	return filepath.Clean(root)
}

// same reports whether two stdio values are the same stream. Values of an
// uncomparable type (which == would panic on) never are.
func same(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// Abort kills a prestarted init that Run did not take and removes its
// cgroup. It is safe to call more than once, and after Run.
func (p *Prestarted) Abort() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abortLocked()
}

func (p *Prestarted) abortLocked() {
	if p.done {
		return
	}
	p.done = true
	if p.init != nil {
		p.init.kill()
	}
	if p.cg != nil {
		p.cg.Destroy()
	}
	if p.err == nil {
		p.store.Remove(p.name)
	}
}

// sandboxLimits are the cgroup limits of a run: the bounded-tmpfs
// profile's CPUs and memory (never together with explicit ones), and the
// pids limit (DefaultPidsLimit when unset).
func sandboxLimits(profile string, pids, mem int64, cpus float64) (cgroup.Limits, error) {
	if profile == ProfileBoundedTmpfs {
		if mem != 0 || cpus != 0 {
			return cgroup.Limits{}, errors.New("--cpus/--memory cannot be combined with --profile bounded-tmpfs")
		}
		mem, cpus = BoundedMemory, BoundedCPUs
	}
	if pids <= 0 {
		pids = DefaultPidsLimit
	}
	return cgroup.Limits{Pids: pids, MemoryBytes: mem, CPUs: cpus}, nil
}

// warmPidfd makes the os package run its one-time pidfd check.
func warmPidfd() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Release()
	}
}
