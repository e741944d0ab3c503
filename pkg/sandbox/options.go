package sandbox

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/palisade-sandbox/palisade/pkg/state"
)

// NetworkAttacher is the seam where the network layer joins a sandbox: it
// is called once the sandbox's network namespace exists (as
// /proc/<initPID>/ns/net) and before the command starts. It returns
// variables the sandbox environment must carry (for example the proxy
// variables) — they are reserved and override --env — and a cleanup
// function run at teardown. A nil attacher leaves the namespace with
// loopback only.
type NetworkAttacher interface {
	Attach(ctx context.Context, sandbox string, initPID int) (env []string, cleanup func() error, err error)
}

// WritableSink is implemented by a NetworkAttacher that needs to know
// what the sandbox may write before Attach: the host paths of its
// Landlock read-write grants (workdir, HOME, read_write paths). The
// egress proxy treats a process that maps executable code from under
// one of them as having lost its binary's identity.
type WritableSink interface {
	SandboxWritable(sandbox string, paths []string)
}

// Options describe one sandbox run.
type Options struct {
	Name    string // "" generates sbx-<hex>
	Kind    state.Kind
	AgentID string
	Args    []string
	// KeepAlive starts no main command (Args empty): the sandbox runs,
	// for execs, until it is signalled (delete) and then ends with 0.
	KeepAlive bool
	// EventsFile, recorded in the labels for `logs`, is the file the
	// events go to ("" when they go elsewhere).
	EventsFile string
	// Env is the command's complete environment (see BuildEnv). Variables
	// returned by the NetworkAttacher are added on top.
	Env     []string
	Workdir string
	// Home is the host directory bound as the command's HOME (--home; it
	// must then be HOME in Env too): created for the sandbox identity when
	// missing. "" gives the sandbox a HOME of its own in its state
	// directory, bound at DefaultHome (see HomeDirName).
	Home      string
	TTY       bool
	Keep      bool
	StateRoot string
	Policy    PolicyInfo
	Profile   string
	PidsLimit int64
	Memory    int64
	CPUs      float64

	AllowDegraded bool
	Required      bool // MAC_OPENSHELL_REQUIRED

	// InitExe is the init's binary ("" = DefaultInitExe: palisade-init
	// beside the running executable). It must pass openInitBinary's
	// checks (root's, writable by nobody else); the sandbox is not
	// created otherwise.
	InitExe string
	// Prestarted, when set, holds a cgroup and init started (Prestart)
	// from the same command line before the policy was loaded; Run takes
	// them when they fit and aborts them otherwise.
	Prestarted *Prestarted
	// Signals, when set, are the forwarded signals the caller began
	// catching (CatchSignals) before anything was created; Run stops them.
	// nil: Run catches them itself.
	Signals *Signals
	Probe   Prober // nil = real kernel probes
	Network NetworkAttacher
	Events  Events
	Logger  *slog.Logger

	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// ErrIDMismatch reports that a sandbox name no longer carries the id a
// guarded operation expected (ExecOptions.ExpectID): another sandbox
// took the name. Nothing was run.
var ErrIDMismatch = errors.New("the sandbox has another id")

// Result is how the run ended.
type Result struct {
	Name     string
	ExitCode int // the command's status, 128+N for signal N, 125/126/127
	Signal   int
}

// PrestartOptions are what the init's start depends on: all known from
// the command line, before the policy is loaded.
type PrestartOptions struct {
	Name      string // "" generates sbx-<hex>
	StateRoot string // where the sandbox's state directory is reserved
	Profile   string
	PidsLimit int64
	Memory    int64
	CPUs      float64
	TTY       bool
	InitExe   string

	Stdin          io.Reader
	Stdout, Stderr io.Writer
}
