package sandbox

import (
	"golang.org/x/net/bpf"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/palisade-sandbox/palisade/pkg/landlock"
)

// InitCommand is the hidden first argument that makes the supervisor
// binary act as the in-sandbox init. main dispatches it before parsing
// anything else.
const InitCommand = "__palisade_init"

// ConfigFile is the name, in a sandbox's state directory, of its
// InitConfig (the OCI spec, the Landlock rules and the compiled seccomp
// filter) in the control socket's wire form, written when the sandbox
// starts. ReadConfig decodes it; `sandbox-supervisor status NAME
// --config` prints it as JSON.
const ConfigFile = "init.conf"

// initFD is the number of the control socket in the init process.
const initFD = 3

// Exit statuses shared with the CLI (docker-run style).
const (
	ExitSandboxFailed = 125 // the sandbox itself could not be created
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// InitConfig is what the supervisor hands to the init.
type InitConfig struct {
	Spec *specs.Spec `json:"spec"`
	// Landlock is nil when Landlock is skipped (best_effort on a kernel
	// without it); the supervisor has already reported the degraded run.
	Landlock *landlock.Rules `json:"landlock,omitempty"`
	Seccomp  bool            `json:"seccomp"`
	// SeccompFilter is the compiled filter the init installs when Seccomp
	// is set (compiled by the supervisor, off the init's critical path),
	// and SeccompRules the number of profile rules it encodes.
	SeccompFilter []bpf.RawInstruction `json:"-"`
	SeccompRules  int                  `json:"seccomp_rules,omitempty"`
	// StorageCheck, when set, is a path that must be a writable tmpfs
	// before the command runs (bounded-tmpfs profile preflight).
	StorageCheck string `json:"storage_check,omitempty"`
	// Timing asks the init to report how long each setup step took (a
	// debug-level log message).
	Timing bool `json:"timing,omitempty"`

	// workdirFD is the supervisor's descriptor of the working directory,
	// received with the configuration (in the init only; -1 without).
	workdirFD int
}

// Message is one message on the control socket (binary wire form, see
// wire.go; the json tags serve config.json and debugging output).
type Message struct {
	Type string `json:"type"` // see the Msg* constants

	Config *InitConfig `json:"config,omitempty"` // MsgConfig

	// MsgConfined: what the init applied.
	Confinement *Confinement `json:"confinement,omitempty"`

	PID int `json:"pid,omitempty"` // MsgStarted: the command's pid in the sandbox

	Exec *ExecRequest `json:"exec,omitempty"` // MsgExec

	// MsgExit
	Code   int `json:"code,omitempty"`
	Signal int `json:"signal,omitempty"`

	// MsgError / MsgLog
	Stage string `json:"stage,omitempty"`
	Msg   string `json:"msg,omitempty"`
	Level string `json:"level,omitempty"`
}

// Message types.
const (
	MsgConfig   = "config"   // supervisor -> init: the InitConfig
	MsgGo       = "go"       // supervisor -> init: cgroup and network are in place
	MsgStart    = "start"    // supervisor -> init, after go: denials are read; confine, start the command
	MsgReady    = "ready"    // init -> supervisor: it catches the forwarded signals
	MsgLog      = "log"      // init -> supervisor: a log line
	MsgPTY      = "pty"      // init -> supervisor: carries the PTY master (SCM_RIGHTS)
	MsgConfined = "confined" // init -> supervisor: confinement applied
	MsgStarted  = "started"  // init -> supervisor: the command runs
	MsgExit     = "exit"     // init -> supervisor: the command ended
	MsgError    = "error"    // init -> supervisor: setup failed; Code is the exit status

	// MsgExecSocket (supervisor -> init, before MsgGo) carries the
	// listening exec socket (ExecSocketFile). On a connection to it a
	// client sends MsgExec (with its stdin, stdout and stderr unless
	// Terminal) and MsgSignal; the init answers MsgPTY, MsgStarted,
	// MsgExit or MsgError, as for the main command.
	MsgExecSocket = "exec-socket"
	MsgExec       = "exec"   // exec client -> init: run a command
	MsgSignal     = "signal" // exec client -> init: Signal for the exec'd command
)

// ExecSocketFile is the name, in a sandbox's state directory, of the
// root-only Unix socket on which its init takes exec requests.
const ExecSocketFile = "exec.sock"

// ExecRequest asks a sandbox's init to run a command beside the main
// one, with the main command's confinement.
type ExecRequest struct {
	Args []string `json:"args"`
	// Env are K=V pairs set on top of the sandbox's environment; a
	// reserved name (ReservedEnv) is refused.
	Env []string `json:"env,omitempty"`
	// Workdir is the command's directory ("" = the sandbox's workdir).
	Workdir string `json:"workdir,omitempty"`
	// LoginShell runs Args through "bash -lc" ("sh -c" without bash).
	LoginShell bool `json:"login_shell,omitempty"`
	Terminal   bool `json:"terminal,omitempty"`
	Rows       int  `json:"rows,omitempty"`
	Cols       int  `json:"cols,omitempty"`
}

// Confinement describes what the init applied, for the 5019 event.
type Confinement struct {
	Landlock     landlock.Result `json:"landlock"`
	Seccomp      bool            `json:"seccomp"`
	SeccompRules int             `json:"seccomp_rules,omitempty"`
	Namespaces   []string        `json:"namespaces"`
	UID          uint32          `json:"uid"`
	GID          uint32          `json:"gid"`
	Mounts       int             `json:"mounts"`
}
