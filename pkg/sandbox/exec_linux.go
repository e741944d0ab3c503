//go:build linux

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/shellwords"
	"github.com/palisade-sandbox/palisade/pkg/state"
)

// Exec runs commands inside a running sandbox. The sandbox's supervisor
// creates a root-only listening socket in the state directory
// (ExecSocketFile) and hands it to the init before "go"; the init accepts
// on it and forks each requested command from its confined thread, the
// one that started the main command. An exec'd command therefore has
// exactly the main command's confinement: the same namespaces (mount,
// PID, IPC, UTS, network, cgroup), the same Landlock domain and seccomp
// filter, the same identity, capability sets and no_new_privs, the same
// cgroup, and the sandbox's environment (proxy and trust variables
// included) with --env on top, reserved names refused. Go cannot setns
// into a mount namespace from a multithreaded process, so the client
// never joins the sandbox itself: it passes its stdin, stdout and stderr
// (or receives a PTY master from the sandbox's devpts), forwards signals,
// and reports the exit status.

// listenExec creates the exec socket at path, readable by root only, and
// returns its listening fd.
func listenExec(path string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("exec socket: %w", err)
	}
	os.Remove(path)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("exec socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("exec socket %s: %w", path, err)
	}
	if err := unix.Listen(fd, 64); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("exec socket %s: %w", path, err)
	}
	return fd, nil
}

// serveExec accepts exec requests on the listening socket lnFD for as
// long as the init lives.
func serveExec(lnFD int, cfg *InitConfig, sp *spawner, rp *reaper) {
	f := os.NewFile(uintptr(lnFD), ExecSocketFile)
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return
	}
	for {
		c, err := ul.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		go handleExec(c, cfg, sp, rp)
	}
}

// handleExec serves one exec connection: the request, the command's
// start, forwarded signals, its exit. A client that hangs up kills the
// command's process group: an exec lives as long as its client.
func handleExec(conn *net.UnixConn, cfg *InitConfig, sp *spawner, rp *reaper) {
	c, err := connChannel(conn)
	if err != nil {
		return
	}
	defer c.close()
	if !peerIsRoot(conn) {
		return
	}
	m, fds, err := c.recvFDs()
	closeFDs := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
		fds = nil
	}
	defer closeFDs()
	if err != nil || m.Type != MsgExec || m.Exec == nil {
		return
	}
	refuse := func(err error) {
		var f *initFail
		if !errors.As(err, &f) {
			f = &initFail{stage: "exec", code: ExitSandboxFailed, err: err}
		}
		c.send(Message{Type: MsgError, Stage: f.stage, Code: f.code, Msg: f.err.Error()}, -1)
	}
	proc, path, err := execProcess(cfg, m.Exec)
	if err != nil {
		refuse(err)
		return
	}
	var stdio [3]*os.File
	var pty *os.File
	if proc.Terminal {
		if stdio, pty, err = commandIO(c, &specs.Spec{Process: proc}); err != nil {
			refuse(fail("tty", ExitSandboxFailed, err))
			return
		}
	} else {
		if len(fds) != 3 {
			refuse(fmt.Errorf("exec request carries %d descriptors, want stdin, stdout and stderr", len(fds)))
			return
		}
		for i, fd := range fds {
			stdio[i] = os.NewFile(uintptr(fd), "stdio")
		}
		fds = nil
	}
	pid, done, err := rp.start(func() (int, error) { return sp.spawn(path, proc, stdio, pty != nil) })
	for _, f := range stdio {
		if f != nil {
			f.Close()
		}
	}
	if err != nil {
		refuse(err)
		return
	}
	if err := verifyConfined(pid, proc.User.UID, proc.User.GID, cfg.Seccomp, sp.ns); err != nil {
		refuse(fail("verify", ExitSandboxFailed, err))
		return
	}
	// Msg names the executable, for the client's launch event.
	if err := c.send(Message{Type: MsgStarted, PID: pid, Msg: path}, -1); err != nil {
		unix.Kill(-pid, unix.SIGKILL)
	}
	var mu sync.Mutex
	exited := false
	go func() {
		for {
			m, _, err := c.recv()
			mu.Lock()
			if exited {
				mu.Unlock()
				return
			}
			if err != nil {
				unix.Kill(-pid, unix.SIGKILL)
				unix.Kill(pid, unix.SIGKILL)
				mu.Unlock()
				return
			}
			if m.Type == MsgSignal && m.Signal > 0 && m.Signal < 65 {
				unix.Kill(pid, syscall.Signal(m.Signal))
			}
			mu.Unlock()
		}
	}()
	ws := <-done
	mu.Lock()
	exited = true
	mu.Unlock()
	em, _ := exitMessage(ws)
	c.send(em, -1)
}

