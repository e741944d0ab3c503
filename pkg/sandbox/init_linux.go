//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

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
// the command as root (uid and gid 0). Only the package's TestMain sets it
// (in the init copy of the test binary); no production path does.
var weakenForTest string

// initFail is a setup failure with the exit status the supervisor reports.
type initFail struct {
	stage string
	code  int
	err   error
}

func (e *initFail) Error() string { return e.stage + ": " + e.err.Error() }

func fail(stage string, code int, err error) error { return &initFail{stage, code, err} }

// RunInit is the in-sandbox init. It never returns: it exits with the
// command's status, or reports a setup failure on the control socket and
// exits with the matching status.
func RunInit() {
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
	m, _, err := ctl.recv()
	if err != nil || m.Type != MsgConfig || m.Config == nil || m.Config.Spec == nil {
		return report(fail("config", ExitSandboxFailed, fmt.Errorf("no configuration from supervisor: %v", err)))
	}
	cfg := m.Config
	if cfg.Timing {
		ctl.send(Message{Type: MsgLog, Level: "debug", Msg: "init has its configuration"}, -1)
	}
	if m, _, err = ctl.recv(); err != nil || m.Type != MsgGo {
		// The supervisor went away or aborted: create nothing.
		return ExitSandboxFailed
	}
	conf, cmdPID, err := setup(ctl, cfg)
	if err != nil {
		return report(err)
	}
	ctl.send(Message{Type: MsgConfined, Confinement: conf}, -1)
	ctl.send(Message{Type: MsgStarted, PID: cmdPID}, -1)
	return reap(ctl, cmdPID, sigs)
}

func setup(ctl *channel, cfg *InitConfig) (*Confinement, int, error) {
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
	// The cgroup namespace is created only now, after the supervisor has
	// moved us into the sandbox cgroup, so its root is that cgroup.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return nil, 0, fail("namespaces", ExitSandboxFailed, fmt.Errorf("unshare cgroup namespace: %w", err))
	}
	mark("cgroupns")
	nmounts, err := setupMounts(s)
	if err != nil {
		return nil, 0, fail("mounts", ExitSandboxFailed, err)
	}
	mark("mounts")
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return nil, 0, fail("hostname", ExitSandboxFailed, err)
		}
	}
	if err := loopbackUp(); err != nil {
		return nil, 0, fail("network", ExitSandboxFailed, err)
	}
	// Nothing in the sandbox may ptrace or read the init, nor dump core.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, 0, fail("dumpable", ExitSandboxFailed, err)
	}
	for _, rl := range s.Process.Rlimits {
		if rl.Type == "RLIMIT_CORE" {
			lim := unix.Rlimit{Cur: rl.Soft, Max: rl.Hard}
			if err := unix.Setrlimit(unix.RLIMIT_CORE, &lim); err != nil {
				return nil, 0, fail("rlimits", ExitSandboxFailed, err)
			}
		}
	}
	uid, gid := s.Process.User.UID, s.Process.User.GID
	if cfg.StorageCheck != "" {
		if err := checkStorage(cfg.StorageCheck, uid, gid); err != nil {
			return nil, 0, fail("storage-preflight", ExitSandboxFailed, err)
		}
	}
	mark("host")
	path, err := lookPath(s.Process.Args[0], s.Process.Env)
	if err != nil {
		return nil, 0, fail("exec", ExitNotFound, err)
	}
	stdio, pty, err := commandIO(ctl, s)
	if err != nil {
		return nil, 0, fail("tty", ExitSandboxFailed, err)
	}
	conf := &Confinement{UID: uid, GID: gid, Mounts: nmounts, Seccomp: cfg.Seccomp}
	for _, ns := range s.Linux.Namespaces {
		conf.Namespaces = append(conf.Namespaces, string(ns.Type))
	}
	pid, err := spawnConfined(cfg, path, stdio, pty != nil, conf)
	mark("spawn")
	if pty != nil {
		pty.Close() // the command holds the slave; the supervisor the master
	}
	if err != nil {
		return nil, 0, err
	}
	if err := verifyConfined(pid, uid, gid, cfg.Seccomp); err != nil {
		return nil, 0, fail("verify", ExitSandboxFailed, err)
	}
	mark("verify")
	return conf, pid, nil
}

