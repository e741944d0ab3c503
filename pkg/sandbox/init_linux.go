//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/containerd/console"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/caps"
	"github.com/palisade-sandbox/palisade/pkg/landlock"
)

// lockThreadForever pins the calling goroutine to its OS thread and never
// unpins it: the thread carries per-thread state (fsuid, capabilities,
// Landlock, seccomp) that must not leak to other goroutines, so it exits
// with the goroutine.
func lockThreadForever() { runtime.LockOSThread() }

// weakenForTest, when set, makes the init skip one step of the drop so
// that a test can check that verifyConfined notices, kills the command and
// fails the start: "seccomp" skips installing the filter, "identity" forks
// the command as root (uid and gid 0), "cgroupns" leaves the spawner in
// the cgroup namespace the init was started in. Only the package's
// TestMain sets it (in the init copy of the test binary); no production
// path does.
var weakenForTest string

// initFail is a setup failure with the exit status the supervisor reports.
type initFail struct {
	stage string
	code  int
	err   error
}

func (e *initFail) Error() string { return e.stage + ": " + e.err.Error() }

func fail(stage string, code int, err error) error { return &initFail{stage, code, err} }

// initName is the init's process name (comm), NUL-terminated.
var initName = []byte("palisade-init\x00")

// RunInit is the in-sandbox init. It never returns: it exits with the
// command's status, or reports a setup failure on the control socket and
// exits with the matching status.
func RunInit() {
	// The supervisor executed this binary through initBinFD (which made
	// its name "4"); the init has no use for the descriptor.
	unix.Close(initBinFD)
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&initName[0])), 0, 0, 0)
	ctl, err := newChannel(initFD)
	if err != nil {
		fmt.Fprintf(os.Stderr, "palisade init: control socket: %v\n", err)
		os.Exit(ExitSandboxFailed)
	}
	code := runInit(ctl)
	os.Exit(code)
}

func runInit(ctl *channel) int {
	// Catch forwarded signals from the start: the Go runtime's default
	// action would otherwise end the init (and the sandbox) on a SIGTERM
	// that arrives before the command runs. They are delivered to the
	// command once it exists.
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, append([]os.Signal{unix.SIGCHLD}, forwarded...)...)
	// The cgroup namespace the init was started in (the supervisor's):
	// no command may be left in it. Read before the mounts, from the
	// host's /proc, where the supervisor already looked the init up.
	outerNS, nsErr := cgroupNSOf("self")
	report := func(err error) int {
		var f *initFail
		if !errors.As(err, &f) {
			f = &initFail{stage: "init", code: ExitSandboxFailed, err: err}
		}
		ctl.send(Message{Type: MsgError, Stage: f.stage, Code: f.code, Msg: f.err.Error()}, -1)
		return f.code
	}
	// Signals may be forwarded from now on. Until this message the
	// supervisor holds them back: as PID 1 of its namespace the init
	// drops a signal whose disposition is still the default (before the
	// Go runtime installs its handlers), and the runtime's handler would
	// end the init on one that arrives before Notify.
	if err := ctl.send(Message{Type: MsgReady}, -1); err != nil {
		return ExitSandboxFailed
	}
	// Nothing the operator's shell leaked to the supervisor may reach the
	// sandbox: every fd above 2 except the control socket closes on exec.
	if err := unix.CloseRange(initFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return report(fail("fds", ExitSandboxFailed, err))
	}
	m, wdfd, err := ctl.recv()
	if err != nil || m.Type != MsgConfig || m.Config == nil || m.Config.Spec == nil {
		return report(fail("config", ExitSandboxFailed, fmt.Errorf("no configuration from supervisor: %v", err)))
	}
	cfg := m.Config
	cfg.workdirFD = wdfd
	if cfg.Timing {
		ctl.send(Message{Type: MsgLog, Level: "debug", Msg: "init has its configuration"}, -1)
	}
	// The exec socket may come before "go".
	execLn := -1
	for {
		m, fd, err := ctl.recv()
		if err != nil {
			// The supervisor went away or aborted: create nothing.
			return ExitSandboxFailed
		}
		if m.Type == MsgExecSocket && fd >= 0 && execLn < 0 {
			execLn = fd
			continue
		}
		if fd >= 0 {
			unix.Close(fd)
		}
		if m.Type != MsgGo {
			return ExitSandboxFailed
		}
		break
	}
	if nsErr != nil {
		return report(fail("namespaces", ExitSandboxFailed, nsErr))
	}
	rp := newReaper()
	conf, sp, cmdPID, done, err := setup(ctl, cfg, rp, outerNS)
	if err != nil {
		return report(err)
	}
	ctl.send(Message{Type: MsgConfined, Confinement: conf}, -1)
	ctl.send(Message{Type: MsgStarted, PID: cmdPID}, -1)
	if execLn >= 0 {
		go serveExec(execLn, cfg, sp, rp)
	}
	return waitMain(ctl, cmdPID, done, sigs)
}

