//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/console"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/landlock"
	"github.com/palisade-sandbox/palisade/pkg/state"
)

// Run creates the sandbox, runs the command in it, and tears it down. The
// error is non-nil only when the sandbox could not be created; the
// command's own failure is reported in Result.ExitCode.
func Run(ctx context.Context, o Options) (Result, error) {
	s, err := Create(ctx, o)
	defer s.Destroy()
	if err != nil {
		return s.res, err
	}
	if err := s.Start(ctx); err != nil {
		return s.res, err
	}
	return s.Wait(ctx)
}

// A Sandbox is one sandbox through its phases: Create makes it (state,
// cgroup, init, network) without running anything in it; Start lets the
// init confine itself and start the main command; Wait relays until the
// main command ends; Destroy tears down whatever exists (processes,
// cgroup, network, proxy, state). Run, run --detach, exec and delete all
// go through these phases; Destroy is always called, once Create returned,
// whatever the outcome.
type Sandbox struct {
	o     Options
	res   Result
	t0    time.Time
	sig   *Signals
	plan  Plan
	store *state.Store
	name  string
	cg    *cgroup.Group
	ip    *initProc
	icfg  *InitConfig
	uid   uint32
	gid   uint32
	// workdirFD holds the working directory (OpenWorkdir) until teardown.
	workdirFD int

	// cleanups run in reverse order at teardown.
	cleanups  []func() error
	stateOnce sync.Once
	stateDone chan struct{}
	// code is the status recorded at teardown (with --keep); infra, when
	// set, the stage whose failure ended the sandbox.
	code      int
	infra     string
	retain    bool // see Retain
	waited    bool
	destroyed bool

	// Signal relay and PTY.
	initReady   chan struct{}
	readySeen   bool
	stopSignals chan struct{}
	relay       sync.WaitGroup
	pty         *os.File   // the PTY master, when --tty
	ptyMu       sync.Mutex // pty is set by the message loop, read on SIGWINCH

	// dwc delivers the denial watch started in Create; dw is it once
	// Start (or teardown) has taken it.
	dwc chan *denialWatch
	dw  *denialWatch

	cmdPID  int  // the main command's pid in the sandbox (0 when kept alive)
	started bool // the init confined itself and started the main command
	// finished is set once the main command's outcome is known (an exit,
	// or a setup failure reported by the init); Wait then returns
	// finishErr.
	finished  bool
	finishErr error
}

// Name is the sandbox's name (known once Create has reserved it).
func (s *Sandbox) Name() string { return s.name }

// mark logs, at debug level, how long start-up has taken so far
// (`--log-level debug` shows where a slow start spends its time).
func (s *Sandbox) mark(phase string) {
	s.o.Logger.Debug("startup", "phase", phase, "elapsed_us", time.Since(s.t0).Microseconds())
}

func (s *Sandbox) failf(stage string, err error) error {
	s.infra = stage
	s.o.Events.Failed(stage, err.Error(), ExitSandboxFailed)
	return fmt.Errorf("%s: %w", stage, err)
}

