package seccomp

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/net/bpf"
)

// Config selects the profile. The zero value is the default sandbox profile
// for the architecture the binary was built for.
type Config struct {
	// AllowNamespaceClone lets clone and unshare create namespaces (the
	// "clone-namespace" and "unshare-namespace" rules are left out). setns
	// stays denied. Default false.
	AllowNamespaceClone bool

	// Arch is the Go name of the architecture whose syscall numbers the
	// filter uses: "amd64" or "arm64"; Build fails on any other. Empty
	// means runtime.GOARCH, the only value worth installing: the filter
	// kills a process whose architecture is not Arch.
	Arch string

	// denyErrno replaces EPERM as the errno of denied syscalls. Tests use
	// a value no kernel path returns, to tell the filter's denial from the
	// kernel's own EPERM. Zero means EPERM.
	denyErrno uint16
}

// Action is what the filter returns for a syscall: a SECCOMP_RET_* value.
type Action uint32

// The actions the profile uses.
const (
	ActionAllow       Action = 0x7fff0000 // SECCOMP_RET_ALLOW
	ActionKillProcess Action = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	actionErrnoBase   Action = 0x00050000 // SECCOMP_RET_ERRNO
	actionDataMask    Action = 0x0000ffff // SECCOMP_RET_DATA
)

// Linux errno numbers (identical on x86_64 and arm64), spelled out so that
// Build gives the same filter on every build platform.
const (
	EPERM  = 1
	ENOSYS = 38
)

// maxErrno is the largest errno the kernel passes through (MAX_ERRNO).
const maxErrno = 4095

// ActionErrno returns the action that fails a syscall with errno.
func ActionErrno(errno uint16) Action { return actionErrnoBase | Action(errno) }

// Errno reports the errno an errno action returns.
func (a Action) Errno() (uint16, bool) {
	if a&^actionDataMask != actionErrnoBase {
		return 0, false
	}
	return uint16(a & actionDataMask), true
}

// String names the action: "allow", "kill_process", "errno(EPERM)".
func (a Action) String() string {
	switch a {
	case ActionAllow:
		return "allow"
	case ActionKillProcess:
		return "kill_process"
	}
	if e, ok := a.Errno(); ok {
		switch e {
		case EPERM:
			return "errno(EPERM)"
		case ENOSYS:
			return "errno(ENOSYS)"
		}
		return "errno(" + strconv.Itoa(int(e)) + ")"
	}
	return fmt.Sprintf("action(%#x)", uint32(a))
}

// MarshalText makes an Action appear by name in JSON events.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Rule describes one rule of a profile, for events and documentation.
type Rule struct {
	// Name is stable and unique within a profile, e.g. "socket-af-packet".
	Name string `json:"name"`
	// Syscall is the syscall the rule applies to, or "*" for the
	// architecture and x32 checks that apply to every syscall.
	Syscall string `json:"syscall"`
	// Condition says when the rule matches; empty means always.
	Condition string `json:"condition,omitempty"`
	// Action is what the filter returns when the rule matches.
	Action Action `json:"action"`
}

// Profile is an ordered rule list. Build compiles the same rules that
// Rules describes.
type Profile struct {
	cfg   Config
	rules []rule
}

// DefaultProfile is the profile Build(Config{}) compiles.
func DefaultProfile() *Profile { return NewProfile(Config{}) }

// NewProfile returns the profile for cfg.
func NewProfile(cfg Config) *Profile { return &Profile{cfg: cfg, rules: profileRules(cfg)} }

// Rules lists the profile's rules in the order the filter applies them.
// Rules whose syscall does not exist on an architecture (iopl on arm64)
// are listed but compile to nothing there.
func (p *Profile) Rules() []Rule {
	out := make([]Rule, len(p.rules))
	for i, r := range p.rules {
		out[i] = r.Rule
	}
	return out
}

// Count is the number of rules.
func (p *Profile) Count() int { return len(p.rules) }

// Build compiles the profile into a classic BPF program for Install.
func (p *Profile) Build() ([]bpf.RawInstruction, error) { return compile(p.cfg, p.rules) }

// ruleKind separates the two whole-ABI checks from per-syscall rules.
type ruleKind int

const (
	kindSyscall ruleKind = iota
	kindArch             // seccomp_data.arch != the build architecture
	kindX32              // nr & x32 bit
)

type cmpOp int

const (
	opEq     cmpOp = iota // (arg & mask) == val
	opNe                  // (arg & mask) != val
	opAnySet              // arg & val != 0
)

// check tests the low 32 bits of one syscall argument.
type check struct {
	arg  int    // argument index 0..5
	mask uint32 // ANDed in before opEq/opNe when non-zero
	op   cmpOp
	val  uint32
}

// rule is a Rule plus what the compiler needs: the checks are ANDed; a
// rule without checks matches every call of its syscall.
type rule struct {
	Rule
	kind   ruleKind
	checks []check
}