// setup makes the sandbox's host (mounts, hostname, loopback), confines
// the spawning thread (whose cgroup namespace is the sandbox's), and
// starts the main command from it (none when the sandbox is kept alive).
// It returns what was applied, the spawner execs use, and the main
// command's pid (0 when kept alive) and the channel that receives its
// status.
func setup(ctl *channel, cfg *InitConfig, rp *reaper, outerNS uint64) (*Confinement, *spawner, int, chan unix.WaitStatus, error) {
	s := cfg.Spec
	t0 := time.Now()
	var steps []string
	mark := func(step string) {
		if cfg.Timing {
			steps = append(steps, fmt.Sprintf("%s=%dus", step, time.Since(t0).Microseconds()))
		}
	}
	defer func() {
		if cfg.Timing {
			ctl.send(Message{Type: MsgLog, Level: "debug", Msg: "init timing: " + strings.Join(steps, " ")}, -1)
		}
	}()
	nmounts, wdMount, err := setupMounts(s, cfg.workdirFD)
	if err != nil {
		return nil, nil, 0, nil, fail("mounts", ExitSandboxFailed, err)
	}
	if cfg.workdirFD >= 0 {
		unix.Close(cfg.workdirFD)
	}
	if wdMount >= 0 && cfg.Landlock != nil {
		// Landlock grants the working directory through the descriptor
		// of what was bound, not by name (confineThread closes it).
		cfg.Landlock.Descriptors = map[string]int{s.Process.Cwd: wdMount}
	} else if wdMount >= 0 {
		unix.Close(wdMount)
	}
	mark("mounts")
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return nil, nil, 0, nil, fail("hostname", ExitSandboxFailed, err)
		}
	}
	if err := loopbackUp(); err != nil {
		return nil, nil, 0, nil, fail("network", ExitSandboxFailed, err)
	}
	// Nothing in the sandbox may ptrace or read the init, nor dump core.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, nil, 0, nil, fail("dumpable", ExitSandboxFailed, err)
	}
	for _, rl := range s.Process.Rlimits {
		if rl.Type == "RLIMIT_CORE" {
			lim := unix.Rlimit{Cur: rl.Soft, Max: rl.Hard}
			if err := unix.Setrlimit(unix.RLIMIT_CORE, &lim); err != nil {
				return nil, nil, 0, nil, fail("rlimits", ExitSandboxFailed, err)
			}
		}
	}
	uid, gid := s.Process.User.UID, s.Process.User.GID
	if cfg.StorageCheck != "" {
		if err := checkStorage(cfg.StorageCheck, uid, gid); err != nil {
			return nil, nil, 0, nil, fail("storage-preflight", ExitSandboxFailed, err)
		}
	}
	mark("host")
	// Nothing of the sandbox's Landlock domain exists before the
	// supervisor reads its denials: the spawning thread is confined only
	// after "start".
	if err := waitStart(ctl); err != nil {
		return nil, nil, 0, nil, fail("init", ExitSandboxFailed, err)
	}
	mark("start")
	keepAlive := len(s.Process.Args) == 0
	var path string
	var stdio [3]*os.File
	var pty *os.File
	if !keepAlive {
		if path, err = lookPath(s.Process.Args[0], s.Process.Env); err != nil {
			return nil, nil, 0, nil, fail("exec", ExitNotFound, err)
		}
		if stdio, pty, err = commandIO(ctl, s); err != nil {
			return nil, nil, 0, nil, fail("tty", ExitSandboxFailed, err)
		}
	}
	conf := &Confinement{UID: uid, GID: gid, Mounts: nmounts, Seccomp: cfg.Seccomp}
	for _, ns := range s.Linux.Namespaces {
		conf.Namespaces = append(conf.Namespaces, string(ns.Type))
	}
	sp, err := startSpawner(cfg, conf, outerNS)
	if err != nil {
		if pty != nil {
			pty.Close()
		}
		return nil, nil, 0, nil, err
	}
	mark("confined")
	if keepAlive {
		return conf, sp, 0, nil, nil
	}
	pid, done, err := rp.start(func() (int, error) { return sp.spawn(path, s.Process, stdio, pty != nil) })
	mark("spawn")
	if pty != nil {
		pty.Close() // the command holds the slave; the supervisor the master
	}
	if err != nil {
		return nil, nil, 0, nil, err
	}
	if err := verifyConfined(pid, uid, gid, cfg.Seccomp, sp.ns); err != nil {
		return nil, nil, 0, nil, fail("verify", ExitSandboxFailed, err)
	}
	mark("verify")
	return conf, sp, pid, done, nil
}