// Create runs the preflight and makes the sandbox: state directory,
// cgroup, init (booting, or the prestarted one), its configuration, and
// the network. Nothing runs in it yet. It always returns a Sandbox, to be
// Destroyed even when the error is non-nil.
func Create(ctx context.Context, o Options) (*Sandbox, error) {
	if o.Events == nil {
		o.Events = NopEvents{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Sandbox{o: o, res: Result{Name: o.Name, ExitCode: ExitSandboxFailed}, t0: time.Now(), code: ExitSandboxFailed}
	// Building encoding/json's encoders for the event types costs ~1 ms
	// of CPU on first use; when events are written, do it on the other CPU
	// while the preflight, state and cgroup are set up.
	if w, ok := o.Events.(interface{ Warm() }); ok {
		go w.Warm()
	}
	// The signals the run forwards are caught before anything is created
	// (see CatchSignals); the CLI catches them before the prestart.
	s.sig = o.Signals
	if s.sig == nil {
		s.sig = CatchSignals()
	}

	// Preflight: fail closed before anything is created.
	need := RunFeatures
	if o.Policy.NetworkPolicies > 0 {
		need = append(append([]string(nil), RunFeatures...), "nftables")
	}
	pf := RunPreflight(o.Probe, need...)
	plan, err := Decide(pf, o.Policy.HardRequirement, o.Required, o.AllowDegraded, o.Policy.NetworkPolicies > 0)
	if err != nil {
		return s, s.failf("preflight", err)
	}
	s.plan = plan
	s.mark("preflight")
	uid, gid, err := ResolveIdentity(o.Policy.RunAsUser, o.Policy.RunAsGroup)
	if err != nil {
		return s, s.failf("identity", err)
	}
	s.uid, s.gid = uid, gid
	workdir, err := filepath.Abs(o.Workdir)
	if err != nil {
		return s, s.failf("workdir", err)
	}
	if fi, err := os.Stat(workdir); err != nil || !fi.IsDir() {
		return s, s.failf("workdir", fmt.Errorf("--workdir %s: not a directory", workdir))
	}
	// The working directory is held by a descriptor from here on: no
	// symbolic link on its path is followed (see OpenWorkdir).
	wd, err := OpenWorkdir(workdir)
	if err != nil {
		return s, s.failf("workdir", err)
	}
	s.workdirFD = wd
	s.cleanups = append(s.cleanups, func() error { return unix.Close(wd) })
	if o.Profile != "" && o.Profile != ProfileDefault && o.Profile != ProfileBoundedTmpfs {
		return s, s.failf("profile", fmt.Errorf("--profile %q: want default or bounded-tmpfs", o.Profile))
	}
	if o.Profile == ProfileBoundedTmpfs {
		if err := MakeTestScratch(wd, workdir, uid, gid); err != nil {
			return s, s.failf("profile", err)
		}
	}

	lim, err := sandboxLimits(o.Profile, o.PidsLimit, o.Memory, o.CPUs)
	if err != nil {
		return s, s.failf("profile", err)
	}
	pids, mem, cpus := lim.Pids, lim.MemoryBytes, lim.CPUs

	store, err := state.Open(o.StateRoot)
	if err != nil {
		return s, s.failf("state", err)
	}
	s.store = store
	var labels state.Labels
	if pname, pcg, pinit, ok := o.Prestarted.take(o, lim); ok {
		// The state directory is reserved, the cgroup exists and the
		// init has been booting since the command line was parsed.
		if labels, err = store.Fill(pname, newLabels(o)); err != nil {
			pinit.kill()
			pcg.Destroy()
			store.Remove(pname)
			return s, s.failf("state", err)
		}
		s.cg, s.ip = pcg, pinit
	} else {
		// The state directory and the cgroup are independent: both are
		// made at once, on the two CPUs a start-up has.
		labels, s.cg, err = createStateAndCgroup(store, o, lim)
		if err != nil {
			return s, s.failf(err.(*stageError).stage, err.(*stageError).err)
		}
	}
	name := labels.Name
	s.name = name
	s.res.Name = name
	s.mark("state+cgroup")

	s.stateDone = make(chan struct{})
	s.cleanups = append(s.cleanups, s.cg.Destroy)

	if s.ip == nil {
		// The init boots while its configuration is put together here.
		if s.ip, err = startInit(s.cg, o.InitExe, o.TTY, o.Stdin, o.Stdout, o.Stderr, true); err != nil {
			return s, s.failf("init", err)
		}
	}
	ip := s.ip
	s.cleanups = append(s.cleanups, func() error {
		if !ip.joined {
			// Failed before the init got its configuration.
			ip.kill()
		}
		return nil
	})

	o.Events.Created(name, string(labels.Kind))
	o.Events.PolicyLoaded(o.Policy)
	for _, d := range plan.Degraded {
		o.Events.Degraded(d.Feature, d.Detail, d.OptIn)
		o.Logger.Warn("running degraded", "sandbox", name, "feature", d.Feature, "detail", d.Detail, "opt_in", d.OptIn)
	}
	// Landlock denials are read from the audit multicast group from
	// before the command can be denied anything until after it ended;
	// setting that up overlaps the init's start.
	s.dwc = make(chan *denialWatch, 1)
	go func() { s.dwc <- startDenials(o, plan, pf.LandlockABI, s.cg, name) }()
	s.cleanups = append(s.cleanups, func() error {
		s.denials().stop(o.Logger, name)
		return nil
	})
	homeSrc, err := s.prepareHome(workdir)
	if err != nil {
		return s, s.failf("home", err)
	}
	icfg, spec, err := initConfig(o, plan, name, workdir, homeSrc, uid, gid, pids, mem, cpus, store.Root())
	if err != nil {
		return s, s.failf("spec", err)
	}
	s.icfg = icfg
	if err := CheckWorkdirEntry(workdir, uid, gid, spec.Mounts); err != nil {
		return s, s.failf("workdir", err)
	}

	if err := ip.join(); err != nil {
		return s, s.failf("init", err)
	}
	cmd := ip.cmd
	initPID := cmd.Process.Pid
	s.mark("init-started")
	s.cleanups = append(s.cleanups, func() error {
		if !s.waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return nil
	})

	s.startSignalRelay(initPID)

	// The configuration goes out at once so the init decodes it while the
	// network is attached; only "go" waits for that. The network layer's
	// variables are appended to the command's environment in a message
	// of their own.
	// The configuration carries the working directory's descriptor: the
	// init binds only the directory it names (mountWorkdir).
	if o.Network == nil {
		if err := ip.ctl.send(Message{Type: MsgConfig, Config: icfg}, s.workdirFD); err != nil {
			return s, s.failf("init", err)
		}
	}
	if o.Network != nil {
		if ws, ok := o.Network.(WritableSink); ok {
			ws.SandboxWritable(name, LandlockRules(o.Policy, workdir, homeSrc, o.Profile).ReadWrite)
		}
		env, cleanup, err := o.Network.Attach(ctx, name, initPID)
		if err != nil {
			return s, s.failf("network", err)
		}
		if cleanup != nil {
			s.cleanups = append(s.cleanups, cleanup)
		}
		spec.Process.Env = mergeEnv(spec.Process.Env, env)
		if ts, ok := o.Network.(TrustSource); ok {
			if b := ts.TrustBundle(name); b != "" {
				addTrust(spec, icfg, b)
			}
		}
		if rs, ok := o.Network.(ResolvSource); ok {
			if r, h := rs.ResolvConf(name), rs.Hosts(name); r != "" || h != "" {
				addResolv(spec, icfg, r, h)
			}
		}
		if err := ip.ctl.send(Message{Type: MsgConfig, Config: icfg}, s.workdirFD); err != nil {
			return s, s.failf("init", err)
		}
	}
	return s, nil
}

// startSignalRelay forwards signals to the init, which passes them to the
// command. The supervisor catches them before "go", so the command never
// runs while a signal to the supervisor would still take its default
// action; the relay holds them until the init reports it catches them
// (MsgReady).
func (s *Sandbox) startSignalRelay(initPID int) {
	sigs := s.sig.c
	s.initReady = make(chan struct{})
	s.stopSignals = make(chan struct{})
	initReady, stop := s.initReady, s.stopSignals
	go func() {
		select {
		case <-initReady:
		case <-stop:
			return
		}
		for {
			select {
			case sg := <-sigs:
				s.ptyMu.Lock()
				if sg == unix.SIGWINCH && s.pty != nil {
					resizeFromCaller(s.pty, s.o.Stdin)
				}
				s.ptyMu.Unlock()
				unix.Kill(initPID, sg.(syscall.Signal))
			case <-stop:
				return
			}
		}
	}()
}

// Start lets the init confine itself and start the main command, and
// returns once the command runs (or its start failed). The error is
// non-nil only when the sandbox failed; a command that could not be
// executed is a result (Wait returns it).
func (s *Sandbox) Start(ctx context.Context) error {
	ctl, cmd := s.ip.ctl, s.ip.cmd
	// The exec socket goes to the init with "go": execs are served from
	// the moment the sandbox runs.
	dir, err := s.store.Dir(s.name)
	if err != nil {
		return s.failf("state", err)
	}
	lnFD, err := listenExec(filepath.Join(dir, ExecSocketFile))
	if err != nil {
		return s.failf("exec-socket", err)
	}
	err = ctl.send(Message{Type: MsgExecSocket}, lnFD)
	unix.Close(lnFD)
	if err != nil {
		return s.failf("init", err)
	}
	if err := ctl.send(Message{Type: MsgGo}, -1); err != nil {
		return s.failf("init", err)
	}
	s.mark("go")
	// Landlock's denials are read before the command can be denied
	// anything, knowing the init that creates the sandbox's Landlock
	// domain: the init creates that domain (confining its spawning
	// thread) only on "start". Setting the reading up (the audit lease,
	// the subscription: about 1 ms) overlaps the init's mounts after
	// "go" instead of delaying them.
	s.denials().setInit(cmd.Process.Pid)
	// An init that failed after "go" (its mounts, say) has gone: its
	// error message, read below, says why, not this send's EPIPE.
	if err := ctl.send(Message{Type: MsgStart}, -1); err != nil && !errors.Is(err, unix.EPIPE) && !errors.Is(err, unix.ECONNRESET) {
		return s.failf("init", err)
	}
	initPID := cmd.Process.Pid
	// Bookkeeping for list/status/gc, off the init's critical path: it
	// runs while the init sets the sandbox up.
	st, _ := state.ProcStartTime(initPID)
	s.store.Update(s.name, func(l *state.Labels) {
		l.Status = state.StatusRunning
		l.InitPID = initPID
		l.InitStartTime = st
		l.Cgroup = s.cg.Name()
	})
	// The sandbox's full description (OCI spec, Landlock rules, seccomp)
	// beside its labels: for inspection, and for a later `exec` into the
	// running sandbox, which must confine a new process identically.
	if err := fsutil.ReplaceFile(filepath.Join(dir, ConfigFile), EncodeConfig(s.icfg), 0o600); err != nil {
		s.o.Logger.Warn("write sandbox config", "sandbox", s.name, "err", err)
	}
	for !s.finished && !s.started {
		if err := s.step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Retain makes the state directory outlive the main process, with its
// final state recorded (as --keep does, but without the keep label, so
// gc collects it once the owner is gone), until delete or gc removes it.
// run --detach calls it once the sandbox has started and before it
// reports it: a sandbox that failed to start leaves nothing behind.
func (s *Sandbox) Retain() { s.retain = true }

// Wait relays the init's messages until the main command ends and
// returns how it ended. The error is non-nil only when the sandbox
// itself failed.
func (s *Sandbox) Wait(ctx context.Context) (Result, error) {
	for !s.finished {
		if err := s.step(ctx); err != nil {
			return s.res, err
		}
	}
	return s.res, s.finishErr
}

// step handles one message from the init. It returns an error when the
// sandbox failed; the main command's end sets s.finished.
func (s *Sandbox) step(ctx context.Context) error {
	o, ctl, cmd := s.o, s.ip.ctl, s.ip.cmd
	m, fd, err := ctl.recv()
	if err != nil {
		// The init died without reporting: killed from outside or
		// crashed. The command cannot have survived it.
		werr := cmd.Wait()
		s.waited = true
		s.infra = "init ended unexpectedly"
		o.Events.Failed("init", fmt.Sprintf("init ended unexpectedly: %v", werr), ExitSandboxFailed)
		return fmt.Errorf("init: ended without reporting the command's status: %v", werr)
	}
	switch m.Type {
	case MsgReady:
		if !s.readySeen {
			s.readySeen = true
			close(s.initReady)
		}
	case MsgLog:
		lvl := slog.LevelInfo
		lvl.UnmarshalText([]byte(m.Level))
		o.Logger.Log(ctx, lvl, m.Msg, "sandbox", s.name, "from", "init", "elapsed_us", time.Since(s.t0).Microseconds())
	case MsgPTY:
		if fd < 0 {
			return s.failf("tty", errors.New("init sent no PTY master"))
		}
		s.ptyMu.Lock()
		s.pty, err = startRelay(fd, o.Stdin, o.Stdout, &s.relay)
		s.ptyMu.Unlock()
		if err != nil {
			return s.failf("tty", err)
		}
	case MsgConfined:
		s.mark("confined")
		if m.Confinement != nil {
			o.Events.Confined(*m.Confinement, s.cg.Name())
		}
	case MsgStarted:
		s.mark("command-started")
		s.started = true
		s.cmdPID = m.PID
		if m.PID > 0 {
			o.Events.Launched(m.PID, o.Args, s.uid, s.gid)
		}
	case MsgError:
		cmd.Wait()
		s.waited = true
		s.code = m.Code
		s.res.ExitCode = m.Code
		o.Events.Failed(m.Stage, m.Msg, m.Code)
		s.finished = true
		if m.Code != ExitNotFound && m.Code != ExitNotExecutable {
			s.infra = m.Stage
		}
		if m.Code == ExitNotFound || m.Code == ExitNotExecutable {
			// The sandbox worked; the command could not be executed.
			fmt.Fprintf(stderrOf(o), "sandbox-supervisor: %s\n", m.Msg)
			return nil
		}
		return fmt.Errorf("%s: %s", m.Stage, m.Msg)
	case MsgExit:
		s.mark("command-exited")
		exit := m.Code
		if m.Signal != 0 {
			exit = 128 + m.Signal
		}
		s.finishState(exit)
		s.denials().finish()
		cmd.Wait()
		s.waited = true
		s.mark("init-reaped")
		if s.pty != nil {
			s.relay.Wait()
			s.ptyMu.Lock()
			s.pty.Close()
			s.pty = nil
			s.ptyMu.Unlock()
		}
		if s.cmdPID > 0 {
			o.Events.Exited(s.cmdPID, m.Code, m.Signal)
		}
		s.res.Signal = m.Signal
		s.res.ExitCode = exit
		s.code = exit
		s.finished = true
	}
	return nil
}

// denials returns the sandbox's denial watch, waiting for its start.
func (s *Sandbox) denials() *denialWatch {
	if s.dw == nil && s.dwc != nil {
		s.dw = <-s.dwc
	}
	return s.dw
}

// finishState removes the state directory (or, with keep, records the
// exit) in the background. It starts as soon as the command's status is
// known, so it overlaps the init's exit and the cgroup's removal;
// teardown waits for it.
func (s *Sandbox) finishState(exitCode int) {
	s.stateOnce.Do(func() {
		go func() {
			defer close(s.stateDone)
			if s.o.Keep || s.retain {
				if dir, err := s.store.Dir(s.name); err == nil {
					os.Remove(filepath.Join(dir, ExecSocketFile))
				}
				outcome, reason := s.outcome(exitCode)
				s.store.Update(s.name, func(l *state.Labels) {
					l.Status = state.StatusExited
					l.ExitCode = &exitCode
					l.Exited = time.Now().UTC().Truncate(time.Second)
					l.Outcome, l.Reason = outcome, reason
				})
				return
			}
			if err := s.store.Remove(s.name); err != nil {
				s.o.Logger.Warn("remove state", "sandbox", s.name, "err", err)
			}
		}()
	})
}

// outcome is the main process's final state for the labels (seed 004):
// infrastructure failures are kept apart from the command's own result.
func (s *Sandbox) outcome(exitCode int) (string, string) {
	switch {
	case s.infra != "":
		return "error", "infrastructure_failure: " + s.infra
	case exitCode == 0:
		return "completed", "main_process_completed"
	default:
		return "failed", "main_process_failed"
	}
}

// Destroy tears down everything Create made, in reverse order: the
// signal relay, the init and the command, the network and proxy, the
// cgroup, and the state directory (kept with its exit status under
// --keep). It is safe to call more than once.
func (s *Sandbox) Destroy() {
	if s.destroyed {
		return
	}
	s.destroyed = true
	if s.stopSignals != nil {
		close(s.stopSignals)
	}
	if s.ip != nil {
		s.ip.ctl.close()
	}
	if s.stateDone != nil {
		s.finishState(s.code)
		for i := len(s.cleanups) - 1; i >= 0; i-- {
			if err := s.cleanups[i](); err != nil {
				s.o.Logger.Warn("teardown", "sandbox", s.name, "err", err)
			}
		}
		<-s.stateDone
		s.mark("teardown")
	}
	s.sig.Stop()
	// A prestarted init that this run does not take (it failed before, or
	// it does not fit) is killed and its cgroup removed.
	s.o.Prestarted.Abort()
}

// Signals catches the signals a run forwards to its command.
type Signals struct {
	c    chan os.Signal
	once sync.Once
}

// CatchSignals catches the signals a run forwards. Call it before
// anything of the sandbox is created: a signal that arrives later waits in
// the channel and is forwarded once the init catches signals itself,
// instead of killing the supervisor half-way through creating the
// sandbox; one that arrives earlier ends a supervisor that has made
// nothing yet. (It costs about 0.1 ms: signal.Notify does a thread
// handshake per signal.)
func CatchSignals() *Signals {
	s := &Signals{c: make(chan os.Signal, 16)}
	signal.Notify(s.c, forwarded...)
	return s
}

// Stop stops catching, in the background: signal.Stop waits until the
// signal goroutine is idle (0.1-0.4 ms here), and nothing needs to wait
// for that. A signal that still arrives lands in the buffered channel,
// which nothing reads any more.
func (s *Signals) Stop() {
	s.once.Do(func() {
		go signal.Stop(s.c)
	})
}

// stageError is a creation failure and the stage it belongs to.
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.stage + ": " + e.err.Error() }

// createStateAndCgroup reserves the sandbox's name with its state
// directory, then writes its labels and creates its cgroup concurrently.
// The state directory always exists before the cgroup, so gc can find
// whatever a crash leaves. A generated name whose cgroup exists (a
// leftover) is drawn again; on any error nothing is left behind.
func createStateAndCgroup(store *state.Store, o Options, lim cgroup.Limits) (state.Labels, *cgroup.Group, error) {
	for attempt := 0; ; attempt++ {
		name, err := store.Reserve(o.Name)
		if err != nil {
			return state.Labels{}, nil, &stageError{"state", err}
		}
		type cgResult struct {
			g   *cgroup.Group
			err error
		}
		cgc := make(chan cgResult, 1)
		go func() {
			g, err := cgroup.New(name, lim)
			cgc <- cgResult{g, err}
		}()
		labels, serr := store.Fill(name, newLabels(o))
		cr := <-cgc
		if serr == nil && cr.err == nil {
			return labels, cr.g, nil
		}
		if cr.err == nil {
			cr.g.Destroy()
		}
		store.Remove(name)
		if serr != nil {
			return state.Labels{}, nil, &stageError{"state", serr}
		}
		if o.Name == "" && attempt < 8 && errors.Is(cr.err, cgroup.ErrExists) {
			continue
		}
		return state.Labels{}, nil, &stageError{"cgroup", cr.err}
	}
}

// newLabels are the labels a sandbox's state starts with.
func newLabels(o Options) state.Labels {
	return state.Labels{
		Kind: o.Kind, Keep: o.Keep, AgentID: o.AgentID, EventsFile: o.EventsFile,
		PolicySHA256: o.Policy.SHA256, PolicySource: o.Policy.Source, NoMain: o.KeepAlive,
	}
}

// initConfig builds the sandbox's OCI spec and everything else the init
// needs, including the compiled seccomp filter.
func initConfig(o Options, plan Plan, name, workdir, homeSrc string, uid, gid uint32, pids, mem int64, cpus float64, stateRoot string) (*InitConfig, *specs.Spec, error) {
	home := SandboxHome(o.Home)
	spec, err := BuildSpec(SpecInput{
		Name: name, Kind: string(o.Kind), Args: o.Args, KeepAlive: o.KeepAlive, Env: o.Env, Workdir: workdir,
		Home: home, HomeSource: homeSrc,
		UID: uid, GID: gid, TTY: o.TTY, Hostname: name, PolicySHA: o.Policy.SHA256,
		Compat: compatName(o.Policy.HardRequirement), Profile: o.Profile,
		PidsLimit: pids, MemoryBytes: mem, CPUs: cpus,
		HidePaths: []string{stateRoot},
	})
	if err != nil {
		return nil, nil, err
	}
	if o.TTY {
		// The command starts with the caller's window size.
		if f, ok := o.Stdin.(*os.File); ok {
			if ws, err := winsize(f); err == nil && ws.Row > 0 && ws.Col > 0 {
				spec.Process.ConsoleSize = &specs.Box{Height: uint(ws.Row), Width: uint(ws.Col)}
			}
		}
	}
	icfg := &InitConfig{Spec: spec, Seccomp: plan.Seccomp, Timing: o.Logger.Enabled(context.Background(), slog.LevelDebug)}
	if plan.Landlock {
		icfg.Landlock = LandlockRules(o.Policy, workdir, home, o.Profile)
	}
	if o.Profile == ProfileBoundedTmpfs {
		icfg.StorageCheck = BoundedStoragePath
	}
	if plan.Seccomp {
		if icfg.SeccompFilter, icfg.SeccompRules, err = compileSeccomp(); err != nil {
			return nil, nil, fmt.Errorf("seccomp: %w", err)
		}
	}
	return icfg, spec, nil
}

func stderrOf(o Options) io.Writer {
	if o.Stderr != nil {
		return o.Stderr
	}
	return io.Discard
}

func compatName(hard bool) string {
	if hard {
		return "hard_requirement"
	}
	return "best_effort"
}

// LandlockRules derives the Landlock grants from the policy plus the
// sandbox's own baseline: its private /proc read-only, its devices, its
// /dev/shm, its HOME (home, "" for none) read-write, and the workdir
// read-write when include_workdir is set.
func LandlockRules(p PolicyInfo, workdir, home, profile string) *landlock.Rules {
	r := &landlock.Rules{HardRequirement: p.HardRequirement}
	r.ReadOnly = append(r.ReadOnly, p.ReadOnly...)
	r.ReadOnly = append(r.ReadOnly, "/proc", "/dev/random", "/dev/urandom")
	r.ReadWrite = append(r.ReadWrite, p.ReadWrite...)
	r.ReadWrite = append(r.ReadWrite, "/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts", "/dev/shm")
	if home != "" {
		r.ReadWrite = append(r.ReadWrite, home)
	}
	if p.IncludeWorkdir {
		r.ReadWrite = append(r.ReadWrite, workdir)
	}
	if profile == ProfileBoundedTmpfs {
		r.ReadWrite = append(r.ReadWrite, BoundedStoragePath)
	}
	return r
}

// startRelay copies between the caller's stdio and the PTY master, with
// the caller's terminal in raw mode when it is one.
func startRelay(fd int, stdin io.Reader, stdout io.Writer, wg *sync.WaitGroup) (*os.File, error) {
	pty := os.NewFile(uintptr(fd), "ptmx")
	if _, err := winsize(pty); err != nil {
		pty.Close()
		return nil, fmt.Errorf("pty master: %w", err)
	}
	if in, ok := stdin.(*os.File); ok && makeRaw(in) {
		resizeFromCaller(pty, stdin)
	}
	// The sandbox's terminal already turns "\n" into "\r\n": a caller's
	// terminal on stdout that is not the one made raw above would do it
	// again ("\r\r\n"), so it goes raw too.
	if out, ok := stdout.(*os.File); ok && !sameFile(out, stdin) {
		makeRaw(out)
	}
	if stdin != nil {
		go io.Copy(pty, stdin)
	}
	if stdout != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			io.Copy(stdout, pty)
		}()
	}
	return pty, nil
}

// makeRaw puts the caller's terminal f in raw mode, output processing
// included (containerd/console's raw mode keeps OPOST, which would turn
// the sandbox terminal's "\r\n" into "\r\r\n"), to be restored on exit.
// It reports whether f is a terminal.
func makeRaw(f *os.File) bool {
	cur, err := console.ConsoleFromFile(f)
	if err != nil {
		return false
	}
	if err := cur.SetRaw(); err != nil {
		return true
	}
	restoreOnExit(cur)
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS); err == nil {
				t.Oflag &^= unix.OPOST
				unix.IoctlSetTermios(int(fd), unix.TCSETS, t)
			}
		})
	}
	return true
}

