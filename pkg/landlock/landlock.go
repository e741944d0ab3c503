// Package landlock turns the filesystem part of a sandbox policy into a
// Landlock ruleset and enforces it on the calling OS thread.
//
// The ruleset handles every filesystem right of the highest ABI that both
// the kernel and go-landlock support, plus the abstract-unix-socket and
// signal scopes (ABI >= 6). It never handles Landlock's TCP rights:
// network confinement belongs to the network namespace and the proxy
// (MPTCP sockets bypass Landlock's TCP rules on some kernels).
//
// Read-only paths get read and execute rights; read-write paths get every
// filesystem right, including truncate, refer (cross-directory rename) and
// device ioctls. Paths are opened when the ruleset is built, so build it
// before dropping privileges.
//
// From ABI 7 (MinLogABI) the domain is created with
// LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON, so the kernel writes an audit
// record for every denial of the command and all its descendants, across
// execve (by default Landlock stops logging at the first execve). The
// records reach the audit subsystem only while audit is enabled; package
// landlockaudit reads them.
//
// Enforce applies to the calling thread only: lock the goroutine to its
// thread first and fork the confined child from that thread.
package landlock

import "fmt"

// MinHardABI is the lowest Landlock ABI accepted under
// `landlock.compatibility: hard_requirement`. ABI 3 is the first that
// handles truncate; below it a read-only file could be truncated.
const MinHardABI = 3

// MinLogABI is the first Landlock ABI whose denials can be logged to the
// audit subsystem (Linux 6.15).
const MinLogABI = 7

// Rules is the filesystem access to grant.
type Rules struct {
	ReadOnly  []string // read and execute
	ReadWrite []string // every filesystem right
	// HardRequirement aborts on any failure (missing Landlock, ABI below
	// MinHardABI, a path that cannot be opened). Otherwise failures skip
	// the path and are reported in Result.Skipped.
	HardRequirement bool
	// Descriptors gives, for some of the paths above, an open descriptor
	// of the file the rule is for: the rule is then built from it
	// (/proc/self/fd/N), not by opening the name again, which someone
	// could have re-pointed meanwhile. The caller keeps them open until
	// Build returns and closes them. Never on the wire.
	Descriptors map[string]int `json:"-"`
}

// Skip records a path that was left out of the ruleset and why.
type Skip struct {
	Path   string `json:"path"`
	Access string `json:"access"` // "read_only" or "read_write"
	Reason string `json:"reason"`
}

// Result describes what was enforced.
type Result struct {
	ABI       int    `json:"abi"`        // kernel ABI in use (0: not enforced)
	ReadOnly  int    `json:"read_only"`  // rules granted read-only
	ReadWrite int    `json:"read_write"` // rules granted read-write
	Scopes    string `json:"scopes"`     // handled IPC scopes, e.g. "abstract_unix_socket,signal"
	Handled   string `json:"handled"`    // handled filesystem rights
	// Logging is the audit logging flag set on the domain ("new_exec_on"
	// from ABI 7: denials of the command and its descendants are logged),
	// "" below ABI 7.
	Logging  string `json:"logging,omitempty"`
	Skipped  []Skip `json:"skipped,omitempty"`
	Enforced bool   `json:"enforced"`
}

func (r Result) String() string {
	if !r.Enforced {
		return "landlock not enforced"
	}
	return fmt.Sprintf("landlock ABI %d: %d read-only and %d read-write rules, %d skipped, scopes %s",
		r.ABI, r.ReadOnly, r.ReadWrite, len(r.Skipped), r.Scopes)
}