// waitStart waits for the supervisor's MsgStart.
func waitStart(ctl *channel) error {
	m, fd, err := ctl.recv()
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		return fmt.Errorf("waiting for start: %w", err)
	}
	if m.Type != MsgStart {
		return fmt.Errorf("waiting for start: got %q", m.Type)
	}
	return nil
}

// verifyConfined checks after the fact that the kernel's view of the
// command shows the drop (identity, all five capability sets empty,
// no_new_privs, seccomp filter mode) and that it is in the sandbox's
// cgroup namespace (ns). On a mismatch it kills the command and returns
// the reason. A command that already exited (a zombie) has nothing left
// to check.
func verifyConfined(pid int, uid, gid uint32, seccomp bool, ns cgroupNS) error {
	st, err := caps.ReadStatus(pid)
	if err == nil {
		err = caps.Verify(st, caps.Expect{UID: uid, GID: gid, Seccomp: seccomp})
	}
	if err == nil {
		err = ns.check(pid)
	}
	if err != nil && !exitedAlready(pid) {
		unix.Kill(pid, unix.SIGKILL)
		return err
	}
	return nil
}

// exitedAlready reports whether pid is a zombie whose status no longer
// carries credentials worth checking.
func exitedAlready(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// commandIO returns the command's stdin, stdout and stderr. With a
// terminal it opens a PTY from the sandbox's own devpts and sends the
// master to the supervisor.
func commandIO(ctl *channel, s *specs.Spec) ([3]*os.File, *os.File, error) {
	if !s.Process.Terminal {
		return [3]*os.File{os.Stdin, os.Stdout, os.Stderr}, nil, nil
	}
	master, slavePath, err := console.NewPty()
	if err != nil {
		return [3]*os.File{}, nil, fmt.Errorf("open pty: %w", err)
	}
	slave, err := os.OpenFile(slavePath, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return [3]*os.File{}, nil, fmt.Errorf("open %s: %w", slavePath, err)
	}
	if err := unix.Fchown(int(slave.Fd()), int(s.Process.User.UID), int(s.Process.User.GID)); err != nil {
		return [3]*os.File{}, nil, fmt.Errorf("chown %s: %w", slavePath, err)
	}
	if s.Process.ConsoleSize != nil {
		master.Resize(console.WinSize{Height: uint16(s.Process.ConsoleSize.Height), Width: uint16(s.Process.ConsoleSize.Width)})
	}
	mf := os.NewFile(master.Fd(), "ptmx")
	if err := ctl.send(Message{Type: MsgPTY}, int(mf.Fd())); err != nil {
		return [3]*os.File{}, nil, err
	}
	master.Close()
	return [3]*os.File{slave, slave, slave}, slave, nil
}

// A spawner is the init's confined thread: a dedicated, locked OS thread
// that applied the irreversible confinement once (capability bounding
// set, no_new_privs, Landlock, seccomp) and forks every command of the
// sandbox — the main one and each exec — so that all of them inherit the
// same Landlock domain and seccomp filter. The init's other threads keep
// their privileges for reaping, signal forwarding and exec requests; the
// Go runtime creates new threads from its template thread, never from a
// locked one, so the confinement cannot spread to them (seccomp does, by
// TSYNC).
//
// The sandbox's cgroup namespace is this thread's own too: a namespace
// made by unshare is the calling thread's only. The init's main goroutine
// had made it, on whichever thread the scheduler gave it, and in about
// one start in thirty the spawner ran on another thread, still in the
// supervisor's namespace, so the command saw the host's cgroup paths.
type spawner struct {
	reqs chan spawnReq
	ns   cgroupNS
}

type spawnReq struct {
	path  string
	proc  *specs.Process
	stdio [3]*os.File
	tty   bool
	res   chan spawnRes
}

type spawnRes struct {
	pid int
	err error
}

// startSpawner confines a new locked thread, in a cgroup namespace of
// its own (not outerNS, the one the init was started in), and returns
// once it is ready to fork, or why it could not be confined. conf
// receives the Landlock result and the seccomp rule count.
func startSpawner(cfg *InitConfig, conf *Confinement, outerNS uint64) (*spawner, error) {
	sp := &spawner{reqs: make(chan spawnReq), ns: cgroupNS{outer: outerNS}}
	ready := make(chan error, 1)
	go func() {
		lockThreadForever()
		// Every command is forked from this thread and inherits its
		// timer slack: the supervisor's, not the init's coarse one.
		if err := restoreTimerSlack(); err != nil {
			ready <- fail("timerslack", ExitSandboxFailed, err)
			return
		}
		// The init was started inside the sandbox's cgroup, which
		// becomes the namespace's root.
		if weakenForTest != "cgroupns" {
			if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
				ready <- fail("namespaces", ExitSandboxFailed, fmt.Errorf("unshare cgroup namespace: %w", err))
				return
			}
		}
		if err := confineThread(cfg, conf); err != nil {
			ready <- err
			return // the thread, half-confined, exits with the goroutine
		}
		ready <- nil
		for r := range sp.reqs {
			pid, err := forkConfined(r.path, r.proc, r.stdio, r.tty)
			r.res <- spawnRes{pid, err}
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return sp, nil
}

// cgroupNS is the cgroup namespace a command of the sandbox must not be
// in: the one the init was started in (outer), the supervisor's. The
// spawner's own is the only other one the init makes. (Only /proc/PID
// entries are looked up, never a thread's: a thread's /proc entries are
// flushed when it exits, which on a loaded host made the reaping
// parent's wait4 spin for milliseconds.)
type cgroupNS struct{ outer uint64 }

// cgroupNSOf is the cgroup namespace of /proc/PROC (a pid or "self").
func cgroupNSOf(proc string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+proc+"/ns/cgroup", &st); err != nil {
		return 0, fmt.Errorf("cgroup namespace: %w", err)
	}
	return st.Ino, nil
}

// check refuses a command (pid) outside the sandbox's cgroup namespace.
// A command whose namespaces are gone passes: it is exiting (do_exit
// released them before it became a zombie) or was reaped, and runs
// nothing any more. (A command that exits at once was refused so, with
// 125, in 1 start in 300 under load.)
func (ns cgroupNS) check(pid int) error {
	got, err := cgroupNSOf(strconv.Itoa(pid))
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if got == ns.outer {
		return fmt.Errorf("cgroup namespace %d is the one the init was started in, not the sandbox's", got)
	}
	return nil
}

// spawn forks and executes path with proc's arguments, environment,
// directory and identity from the confined thread.
func (sp *spawner) spawn(path string, proc *specs.Process, stdio [3]*os.File, tty bool) (int, error) {
	r := spawnReq{path: path, proc: proc, stdio: stdio, tty: tty, res: make(chan spawnRes, 1)}
	sp.reqs <- r
	res := <-r.res
	if res.err != nil {
		res.err = blameWorkdir(res.err, proc)
	}
	return res.pid, res.err
}

// blameWorkdir turns a failed start into a working-directory failure when
// that is what it was. The fork changes into proc.Cwd as the sandbox
// identity before it executes the command, and a directory that identity
// cannot enter fails it with the same errno as a command that is missing
// (ENOENT, 127) or not executable (EACCES, 126); the init's own checks of
// the directory run as root. So a start that failed so is retried as a
// plain chdir with the identity's credentials: if that fails, the start
// failed at the directory (125, naming it and the identity).
func blameWorkdir(err error, proc *specs.Process) error {
	var f *initFail
	if !errors.As(err, &f) || (f.code != ExitNotFound && f.code != ExitNotExecutable) || proc.Cwd == "" {
		return err
	}
	if denied := checkEnter(proc.Cwd, proc.User.UID, proc.User.GID); denied != nil {
		return fail("workdir", ExitSandboxFailed, denied)
	}
	return err
}

// checkEnter reports whether the sandbox identity can change into dir,
// by doing it: a chdir with the identity's filesystem credentials on a
// thread with a working directory of its own, so that the kernel's own
// checks (modes, ACLs) decide. nil when it can, or when that cannot be
// told (the thread could not take the identity).
func checkEnter(dir string, uid, gid uint32) error {
	cdErr, setupErr := runAsIdentity(uid, gid, func() error {
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return nil // cannot tell without changing the init's directory
		}
		return unix.Chdir(dir)
	})
	if setupErr != nil || cdErr == nil {
		return nil
	}
	return fmt.Errorf("working directory %s: the sandbox identity (uid %d, gid %d) cannot enter it: %w", dir, uid, gid, cdErr)
}