// sameFile reports whether b is an *os.File open on the same file as a.
func sameFile(a *os.File, b io.Reader) bool {
	bf, ok := b.(*os.File)
	if !ok {
		return false
	}
	ai, err1 := a.Stat()
	bi, err2 := bf.Stat()
	return err1 == nil && err2 == nil && os.SameFile(ai, bi)
}

var restoreMu sync.Mutex
var restoreList []console.Console

func restoreOnExit(c console.Console) {
	restoreMu.Lock()
	restoreList = append(restoreList, c)
	restoreMu.Unlock()
}

// RestoreTerminals puts every terminal the relay made raw back to its
// previous mode. The CLI defers it.
func RestoreTerminals() {
	restoreMu.Lock()
	defer restoreMu.Unlock()
	for _, c := range restoreList {
		c.Reset()
	}
	restoreList = nil
}

// resizeFromCaller gives the sandbox's terminal the caller's window size
// when the caller's stdin is a terminal. It goes through SyscallConn, not
// Fd, so it is safe while other goroutines read and write the files.
func resizeFromCaller(pty *os.File, stdin io.Reader) {
	f, ok := stdin.(*os.File)
	if !ok {
		return
	}
	ws, err := winsize(f)
	if err != nil {
		return
	}
	rc, err := pty.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) { unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) })
}

// winsize reads a terminal's window size.
func winsize(f *os.File) (*unix.Winsize, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var ws *unix.Winsize
	var ierr error
	if err := rc.Control(func(fd uintptr) { ws, ierr = unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ) }); err != nil {
		return nil, err
	}
	return ws, ierr
}
