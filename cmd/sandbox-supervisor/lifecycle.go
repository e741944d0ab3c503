package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/attach"
	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/state"
)

// ownerEnv, in the environment of a detached sandbox's owner, names the
// fd on which it reports the sandbox's name and id (or why it failed) to
// the `run --detach` that started it. It is removed from the owner's
// environment at once; the sandbox's environment is rebuilt anyway.
const ownerEnv = "PALISADE_DETACH_OWNER_FD"

// ownerReport is the one line an owner writes on its report fd.
type ownerReport struct {
	Name  string `json:"name,omitempty"`
	ID    string `json:"id,omitempty"`
	Error string `json:"error,omitempty"`
	Code  int    `json:"code,omitempty"`
}

// owner is the report channel of a detached sandbox's owner process.
type owner struct {
	f    *os.File
	sent bool
}

// takeOwner returns the report channel when this process is a detached
// sandbox's owner, nil otherwise.
func takeOwner() *owner {
	v, ok := os.LookupEnv(ownerEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(ownerEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil
	}
	syscall.CloseOnExec(fd)
	return &owner{f: os.NewFile(uintptr(fd), "detach-report")}
}

func (o *owner) report(r ownerReport) {
	if o == nil || o.sent {
		return
	}
	o.sent = true
	b, _ := json.Marshal(r)
	o.f.Write(append(b, '\n'))
	o.f.Close()
}

// detach starts this binary again as the sandbox's owner, in a session of
// its own with no terminal, and returns once the owner has reported that
// the sandbox runs (printing its name and id) or why it could not be
// created. The owner stays: it relays signals, records the main
// process's final state, and tears the sandbox down when it ends.
func detach(args []string, asJSON bool, stdout io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return cli.WithCode(sandbox.ExitSandboxFailed, fmt.Errorf("run --detach: %w", err))
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return cli.WithCode(sandbox.ExitSandboxFailed, fmt.Errorf("run --detach: %w", err))
	}
	defer pr.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		pw.Close()
		return cli.WithCode(sandbox.ExitSandboxFailed, fmt.Errorf("run --detach: %w", err))
	}
	cmd := exec.Command(exe, append([]string{"run"}, args...)...)
	cmd.Env = append(os.Environ(), ownerEnv+"=3")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, null
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	pw.Close()
	null.Close()
	if err != nil {
		return cli.WithCode(sandbox.ExitSandboxFailed, fmt.Errorf("run --detach: start the owner: %w", err))
	}
	line, _ := bufio.NewReader(pr).ReadBytes('\n')
	var r ownerReport
	if len(line) == 0 || json.Unmarshal(line, &r) != nil {
		werr := cmd.Wait()
		return cli.WithCode(sandbox.ExitSandboxFailed, fmt.Errorf("sandbox not created: its owner ended (%v) without reporting", werr))
	}
	if r.Error != "" {
		cmd.Wait()
		code := r.Code
		if code == 0 {
			code = sandbox.ExitSandboxFailed
		}
		return cli.WithCode(code, errors.New(r.Error))
	}
	ownerPID := cmd.Process.Pid
	cmd.Process.Release()
	if asJSON {
		return cli.WriteJSON(stdout, struct {
			Name     string `json:"name"`
			ID       string `json:"id"`
			OwnerPID int    `json:"owner_pid"`
		}{r.Name, r.ID, ownerPID})
	}
	_, err = fmt.Fprintf(stdout, "%s %s\n", r.Name, r.ID)
	return err
}

