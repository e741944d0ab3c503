// Package attribution maps a TCP connection accepted by the egress proxy
// back to the sandbox process and binary that opened it, and pins binary
// identity trust-on-first-use.
//
// A Backend answers one question: given the client address the proxy saw
// (the sandbox side of the connection) and the address the client dialled
// (the proxy listener's address, or SO_ORIGINAL_DST for a redirected
// connection), which sandbox process holds that socket, what is its
// executable, the executable's sha256, and its ancestors up to the sandbox
// init. The /proc backend (NewProcBackend) finds the socket's inode in the
// sandbox's network namespace — by an exact sock_diag query over netlink
// when it may enter the namespace, else from /proc/<pid>/net/tcp{,6} —
// then looks for socket:[inode] only in the fd tables of the sandbox
// cgroup's processes (never all of /proc), and hashes /proc/<pid>/exe
// through a HashCache keyed by the file's identity. Its cost grows with the
// number of sandbox processes and their fds (see BenchmarkProcLookup); a
// later eBPF backend implements the same interface.
//
// Attribution fails closed: a socket nobody in the sandbox holds is
// ErrNotFound, and a socket held by unrelated sandbox processes (passed
// over a Unix socket, or inherited by siblings) is a *SharedError, so the
// proxy denies rather than guessing which binary speaks. When a socket is
// held by a process and its descendants (bash's /dev/tcp inherited by a
// child, or the instant between fork and exec), the topmost holder is
// reported: its binary and ancestors are a subset of every other holder's,
// so a policy that allows it allows them all.
//
// The /proc backend reads a moving target: a process that keeps moving
// its socket between fd numbers can slip past the fd-table scan, so that
// another holder (a child it handed the socket to) is reported alone.
// Only attribution at connect time (the eBPF backend) closes that race.
//
// A Pinner records, per sandbox, the first sha256 seen for each executable
// path; a different hash later is a *MismatchError, which the proxy turns
// into a denial and a Detection Finding.
//
// Privileges: reading another user's /proc/<pid>/fd, /proc/<pid>/exe and
// /proc/<pid>/ns/net needs CAP_SYS_PTRACE (ptrace read access); hashing an
// executable the proxy's user cannot read needs CAP_DAC_READ_SEARCH; the
// sock_diag fast path needs CAP_SYS_ADMIN for setns(2), and without it
// the backend reads the /proc tables instead (slower, same answers).
package attribution

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// MaxAncestors bounds Identity.Ancestors.
const MaxAncestors = 64

// Process is one ancestor of an attributed process.
type Process struct {
	// PID is the host pid.
	PID int `json:"pid"`
	// Exe is the /proc/<pid>/exe link target, as the process's own mount
	// namespace names it (a deleted file ends in " (deleted)").
	Exe string `json:"exe"`
	// Code is set when the process has lost its binary's identity (see
	// Identity.Code).
	Code *ForeignCode `json:"foreign_code,omitempty"`
}

// ForeignCode says why a process has lost its binary's identity: its
// image maps executable code from a file the sandbox could have
// written, or another process was granted write access to its memory.
type ForeignCode struct {
	// Reasons, each one of the Code* constants.
	Reasons []string `json:"reasons"`
	// File is the first such file, as /proc/<pid>/maps names it, or
	// "dev <major>:<minor> inode <n>" when it is no longer mapped; "" for
	// a ptrace grant.
	File string `json:"file,omitempty"`

	dev, ino uint64 // File's (stat(2) encoding), when known
}

// ForeignCode reasons.
const (
	CodeWritablePath  = "writable_path"  // under the workdir or a read_write path
	CodeTmpfs         = "tmpfs"          // on a writable tmpfs or ramfs (the sandbox's /tmp, /dev/shm...)
	CodeMemfd         = "memfd"          // a memfd or other kernel-internal file
	CodeDeleted       = "deleted"        // unlinked since
	CodeWorldWritable = "world_writable" // writable by anyone
	CodeTooDeep       = "too_deep"       // a path deeper than the kernel walk goes
	CodePtrace        = "ptrace"         // another process could write its memory (/proc/<pid>/mem)
	CodeUnknown       = "unknown"        // what it maps could not be checked
)

// Identity is the process that holds a proxied connection's socket. It
// never carries the command line or environment: those hold secrets.
type Identity struct {
	// PID is the host pid.
	PID int `json:"pid"`
	// Exe is the /proc/<pid>/exe link target.
	Exe string `json:"exe"`
	// SHA256 is the lowercase hex sha256 of the running executable (read
	// through /proc/<pid>/exe, so a replaced or deleted file is still the
	// one that runs).
	SHA256 string `json:"sha256"`
	// Code is set when the process has lost its binary's identity: every
	// executable mapping of its image (the executable, its interpreter,
	// each library, LD_PRELOAD and LD_AUDIT objects) must come from a
	// file the sandbox cannot write. The proxy then decides as if Exe
	// were unknown, and refuses with foreign_code what only Exe allowed.
	Code *ForeignCode `json:"foreign_code,omitempty"`
	// Ancestors are the process's parents, nearest first, at most
	// MaxAncestors. The walk stops before the sandbox init, before any
	// process outside the sandbox's process set, and at a parent that is
	// not the process that forked its child (it exited: an orphan
	// inherits nothing, and a process that got the dead parent's pid is
	// nobody's ancestor): none of them is listed.
	Ancestors []Process `json:"ancestors,omitempty"`
	// Connector is the process that connected the socket, as recorded at
	// connect time, when it is not the holder above: the socket was
	// handed on (inherited across exec or by a child, or passed over
	// SCM_RIGHTS). Only the eBPF backend records connectors. Its Exe is
	// "" when it can no longer be named (it has exec'd another binary or
	// exited). The proxy allows only when both the holder and the
	// connector are allowed, so an unnamed connector denies.
	Connector *Process `json:"connector,omitempty"`
	// Backend names the backend that answered: "proc" or "bpf" (with
	// "bpf/fast" when the recorded connector was trusted without the
	// exhaustive search).
	Backend string `json:"backend"`

	// cookie and start identify the connection's socket and the
	// process (its start time) for the eBPF backend's send guard.
	cookie, start uint64
}