// peerIsRoot reports whether the connecting process runs as root. The
// socket's mode already keeps everyone else out; this is the second lock.
func peerIsRoot(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	rc.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	return err == nil && cred != nil && cred.Uid == 0
}

// execProcess is the process an exec request runs: the main command's
// identity, environment (with the request's variables, reserved names
// refused) and directory, through a login shell unless the request says
// otherwise. The bounded-tmpfs storage preflight runs again here, for
// every exec.
func execProcess(cfg *InitConfig, req *ExecRequest) (*specs.Process, string, error) {
	if len(req.Args) == 0 {
		return nil, "", fail("exec", ExitSandboxFailed, errors.New("no command given"))
	}
	main := cfg.Spec.Process
	env, err := ExecEnv(main.Env, req.Env)
	if err != nil {
		return nil, "", fail("env", ExitSandboxFailed, err)
	}
	args := req.Args
	if req.LoginShell {
		args = loginShell(args, env)
	}
	cwd := main.Cwd
	if req.Workdir != "" {
		if !filepath.IsAbs(req.Workdir) {
			return nil, "", fail("workdir", ExitSandboxFailed, fmt.Errorf("--workdir %q: not an absolute path", req.Workdir))
		}
		cwd = req.Workdir
	}
	// Checked here, in the sandbox's view, so that a missing directory
	// is not reported as a missing command (the fork's chdir fails with
	// the same ENOENT).
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return nil, "", fail("workdir", ExitSandboxFailed, fmt.Errorf("--workdir %s: not a directory in the sandbox", cwd))
	}
	// That stat ran as root; the command's identity may still be kept
	// out (a missing command there would otherwise be reported first).
	if req.Workdir != "" {
		if err := checkEnter(cwd, main.User.UID, main.User.GID); err != nil {
			return nil, "", fail("workdir", ExitSandboxFailed, fmt.Errorf("--workdir: %w", err))
		}
	}
	if cfg.StorageCheck != "" {
		if err := checkStorage(cfg.StorageCheck, main.User.UID, main.User.GID); err != nil {
			return nil, "", fail("storage-preflight", ExitSandboxFailed, err)
		}
	}
	path, err := lookPath(args[0], env)
	if err != nil {
		return nil, "", fail("exec", ExitNotFound, err)
	}
	p := &specs.Process{
		Terminal: req.Terminal, User: main.User, Args: args, Env: env, Cwd: cwd,
	}
	if req.Terminal && req.Rows > 0 && req.Cols > 0 {
		p.ConsoleSize = &specs.Box{Height: uint(req.Rows), Width: uint(req.Cols)}
	}
	return p, path, nil
}

// loginShell wraps args in "bash -lc" (seed 004: the first of
// ~/.bash_profile, ~/.bash_login, ~/.profile is sourced), or "sh -c" where
// the sandbox has no bash. A single argument is the script itself (as
// `exec NAME -- 'make && make test'`); several are quoted word by word.
func loginShell(args, env []string) []string {
	script := args[0]
	if len(args) > 1 {
		script = shellwords.Join(args)
	}
	if _, err := lookPath("bash", env); err == nil {
		return []string{"bash", "-lc", script}
	}
	return []string{"sh", "-c", script}
}