// runOwned is the owner's part of run --detach: it creates and starts the
// sandbox, reports its name and id, then waits for the main command (or
// a delete) and tears the sandbox down, its final state kept in the state
// directory.
func runOwned(ctx context.Context, o sandbox.Options, own *owner, main *mainSession) (sandbox.Result, error) {
	s, err := sandbox.Create(ctx, o)
	defer s.Destroy()
	// The init holds the main process's stdio now.
	main.started()
	failed := func(err error) (sandbox.Result, error) {
		return sandbox.Result{Name: s.Name(), ExitCode: sandbox.ExitSandboxFailed}, err
	}
	if err != nil {
		return failed(err)
	}
	store, err := state.Open(o.StateRoot)
	if err != nil {
		return failed(err)
	}
	dir, err := store.Dir(s.Name())
	if err != nil {
		return failed(err)
	}
	if err := main.serve(filepath.Join(dir, attachSocket)); err != nil {
		return failed(fmt.Errorf("attach socket: %w", err))
	}
	if err := s.Start(ctx); err != nil {
		return failed(err)
	}
	// From now on the sandbox has been reported: its final state stays.
	s.Retain()
	l, err := store.Get(s.Name())
	if err != nil {
		return failed(err)
	}
	own.report(ownerReport{Name: l.Name, ID: l.ID})
	res, err := s.Wait(ctx)
	// Attached clients get the output to its end before the teardown.
	main.drain(2 * time.Second)
	return res, err
}

// attachSocket is the name, in a detached sandbox's state directory, of
// the root-only socket `attach` connects to.
const attachSocket = "attach.sock"

// mainSession is a detached sandbox's main process stdio: a pipe for its
// stdin and one for its stdout and stderr, kept by the owner's attach
// multiplexer (1 MiB replay buffer, one stdin lease).
type mainSession struct {
	inR, inW, outR, outW *os.File
	mux                  *attach.Mux
	ln                   net.Listener
	copied               chan struct{}
}

func newMainSession() (*mainSession, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	m := &mainSession{inR: inR, inW: inW, outR: outR, outW: outW, mux: attach.New(inW), copied: make(chan struct{})}
	go func() {
		defer close(m.copied)
		m.mux.Copy(outR)
	}()
	return m, nil
}

// started closes this process's copies of the ends the init now holds,
// so the output ends when the sandbox's processes do.
func (m *mainSession) started() {
	m.inR.Close()
	m.outW.Close()
}

func (m *mainSession) serve(path string) error {
	ln, err := attach.Listen(path)
	if err != nil {
		return err
	}
	m.ln = ln
	go m.mux.Serve(ln)
	return nil
}

// drain waits, up to d, for the output to end.
func (m *mainSession) drain(d time.Duration) {
	select {
	case <-m.copied:
	case <-time.After(d):
	}
}

func (m *mainSession) close() {
	if m.ln != nil {
		m.ln.Close()
	}
	m.inR.Close()
	m.outW.Close()
	m.inW.Close()
	m.outR.Close()
}

const attachUsage = `usage: sandbox-supervisor attach [--state-dir DIR] NAME

Attaches to the main process of the detached sandbox NAME: prints the
output it kept (up to the last 1 MiB, stdout and stderr together), then
the live output, until the main process ends, and exits with its status.
Input is passed to the main process's stdin while this client holds the
stdin lease: one client at a time, the first to attach; the lease passes
on when its holder leaves, and the stdin stays open across disconnects.
Interrupt to detach.

Exit status: the main process's own (128+N when it died of signal N),
also when it had already ended; 2 when the sandbox has no main process
(run --detach without a command: use exec); 1 when there is nothing to
attach to (no such sandbox, or one run in the foreground).

The output is the sandboxed program's, relayed byte for byte (as docker
attach does): it can hold terminal escapes (a title, a clipboard write with
OSC 52, a cleared screen) and lines that look like the supervisor's. Attach
only to what you would run in this terminal yourself; use logs (escaped)
to read a sandbox's events.

Examples:
  sudo sandbox-supervisor run --detach --name srv -- python3 -m http.server
  sudo sandbox-supervisor attach srv

Flags:
`

func attachCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("attach", attachUsage, stderr)
	dir := fs.String("state-dir", state.DefaultRoot, "state root")
	name, err := parseName(fs, "attach", args)
	if err != nil {
		return err
	}
	store, err := openStoreAsRoot("attach", *dir)
	if err != nil {
		return err
	}
	sdir, err := store.Dir(name)
	if err != nil {
		return cli.Failf("attach: %v", err)
	}
	l, err := store.Get(name)
	if err != nil {
		return cli.Failf("attach: %v", err)
	}
	if l.NoMain {
		return cli.Usagef("attach: sandbox %s has no main process (run --detach started it without a command): run commands in it with exec", name)
	}
	if err := attach.Attach(filepath.Join(sdir, attachSocket), stdin, stdout); err != nil {
		if now, gerr := store.Get(name); gerr == nil && now.ID == l.ID && now.Status == state.StatusExited && now.ExitCode != nil {
			fmt.Fprintf(stderr, "sandbox-supervisor: attach: the main process of sandbox %s already ended (exit %d); its output is gone\n", name, *now.ExitCode)
			return mainStatus(now)
		}
		return cli.Failf("attach: sandbox %s has no main session to attach to (not detached, or its main process ended): %v", name, err)
	}
	// The output ended: the main process has ended, or will once it is
	// torn down; its owner records the status.
	final, err := store.WaitExited(name, l.ID)
	if err != nil {
		return cli.Failf("attach: %v", err)
	}
	return mainStatus(final)
}

// mainStatus is attach's result for a main process recorded as exited:
// its status, with nothing more printed.
func mainStatus(l state.Labels) error {
	if *l.ExitCode == 0 {
		return nil
	}
	return cli.Quiet(*l.ExitCode)
}

const execUsage = `usage: sandbox-supervisor exec [--tty] [--no-login-shell] [--env K=V]... [--workdir DIR] [--expect-id ID] [--status-fd N] NAME -- CMD [ARG...]

Runs CMD inside the running sandbox NAME with exactly its confinement:
its namespaces, Landlock domain, seccomp filter, identity, cgroup and
environment (proxy variables included). The sandbox's init forks the
command; this process passes its stdin, stdout and stderr (or relays a
terminal with --tty), forwards signals, and exits with the command's
status (128+N for signal N; 125 when it could not be started in the
sandbox, for example because its init is gone or the sandbox user cannot
enter its directory; 126/127 not executable / not found). CMD runs through "bash -lc" (so the first of ~/.bash_profile,
~/.bash_login, ~/.profile is read), or "sh -c" where the sandbox has no
bash: one argument is the script itself, several are quoted word by word.
--no-login-shell executes CMD directly. The bounded-tmpfs storage check
runs again for every exec. An exec ends with its client: if this process
goes away, the command's process group is killed. With --expect-id the
command runs only in the sandbox with that id (as run --detach printed
it); if NAME has since been deleted and taken by another sandbox, exec
exits 125 and runs nothing.

Exit status: the command's own (128+N when it died of signal N); 125 when
nothing was run (the sandbox or its init is gone, the directory is closed
to the sandbox user, --expect-id names another sandbox); 126/127 the
command is not executable / not found; 2 usage. This is docker's and
GNU env's convention (a mismatch was 3 before, which grep and make
return all the time); a command that itself exits 125-127 reads the
same, and its output can imitate the supervisor's lines. The
unambiguous channel is --status-fd N: the supervisor alone writes one
JSON line there when exec ends, {"exit_code":N,"from_command":bool,
"error":"...","reason":"..."}, where from_command says whether N is the
command's own status and reason is "id_mismatch" when --expect-id named
another sandbox. The command never gets that descriptor.

The command's output is relayed byte for byte, by design (as docker exec
does): whatever runs in the sandbox can put terminal escapes (a title, a
clipboard write with OSC 52, a cleared screen) and lines that look like
the supervisor's on this terminal. Redirect it to a file, or read it with
cat -v, when the sandbox runs code you do not trust.

Examples:
  sudo sandbox-supervisor run --detach --name task-42 --workdir /srv/task-42
  sudo sandbox-supervisor exec task-42 -- 'make && make test'
  sudo sandbox-supervisor exec --no-login-shell --env CI=1 task-42 -- /usr/bin/git status
  sudo sandbox-supervisor exec --tty task-42 -- bash
  sudo sandbox-supervisor exec --expect-id 3f1c0e9a5b7d4e21a0c4d2b6e8f91a37 task-42 -- make test
  sudo sh -c 'sandbox-supervisor exec --status-fd 3 --expect-id "$ID" task-42 -- make test 3>status.json'

Flags:
`

func execCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("exec", execUsage, stderr)
	tty := fs.Bool("tty", false, "give the command a terminal from the sandbox's own devpts (stdin must be a terminal)")
	noLogin := fs.Bool("no-login-shell", false, "execute CMD directly instead of through bash -lc")
	var env multiFlag
	fs.Var(&env, "env", "set K=V for the command (repeatable; reserved variables such as HTTPS_PROXY are refused)")
	workdir := fs.String("workdir", "", "the command's directory inside the sandbox (default: the sandbox's workdir)")
	expect := fs.String("expect-id", "", "run only if NAME's id is still ID (exit 125 otherwise, nothing run)")
	statusFD := fs.Int("status-fd", -1, "write exec's outcome as one JSON line to this descriptor (which the caller opened, e.g. 3>file): {\"exit_code\":N,\"from_command\":bool,\"error\":\"...\",\"reason\":\"...\"}; the command never gets the descriptor, so a caller tells \"nothing ran\" from a command that exited 125")
	dir := fs.String("state-dir", state.DefaultRoot, "state root")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return cli.Usagef("exec: want a sandbox NAME, then -- CMD")
	}
	name, cmd := rest[0], rest[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	if len(cmd) == 0 {
		fs.Usage()
		return cli.Usagef("exec: no command given (put it after NAME --)")
	}
	if err := state.ValidateName(name); err != nil {
		return cli.Usagef("exec: %v", err)
	}
	if _, err := sandbox.ExecEnv(nil, env); err != nil {
		return cli.Usagef("%v", err)
	}
	if *workdir != "" && (*workdir)[0] != '/' {
		return cli.Usagef("--workdir %q: want an absolute path inside the sandbox", *workdir)
	}
	if *tty && !sandbox.IsTerminal(stdin) {
		return cli.Usagef("--tty: stdin is not a terminal; drop --tty to pass stdin to the command as it is (a pipe or file), or run from a terminal")
	}
	var st *runStatus
	if *statusFD >= 0 {
		if *statusFD < 3 {
			return cli.Usagef("--status-fd %d: want a descriptor above 2 that the caller opened", *statusFD)
		}
		if st, err = openRunStatus(*statusFD); err != nil {
			return cli.Usagef("--status-fd: %v", err)
		}
		defer func() { st.write(err) }()
	}
	if err := requireRoot("exec"); err != nil {
		return cli.WithCode(sandbox.ExitSandboxFailed, err)
	}
	o := sandbox.ExecOptions{
		StateRoot: *dir, Name: name, ExpectID: *expect, Args: cmd, Env: env, Workdir: *workdir, TTY: *tty, NoLoginShell: *noLogin,
		Stdin: stdin, Stdout: stdout, Stderr: stderr,
	}
	// The exec'd command's launch and end go to the sandbox's events
	// file, as the main command's do.
	if store, err := state.Open(*dir); err == nil {
		if l, err := store.Get(name); err == nil && l.EventsFile != "" {
			if w, err := ocsf.OpenDest(l.EventsFile, nil); err == nil {
				defer w.Close()
				o.Events = newEventSink(w, l.AgentID, nil)
			}
		}
	}
	res, err := sandbox.Exec(ctx, o)
	if err != nil {
		// An --expect-id mismatch too (sandbox.ErrIDMismatch): nothing ran.
		return cli.WithCode(sandbox.ExitSandboxFailed, err)
	}
	st.fromCommand()
	if res.ExitCode != 0 {
		return cli.Quiet(res.ExitCode)
	}
	return nil
}