// Backend names.
const (
	BackendProc    = "proc"
	BackendBPF     = "bpf"
	BackendBPFFast = "bpf/fast"
)

// Backend attributes connections to sandbox processes. Implementations
// are safe for concurrent use.
type Backend interface {
	// Lookup returns the sandbox process holding the socket whose local
	// address is client and whose remote address is proxy, as seen inside
	// the sandbox's network namespace. For a connection the proxy accepted
	// directly, client is the conn's RemoteAddr and proxy its LocalAddr;
	// for one redirected to it by the fence, proxy is the SO_ORIGINAL_DST.
	// IPv4-mapped IPv6 addresses and IPv4 addresses are interchangeable.
	//
	// Errors: ErrNotFound when no sandbox process holds the socket (it
	// closed already, or it is not the sandbox's), a *SharedError when
	// unrelated sandbox processes hold it, ErrIncomplete when a backend
	// that records connectors has no record of this socket's, ctx's error
	// when cancelled,
	// and others (wrapped) when /proc cannot be read. Every error means
	// deny.
	Lookup(ctx context.Context, client, proxy netip.AddrPort) (*Identity, error)
}

// ErrNotFound: no sandbox process holds the connection's socket.
var ErrNotFound = errors.New("attribution: no sandbox process holds the connection")

// ErrIncomplete: the eBPF backend has no connect record for the socket
// (evicted from its map, or never written). The socket's holder alone is
// not enough to decide on — the process that connected it is unknown,
// and a socket handed from an unlisted connector to an allowed holder
// must not pass because its record was flooded away — so the lookup
// fails closed.
var ErrIncomplete = errors.New("attribution: no connect record for the socket (evicted or never written); its connector is unknown")

// IncompleteError is ErrIncomplete with the socket's holder as the
// exhaustive search found it (nil when it could not be named), for the
// record of the refusal.
type IncompleteError struct {
	Inode  uint64
	Holder *Identity
}

func (e *IncompleteError) Error() string {
	if e.Holder == nil {
		return fmt.Sprintf("%v: socket inode %d", ErrIncomplete, e.Inode)
	}
	return fmt.Sprintf("%v: socket inode %d, held by pid %d (%s)", ErrIncomplete, e.Inode, e.Holder.PID, e.Holder.Exe)
}

// Is makes errors.Is(err, ErrIncomplete) true.
func (e *IncompleteError) Is(target error) bool { return target == ErrIncomplete }

// ErrShared is matched (errors.Is) by every *SharedError.
var ErrShared = errors.New("attribution: socket held by unrelated sandbox processes")

// SharedError says that processes not descended from one another hold the
// same socket, so no single binary can be named.
type SharedError struct {
	Inode uint64
	// PIDs are the topmost holders (host pids), at least two.
	PIDs []int
}

func (e *SharedError) Error() string {
	ps := make([]string, len(e.PIDs))
	for i, p := range e.PIDs {
		ps[i] = strconv.Itoa(p)
	}
	return fmt.Sprintf("attribution: socket inode %d is held by unrelated sandbox processes (pids %s); refusing to pick one",
		e.Inode, strings.Join(ps, ", "))
}

// Is makes errors.Is(err, ErrShared) true.
func (e *SharedError) Is(target error) bool { return target == ErrShared }

// normAddr makes an address comparable with the kernel's socket tables:
// IPv4-mapped IPv6 becomes IPv4 and zones are dropped.
func normAddr(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}

// checkTuple validates Lookup's arguments; errors name the argument.
func checkTuple(client, proxy netip.AddrPort) (netip.AddrPort, netip.AddrPort, error) {
	if !client.IsValid() || client.Port() == 0 {
		return client, proxy, fmt.Errorf("attribution: client address %v: need an IP and a non-zero port", client)
	}
	if !proxy.IsValid() || proxy.Port() == 0 {
		return client, proxy, fmt.Errorf("attribution: proxy address %v: need an IP and a non-zero port", proxy)
	}
	c, p := normAddr(client), normAddr(proxy)
	if c.Addr().Is4() != p.Addr().Is4() {
		return client, proxy, fmt.Errorf("attribution: client %v and proxy %v: address families differ", client, proxy)
	}
	return c, p, nil
}