// confineThread applies the irreversible confinement to the calling,
// locked thread.
func confineThread(cfg *InitConfig, conf *Confinement) error {
	// Landlock paths are opened now, as root, before the drop.
	var rs *landlock.Ruleset
	if cfg.Landlock != nil {
		var err error
		rs, err = landlock.Build(*cfg.Landlock)
		for _, fd := range cfg.Landlock.Descriptors {
			unix.Close(fd)
		}
		if err != nil {
			return fail("landlock", ExitSandboxFailed, err)
		}
		if rs == nil && cfg.Landlock.HardRequirement {
			return fail("landlock", ExitSandboxFailed, errors.New("landlock unavailable under hard_requirement"))
		}
	}
	if err := caps.PrepareThread(); err != nil {
		return fail("capabilities", ExitSandboxFailed, err)
	}
	if rs != nil {
		res, err := rs.Enforce()
		if err != nil {
			return fail("landlock", ExitSandboxFailed, err)
		}
		conf.Landlock = res
	}
	if cfg.Seccomp && weakenForTest != "seccomp" {
		if err := installSeccomp(cfg.SeccompFilter); err != nil {
			return fail("seccomp", ExitSandboxFailed, err)
		}
		conf.SeccompRules = cfg.SeccompRules
	}
	return nil
}