// Constants from the Linux UAPI headers used by the rules.
const (
	afUnix      = 1
	afNetlink   = 16
	afPacket    = 17
	afBluetooth = 31
	afAlg       = 38
	afVsock     = 40

	sockRaw      = 3
	sockTypeMask = 0xf // SOCK_TYPE_MASK: strips SOCK_NONBLOCK/SOCK_CLOEXEC

	netlinkRoute = 0
	ipprotoMPTCP = 262

	tiocsti   = 0x5412
	tioclinux = 0x541c
	tiocsetd  = 0x5423

	cloneNewTime   = 0x00000080 // unshare/clone3 only: in clone it is an exit-signal bit
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000

	// cloneNSFlags are the namespace flags clone(2) honours. CLONE_NEWTIME
	// is not among them: clone masks the low byte (CSIGNAL) off its flags.
	cloneNSFlags   = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC | cloneNewUser | cloneNewPID | cloneNewNet
	unshareNSFlags = cloneNSFlags | cloneNewTime

	x32SyscallBit = 0x40000000
)

// deniedSyscalls are denied whatever their arguments, grouped by why.
var deniedSyscalls = []string{
	// Reading or controlling other processes.
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
	// Kernel attack surface with little use in a coding sandbox.
	"bpf", "perf_event_open", "userfaultfd",
	"keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Loading code into, or replacing, the kernel.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	// Changing the filesystem view.
	"mount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsconfig", "fsmount", "fspick",
	"open_tree", "open_tree_attr", "move_mount", "mount_setattr",
	"setns", "open_by_handle_at",
	// Host-wide state.
	"swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd",
	"clock_settime", "clock_adjtime", "settimeofday", "adjtimex",
	"syslog", "iopl", "ioperm",
	// Obsolete.
	"lookup_dcookie", "nfsservctl", "uselib",
}

func profileRules(cfg Config) []rule {
	deny := ActionErrno(cfg.errno())
	low := func(i int, what string) string { return fmt.Sprintf("%s (low 32 bits of arg%d)", what, i) }
	rs := []rule{
		{Rule: Rule{Name: "arch", Syscall: "*", Condition: "seccomp_data.arch is not the filter's architecture (e.g. i386 int 0x80 on x86_64)", Action: ActionKillProcess}, kind: kindArch},
		{Rule: Rule{Name: "x32", Syscall: "*", Condition: "syscall number has the x32 bit 0x40000000 set (x86_64 only)", Action: deny}, kind: kindX32},
		{Rule: Rule{Name: "clone3", Syscall: "clone3", Action: ActionErrno(ENOSYS)}},
	}
	if !cfg.AllowNamespaceClone {
		rs = append(rs,
			rule{Rule: Rule{Name: "clone-namespace", Syscall: "clone", Action: deny,
				Condition: low(0, "flags") + " has any of CLONE_NEWNS|CLONE_NEWCGROUP|CLONE_NEWUTS|CLONE_NEWIPC|CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNET"},
				checks: []check{{arg: 0, op: opAnySet, val: cloneNSFlags}}},
			rule{Rule: Rule{Name: "unshare-namespace", Syscall: "unshare", Action: deny,
				Condition: low(0, "flags") + " has any CLONE_NEW* flag, CLONE_NEWTIME included"},
				checks: []check{{arg: 0, op: opAnySet, val: unshareNSFlags}}},
		)
	}
	family := func(name string, af uint32) rule {
		return rule{Rule: Rule{Name: "socket-" + name, Syscall: "socket", Action: deny,
			Condition: low(0, "domain") + " == " + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))},
			checks: []check{{arg: 0, op: opEq, val: af}}}
	}
	rs = append(rs,
		family("af-packet", afPacket),
		family("af-vsock", afVsock),
		family("af-bluetooth", afBluetooth),
		family("af-alg", afAlg),
		rule{Rule: Rule{Name: "socket-netlink-non-route", Syscall: "socket", Action: deny,
			Condition: low(0, "domain") + " == AF_NETLINK and " + low(2, "protocol") + " != NETLINK_ROUTE"},
			checks: []check{{arg: 0, op: opEq, val: afNetlink}, {arg: 2, op: opNe, val: netlinkRoute}}},
		rule{Rule: Rule{Name: "socket-raw", Syscall: "socket", Action: deny,
			Condition: low(0, "domain") + " != AF_NETLINK and " + low(1, "type") + " & 0xf == SOCK_RAW"},
			checks: []check{{arg: 0, op: opNe, val: afNetlink}, {arg: 1, mask: sockTypeMask, op: opEq, val: sockRaw}}},
		rule{Rule: Rule{Name: "socket-mptcp", Syscall: "socket", Action: deny,
			Condition: low(2, "protocol") + " == IPPROTO_MPTCP (262)"},
			checks: []check{{arg: 2, op: opEq, val: ipprotoMPTCP}}},
	)
	for _, io := range []struct {
		name string
		req  uint32
	}{{"TIOCSTI", tiocsti}, {"TIOCLINUX", tioclinux}, {"TIOCSETD", tiocsetd}} {
		rs = append(rs, rule{Rule: Rule{Name: "ioctl-" + strings.ToLower(io.name), Syscall: "ioctl", Action: deny,
			Condition: low(1, "request") + " == " + io.name},
			checks: []check{{arg: 1, op: opEq, val: io.req}}})
	}
	for _, s := range deniedSyscalls {
		rs = append(rs, rule{Rule: Rule{Name: s, Syscall: s, Action: deny}})
	}
	return rs
}

func (c Config) errno() uint16 {
	if c.denyErrno == 0 {
		return EPERM
	}
	return c.denyErrno
}