// ExecOptions describe one exec into a running sandbox.
type ExecOptions struct {
	StateRoot string
	Name      string
	// ExpectID, when set, runs the command only in the sandbox with this
	// id (state.Labels.ID): if Name now names another sandbox, Exec
	// fails with ErrIDMismatch and nothing is run.
	ExpectID string
	Args     []string
	Env      []string // K=V on top of the sandbox's environment
	Workdir  string   // "" = the sandbox's workdir
	TTY      bool
	// NoLoginShell execs Args directly instead of through bash -lc.
	NoLoginShell bool
	// Signals, when set, are the forwarded signals the caller caught
	// (CatchSignals); nil: Exec catches them itself.
	Signals *Signals
	// Events, when set, receives the exec'd command's Launched and
	// Exited, after Created with the sandbox's name and kind.
	Events Events

	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// ErrSandboxGone reports an exec into a sandbox whose init is no longer
// there (it ended, or its owner was killed).
var ErrSandboxGone = errors.New("the sandbox is not running")

// Exec runs a command in the running sandbox o.Name and returns its exit
// status as Run does (128+N for signal N, 126/127). The error is non-nil
// when the command could not be started in the sandbox (exit 125): no
// such sandbox, its init is gone (wrapping ErrSandboxGone), or a refused
// request.
func Exec(ctx context.Context, o ExecOptions) (Result, error) {
	res := Result{Name: o.Name, ExitCode: ExitSandboxFailed}
	if len(o.Args) == 0 {
		return res, errors.New("exec: no command given")
	}
	// Refuse bad --env before connecting; the init checks again.
	if _, err := ExecEnv(nil, o.Env); err != nil {
		return res, err
	}
	sig := o.Signals
	if sig == nil {
		sig = CatchSignals()
	}
	defer sig.Stop()
	store, err := state.Open(o.StateRoot)
	if err != nil {
		return res, err
	}
	l, err := store.Get(o.Name)
	if err != nil {
		return res, err
	}
	dir, err := store.Dir(o.Name)
	if err != nil {
		return res, err
	}
	if o.ExpectID != "" {
		held, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return res, fmt.Errorf("sandbox %s: %w", o.Name, err)
		}
		defer held.Close()
		if dir, l, err = boundLabels(held, o.Name); err != nil {
			return res, err
		}
		if l.ID != o.ExpectID {
			return res, fmt.Errorf("exec: sandbox %s has id %s, not %s: %w; nothing run", o.Name, l.ID, o.ExpectID, ErrIDMismatch)
		}
	}
	uid, gid := uint32(0), uint32(0)
	if o.Events != nil {
		o.Events.Created(l.Name, string(l.Kind))
		if b, err := os.ReadFile(filepath.Join(dir, ConfigFile)); err == nil {
			if cfg, err := DecodeConfig(b); err == nil && cfg.Spec.Process != nil {
				uid, gid = cfg.Spec.Process.User.UID, cfg.Spec.Process.User.GID
			}
		}
	}
	var cmdPID int
	if l.Status == state.StatusExited {
		return res, fmt.Errorf("sandbox %s: %w (its main process ended%s)", o.Name, ErrSandboxGone, exitPhrase(l))
	}
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(dir, ExecSocketFile), Net: "unixpacket"})
	if err != nil {
		return res, fmt.Errorf("sandbox %s: %w: its init does not answer on %s (%v); `sandbox-supervisor status %s` shows what is left, `gc` collects it",
			o.Name, ErrSandboxGone, ExecSocketFile, errors.Unwrap(err), o.Name)
	}
	c, err := connChannel(conn)
	if err != nil {
		return res, err
	}
	defer c.close()

	req := &ExecRequest{Args: o.Args, Env: o.Env, Workdir: o.Workdir, LoginShell: !o.NoLoginShell, Terminal: o.TTY}
	var sio execStdio
	defer sio.close()
	if o.TTY {
		if f, ok := o.Stdin.(*os.File); ok {
			if ws, err := winsize(f); err == nil {
				req.Rows, req.Cols = int(ws.Row), int(ws.Col)
			}
		}
		err = c.send(Message{Type: MsgExec, Exec: req}, -1)
	} else {
		var fds [3]int
		if fds, err = sio.open(o.Stdin, o.Stdout, o.Stderr); err != nil {
			return res, err
		}
		err = c.sendFDs(Message{Type: MsgExec, Exec: req}, fds[:]...)
		sio.sent()
	}
	if err != nil {
		return res, fmt.Errorf("sandbox %s: %w: %v", o.Name, ErrSandboxGone, err)
	}

	var relay sync.WaitGroup
	var pty *os.File
	var ptyMu sync.Mutex
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case s := <-sig.c:
				ptyMu.Lock()
				if s == unix.SIGWINCH && pty != nil {
					resizeFromCaller(pty, o.Stdin)
				}
				ptyMu.Unlock()
				if s != unix.SIGWINCH || !o.TTY {
					c.send(Message{Type: MsgSignal, Signal: int(s.(syscall.Signal))}, -1)
				}
			case <-stop:
				return
			}
		}
	}()
	for {
		m, fd, err := c.recv()
		if err != nil {
			return res, fmt.Errorf("sandbox %s: %w: it ended while the command ran", o.Name, ErrSandboxGone)
		}
		switch m.Type {
		case MsgPTY:
			if fd < 0 {
				return res, errors.New("exec: the init sent no PTY master")
			}
			ptyMu.Lock()
			pty, err = startRelay(fd, o.Stdin, o.Stdout, &relay)
			ptyMu.Unlock()
			if err != nil {
				return res, fmt.Errorf("exec: %w", err)
			}
		case MsgStarted:
			cmdPID = m.PID
			if o.Events != nil {
				// The event names the executable the init ran (bash for
				// a login shell), never the arguments.
				o.Events.Launched(m.PID, []string{m.Msg}, uid, gid)
			}
		case MsgError:
			res.ExitCode = m.Code
			if o.Events != nil {
				o.Events.Failed(m.Stage, m.Msg, m.Code)
			}
			if m.Code == ExitNotFound || m.Code == ExitNotExecutable {
				fmt.Fprintf(writerOr(o.Stderr), "sandbox-supervisor: %s\n", m.Msg)
				return res, nil
			}
			return res, fmt.Errorf("exec in %s: %s: %s", o.Name, m.Stage, m.Msg)
		case MsgExit:
			res.Signal = m.Signal
			res.ExitCode = m.Code
			if m.Signal != 0 {
				res.ExitCode = 128 + m.Signal
			}
			if o.Events != nil {
				o.Events.Exited(cmdPID, m.Code, m.Signal)
			}
			if pty != nil {
				relay.Wait()
				ptyMu.Lock()
				pty.Close()
				pty = nil
				ptyMu.Unlock()
			}
			sio.endInput()
			sio.wait()
			return res, nil
		}
	}
}