// restoreTimerSlack gives the calling thread the timer slack the
// supervisor passed (timerSlackEnv; the kernel's default when it passed
// none), instead of the init's initTimerSlack.
func restoreTimerSlack() error {
	slack := defaultTimerSlack
	if v, err := strconv.Atoi(os.Getenv(timerSlackEnv)); err == nil && v > 0 {
		slack = v
	}
	return unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0)
}

// forkConfined forks the command from the confined thread (it must run
// there). syscall.ForkExec, not os/exec: the command is reaped by the
// init's wait4 loop, so it needs no pidfd, and os's one-time pidfd check
// (a test fork) would sit on every start's critical path.
func forkConfined(path string, p *specs.Process, stdio [3]*os.File, tty bool) (int, error) {
	cred := &syscall.Credential{Uid: p.User.UID, Gid: p.User.GID, Groups: []uint32{}}
	if weakenForTest == "identity" {
		cred.Uid, cred.Gid = 0, 0
	}
	pid, err := syscall.ForkExec(path, p.Args, &syscall.ProcAttr{
		Dir:   p.Cwd,
		Env:   p.Env,
		Files: []uintptr{stdio[0].Fd(), stdio[1].Fd(), stdio[2].Fd()},
		Sys: &syscall.SysProcAttr{
			Credential: cred,
			// A new session: no controlling terminal to inject into,
			// unless the sandbox's own PTY becomes it.
			Setsid:  true,
			Setctty: tty,
			Ctty:    0,
		},
	})
	if err != nil {
		code := ExitSandboxFailed
		switch {
		case errors.Is(err, unix.ENOENT):
			code = ExitNotFound
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.ENOEXEC), errors.Is(err, unix.EPERM):
			code = ExitNotExecutable
		}
		return 0, fail("exec", code, &os.PathError{Op: "fork/exec", Path: path, Err: err})
	}
	return pid, nil
}