// verifyConfined checks after the fact that the kernel's view of the
// command shows the drop (identity, all five capability sets empty,
// no_new_privs, seccomp filter mode). On a mismatch it kills the command
// and returns the reason. A command that already exited (a zombie) has
// nothing left to check.
func verifyConfined(pid int, uid, gid uint32, seccomp bool) error {
	st, err := caps.ReadStatus(pid)
	if err == nil {
		err = caps.Verify(st, caps.Expect{UID: uid, GID: gid, Seccomp: seccomp})
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

// spawnConfined applies the irreversible confinement on a dedicated,
// locked OS thread and forks the command from it. The thread exits with
// its goroutine, so the init's other threads keep their privileges for
// reaping and signal forwarding.
func spawnConfined(cfg *InitConfig, path string, stdio [3]*os.File, tty bool, conf *Confinement) (int, error) {
	s := cfg.Spec
	type result struct {
		pid int
		err error
	}
	rc := make(chan result, 1)
	go func() {
		lockThreadForever()
		pid, err := func() (int, error) {
			// Landlock paths are opened now, as root, before the drop.
			var rs *landlock.Ruleset
			if cfg.Landlock != nil {
				var err error
				rs, err = landlock.Build(*cfg.Landlock)
				if err != nil {
					return 0, fail("landlock", ExitSandboxFailed, err)
				}
				if rs == nil && cfg.Landlock.HardRequirement {
					return 0, fail("landlock", ExitSandboxFailed, errors.New("landlock unavailable under hard_requirement"))
				}
			}
			if err := caps.PrepareThread(); err != nil {
				return 0, fail("capabilities", ExitSandboxFailed, err)
			}
			if rs != nil {
				res, err := rs.Enforce()
				if err != nil {
					return 0, fail("landlock", ExitSandboxFailed, err)
				}
				conf.Landlock = res
			}
			if cfg.Seccomp && weakenForTest != "seccomp" {
				if err := installSeccomp(cfg.SeccompFilter); err != nil {
					return 0, fail("seccomp", ExitSandboxFailed, err)
				}
				conf.SeccompRules = cfg.SeccompRules
			}
			// syscall.ForkExec, not os/exec: the command is reaped by the
			// init's wait4 loop, so it needs no pidfd, and os's one-time
			// pidfd check (a test fork) would sit on every start's
			// critical path.
			cred := &syscall.Credential{Uid: s.Process.User.UID, Gid: s.Process.User.GID, Groups: []uint32{}}
			if weakenForTest == "identity" {
				cred.Uid, cred.Gid = 0, 0
			}
			pid, err := syscall.ForkExec(path, s.Process.Args, &syscall.ProcAttr{
				Dir:   s.Process.Cwd,
				Env:   s.Process.Env,
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
		}()
		rc <- result{pid, err}
	}()
	r := <-rc
	return r.pid, r.err
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

// reap waits for every child (the init is PID 1 and inherits orphans),
// forwards signals to the command, and returns the command's status once
// it exits. Remaining processes die with the init's PID namespace. A
// blocking wait4 on its own thread notices the exit at once; signal
// delivery to the Go runtime would add a scheduling round trip.
func reap(ctl *channel, pid int, sigs chan os.Signal) int {
	type exit struct {
		ws unix.WaitStatus
	}
	done := make(chan exit, 1)
	go func() {
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				// ECHILD cannot happen while the command lives; report
				// an unknown status rather than spin.
				done <- exit{ws: unix.WaitStatus(0xff00)}
				return
			}
			if wpid == pid {
				done <- exit{ws: ws}
				return
			}
		}
	}()
	for {
		select {
		case e := <-done:
			m := Message{Type: MsgExit}
			code := 0
			switch {
			case e.ws.Exited():
				m.Code, code = e.ws.ExitStatus(), e.ws.ExitStatus()
			case e.ws.Signaled():
				m.Signal, code = int(e.ws.Signal()), 128+int(e.ws.Signal())
			}
			ctl.send(m, -1)
			return code
		case sig := <-sigs:
			if sig == unix.SIGCHLD {
				continue
			}
			unix.Kill(pid, sig.(syscall.Signal))
		}
	}
}