// ExitIDMismatch is the status of delete when --expect-id names another
// sandbox than NAME is now (seed 004: ABORTED, nothing changed). exec's
// mismatch is 125 (nothing ran), not a status a command returns itself.
const ExitIDMismatch = 3

const deleteUsage = `usage: sandbox-supervisor delete [--expect-id ID] [--timeout DUR] [--state-dir DIR] NAME

Deletes the sandbox NAME: its main process and every exec'd one, its
cgroup, network namespace, nftables tables and egress proxy, and its state
directory — the teardown of a finished run. The name is resolved to the
sandbox's immutable id under its lifecycle lock; with --expect-id the
delete goes ahead only when the id is still ID, and otherwise exits 3 with
nothing changed. A sandbox whose owner still runs is stopped through it
(SIGTERM to the owner, which ends the main process; SIGKILL after
--timeout); what a dead owner left is collected as gc would.

Examples:
  sudo sandbox-supervisor delete task-42
  sudo sandbox-supervisor delete --expect-id 3f1c0e9a5b7d4e21a0c4d2b6e8f91a37 task-42

Flags:
`

func deleteCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("delete", deleteUsage, stderr)
	expect := fs.String("expect-id", "", "delete only if NAME's id is still ID (exit 3 otherwise, nothing changed)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long the owner may take to stop the sandbox before it is killed")
	dir := fs.String("state-dir", state.DefaultRoot, "state root")
	name, err := parseName(fs, "delete", args)
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return cli.Usagef("--timeout %v: must be positive", *timeout)
	}
	store, err := openStoreAsRoot("delete", *dir)
	if err != nil {
		return err
	}
	unlock, err := store.LockLifecycle(name)
	if err != nil {
		return cli.Failf("delete: %v", err)
	}
	defer unlock()
	l, err := store.Get(name)
	if err != nil {
		return cli.Failf("delete: %v", err)
	}
	if *expect != "" && l.ID != *expect {
		return cli.WithCode(ExitIDMismatch, fmt.Errorf("delete: sandbox %s has id %s, not %s: nothing changed", name, l.ID, *expect))
	}
	if err := stopOwner(store, l, *timeout); err != nil {
		return cli.Failf("delete %s: %v", name, err)
	}
	if afterOwnerStopped != nil {
		afterOwnerStopped()
	}
	// The owner has ended (a foreground run removed its own state); what
	// is left is collected as gc does, but only while NAME still is the
	// sandbox whose id was resolved: the lifecycle lock lives in the state
	// directory the owner removes, so once it is gone a new sandbox may
	// already have taken the name, and it is not this delete's to touch.
	if _, err := store.RemoveID(name, l.ID, sandbox.Collect); err != nil {
		return cli.Failf("delete %s: %v (state kept; rerun delete or gc)", name, err)
	}
	fmt.Fprintln(stdout, name)
	return nil
}

// afterOwnerStopped, when set (by tests only), runs between the owner's
// end and the collection of what it left: the moment another `run` may
// take the freed name.
var afterOwnerStopped func()

// stopOwner ends a sandbox's owner (its supervisor) if it still runs:
// SIGTERM, which it forwards so the main process ends and the sandbox is
// torn down, then SIGKILL after timeout (its init dies with it).
func stopOwner(store *state.Store, l state.Labels, timeout time.Duration) error {
	if !store.CreatorAlive(l) {
		return nil
	}
	syscall.Kill(l.CreatorPID, syscall.SIGTERM)
	if waitGone(store, l, timeout) {
		return nil
	}
	syscall.Kill(l.CreatorPID, syscall.SIGKILL)
	if waitGone(store, l, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("owner pid %d did not end after SIGKILL", l.CreatorPID)
}

func waitGone(store *state.Store, l state.Labels, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for store.CreatorAlive(l) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