// lookPath resolves the command with the sandbox's PATH, inside the
// sandbox's filesystem view.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return name, nil
	}
	path := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in PATH", name)
}

// loopbackUp brings up lo in the sandbox's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: up: %w", err)
	}
	return nil
}

// forwarded are the signals the init passes on to the command.
var forwarded = []os.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH, unix.SIGCONT}

// A reaper waits for every child (the init is PID 1 and inherits
// orphans) and hands the status of each command the init started to
// whoever waits for it. A blocking wait4 on its own thread notices an
// exit at once; signal delivery to the Go runtime would add a scheduling
// round trip.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
	kick    chan struct{} // a child was started (wakes a wait4 that saw ECHILD)
}

func newReaper() *reaper {
	r := &reaper{waiters: map[int]chan unix.WaitStatus{}, kick: make(chan struct{}, 1)}
	go r.loop()
	return r
}

func (r *reaper) loop() {
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// No children yet (a kept-alive sandbox before its first
			// exec): wait until one is started.
			<-r.kick
			continue
		}
		r.mu.Lock()
		if c, ok := r.waiters[wpid]; ok {
			c <- ws
			delete(r.waiters, wpid)
		}
		r.mu.Unlock()
	}
}

// start runs spawn and registers the pid it returns before the reaper can
// look for it, so a command that exits at once is not missed. The
// returned channel receives its wait status.
func (r *reaper) start(spawn func() (int, error)) (int, chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := spawn()
	if err != nil {
		return 0, nil, err
	}
	c := make(chan unix.WaitStatus, 1)
	r.waiters[pid] = c
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return pid, c, nil
}

// exitMessage is the MsgExit for a wait status, and the matching exit
// status (128+N for signal N).
func exitMessage(ws unix.WaitStatus) (Message, int) {
	m := Message{Type: MsgExit}
	code := 0
	switch {
	case ws.Exited():
		m.Code, code = ws.ExitStatus(), ws.ExitStatus()
	case ws.Signaled():
		m.Signal, code = int(ws.Signal()), 128+int(ws.Signal())
	}
	return m, code
}

// waitMain forwards signals to the main command and returns its status
// once it exits; the init then exits and the rest of the sandbox's
// processes die with its PID namespace. A kept-alive sandbox (pid 0) ends
// with status 0 on the first SIGTERM, SIGINT, SIGHUP or SIGQUIT.
func waitMain(ctl *channel, pid int, done chan unix.WaitStatus, sigs chan os.Signal) int {
	for {
		select {
		case ws := <-done:
			m, code := exitMessage(ws)
			ctl.send(m, -1)
			return code
		case sig := <-sigs:
			switch {
			case sig == unix.SIGCHLD:
			case pid > 0:
				unix.Kill(pid, sig.(syscall.Signal))
			case sig == unix.SIGTERM || sig == unix.SIGINT || sig == unix.SIGHUP || sig == unix.SIGQUIT:
				ctl.send(Message{Type: MsgExit}, -1)
				return 0
			}
		}
	}
}