// boundLabels reads a sandbox's labels through its open state directory
// and returns a path into that directory through the descriptor
// (/proc/self/fd/N). The labels, the configuration and the exec socket
// reached through it are that one sandbox's even if its name is deleted
// and taken by another sandbox meanwhile: a removed directory keeps no
// socket to connect to, and the new one is another directory.
func boundLabels(held *os.File, name string) (string, state.Labels, error) {
	dir := fmt.Sprintf("/proc/self/fd/%d", held.Fd())
	var l state.Labels
	b, err := os.ReadFile(filepath.Join(dir, state.LabelsFile))
	if err != nil {
		return "", l, fmt.Errorf("sandbox %q: read labels: %v", name, err)
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return "", l, fmt.Errorf("sandbox %q: %s: %w", name, state.LabelsFile, err)
	}
	return dir, l, nil
}

func exitPhrase(l state.Labels) string {
	if l.ExitCode == nil {
		return ""
	}
	return fmt.Sprintf(" with status %d", *l.ExitCode)
}

func writerOr(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// execStdio is the stdin, stdout and stderr an exec hands to the init:
// /dev/null for nil (or the caller's own /dev/null), and otherwise pipes
// this process copies through — never the caller's descriptors
// themselves. The command may leave a process behind in the sandbox
// (setsid, in the background) that outlives the exec; with the caller's
// terminal or log it could read what the operator types next or write
// into a later command's output. Through the pipes it gets end of file on
// stdin once the command has exited, and a broken pipe on output once the
// exec has returned.
type execStdio struct {
	mine   []*os.File // ends that go to the init; closed once sent
	keep   []*os.File // ends this process copies through
	stdin  *os.File   // the write end feeding the command's stdin
	copies sync.WaitGroup
}

func (s *execStdio) open(stdin io.Reader, stdout, stderr io.Writer) ([3]int, error) {
	var fds [3]int
	in, err := s.input(stdin)
	if err != nil {
		return fds, err
	}
	fds[0] = int(in.Fd())
	for i, w := range []io.Writer{stdout, stderr} {
		if i == 1 && stdout != nil && same(stdout, stderr) {
			// One writer for both (as os/exec does): one pipe, so that
			// only one goroutine at a time writes to it.
			fds[2] = fds[1]
			break
		}
		f, err := s.output(w)
		if err != nil {
			return fds, err
		}
		fds[i+1] = int(f.Fd())
	}
	return fds, nil
}

// isDevNull reports whether v is an *os.File open on /dev/null, which
// carries nothing and can be handed on as it is.
func isDevNull(v any) (*os.File, bool) {
	f, ok := v.(*os.File)
	if !ok || f == nil {
		return nil, false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, false
	}
	return f, st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(1, 3)
}

func (s *execStdio) input(r io.Reader) (*os.File, error) {
	if f, ok := isDevNull(r); ok {
		return f, nil
	}
	if r == nil {
		f, err := os.Open(os.DevNull)
		s.mine = append(s.mine, f)
		return f, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.mine = append(s.mine, pr)
	s.stdin = pw
	go func() {
		// A read that returns after the command exited finds pw
		// closed (endInput): its bytes are dropped, not passed on.
		io.Copy(pw, r)
		pw.Close()
	}()
	return pr, nil
}

func (s *execStdio) output(w io.Writer) (*os.File, error) {
	if f, ok := isDevNull(w); ok {
		return f, nil
	}
	if w == nil {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		s.mine = append(s.mine, f)
		return f, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.mine = append(s.mine, pw)
	s.keep = append(s.keep, pr)
	s.copies.Add(1)
	go func() {
		defer s.copies.Done()
		io.Copy(w, pr)
	}()
	return pw, nil
}

// endInput closes the command's stdin once it has exited: nothing the
// caller sends afterwards reaches a process it left behind.
func (s *execStdio) endInput() {
	if s.stdin != nil {
		s.stdin.Close()
	}
}

// sent closes this process's copies of the ends the init now holds.
func (s *execStdio) sent() {
	for _, f := range s.mine {
		if f != nil {
			f.Close()
		}
	}
	s.mine = nil
}

// wait lets the output copies finish; a background process of the
// command that keeps the pipe open is given a second, then cut off.
func (s *execStdio) wait() {
	done := make(chan struct{})
	go func() { s.copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		for _, f := range s.keep {
			f.Close()
		}
		<-done
	}
}

// close ends the exec's stdio. Once it returns, nothing writes to the
// caller's stdout or stderr any more (as with os/exec): the copies are
// cut off and waited for.
func (s *execStdio) close() {
	s.sent()
	s.endInput()
	for _, f := range s.keep {
		f.Close()
	}
	s.copies.Wait()
}
