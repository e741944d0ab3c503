//go:build linux

package landlockaudit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/state"
)

// CoordDir is where supervisors on one host coordinate audit enablement:
// a lock file and the list of running supervisors that need audit on.
// Audit is one setting for the whole host, so the coordination is too.
var CoordDir = "/run/palisade/audit"

// Mode says how denial records reach the supervisor.
type Mode string

const (
	// ModeEnabled: audit was off and no audit daemon owned it, so a
	// supervisor turned it on; the last one to finish turns it off again.
	ModeEnabled Mode = "enabled-while-sandboxes-run"
	// ModeAlreadyOn: audit was already on (set by the operator), no
	// daemon: only read.
	ModeAlreadyOn Mode = "already-on"
	// ModeDaemon: an audit daemon is registered; its settings are never
	// touched, records are read from the multicast group.
	ModeDaemon Mode = "audit-daemon"
	// ModeUnavailable: no denial events (see Lease.Detail).
	ModeUnavailable Mode = "unavailable"
)

// Lease is one supervisor's claim on audit being enabled. Release it when
// the sandbox ends.
type Lease struct {
	Mode   Mode
	Detail string // why unavailable, or which daemon owns audit
	token  string
	c      *coordinator
}

// coordinator is what the lease protocol works on: the kernel's audit
// status and the coordination files. Supervisors use host(): the kernel
// (AUDIT_GET / AUDIT_SET) and CoordDir. Tests give the protocol a fake
// kernel and a directory of their own, so that it is checked without
// touching the host's audit settings, which live supervisors depend on.
type coordinator struct {
	dir string                 // holds the lock and holders.json
	get func() (Status, error) // the kernel's audit status
	set func(Status) error     // sets the fields named by Status.Mask
}

// host is the coordinator of this host's supervisors.
func host() *coordinator {
	return &coordinator{dir: CoordDir, get: GetStatus, set: setStatus}
}

type coordState struct {
	// EnabledByPalisade is true when a supervisor turned audit on and the
	// last holder must turn it off.
	EnabledByPalisade bool `json:"enabled_by_palisade"`
	// Holders maps a token (pid:start:n) to nothing; holders whose
	// process is gone are pruned.
	Holders map[string]bool `json:"holders"`
	// PrevBacklogLimit is the kernel's audit_backlog_limit before a
	// supervisor raised it to Backlog along with enabling audit (0: not
	// raised); the last holder puts it back.
	PrevBacklogLimit uint32 `json:"prev_backlog_limit,omitempty"`
}

// Backlog is the audit_backlog_limit a supervisor sets while it owns
// audit enablement (audit was off, no daemon). The kernel's default, 64
// records, is what a loaded host overflows: Landlock logs its records
// without waiting (GFP_ATOMIC), kauditd, a normal-priority kernel thread,
// multicasts them only when it gets a CPU, and the kernel drops every
// record beyond the limit meanwhile. One denial is three records, so the
// default lost the denials of two sandboxes denied 20 reads at once on a
// busy 2-core host, and any burst while other sandboxes' denials were
// queued. 8192 records (a few MiB of kernel memory at most, held only
// while kauditd lags) cover bursts of thousands; the watcher's receive
// buffer (readerBuffer) is sized to take them.
const Backlog = 8192

var leaseSeq atomic.Uint64

// lockWait bounds the wait for the host lock.
const lockWait = 10 * time.Second

// Acquire makes sure audit records flow while the caller's sandbox runs,
// changing the host's audit settings only when nobody else owns them:
//
//   - an audit daemon is registered (AUDIT_GET pid != 0): nothing is
//     changed; ModeDaemon, or ModeUnavailable when the daemon keeps audit
//     disabled;
//   - audit is on without a daemon: nothing is changed; ModeAlreadyOn
//     (or ModeEnabled when another supervisor turned it on);
//   - audit is off and no daemon: it is turned on, ModeEnabled, and the
//     last supervisor to Release turns it off again — unless somebody
//     changed the settings in between, then they are left alone;
//   - audit cannot be read or set: ModeUnavailable with the reason.
//
// Acquire never returns an error: a sandbox never fails for lack of
// denial events. A ModeUnavailable lease needs no Release (it is a no-op).
func Acquire() *Lease {
	l, err := host().acquire()
	if err != nil {
		return &Lease{Mode: ModeUnavailable, Detail: err.Error()}
	}
	return l
}

func (c *coordinator) acquire() (*Lease, error) {
	unlock, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	return c.acquireLocked()
}

// acquireLocked is acquire for a caller holding the host lock.
func (c *coordinator) acquireLocked() (*Lease, error) {
	cs := c.read()
	pruneHolders(&cs)
	l := &Lease{token: fmt.Sprintf("%d:%d:%d", os.Getpid(), selfStart(), leaseSeq.Add(1)), c: c}
	if cs.EnabledByPalisade && len(cs.Holders) > 0 {
		// Running supervisors hold audit on: join them without asking
		// the kernel (each AUDIT_GET costs a kernel thread, 0.3 ms and
		// more under load). Nothing changes here; the last holder checks
		// for a daemon before it restores anything.
		l.Mode, l.Detail = ModeEnabled, "audit enabled by a Palisade supervisor while sandboxes run"
		cs.Holders[l.token] = true
		return l, c.write(cs)
	}
	st, err := c.get()
	if err != nil {
		return nil, err
	}
	if st.PID != 0 {
		if st.Enabled == 0 {
			return nil, fmt.Errorf("audit daemon (pid %d) keeps audit disabled; its settings are left alone", st.PID)
		}
		return &Lease{Mode: ModeDaemon, Detail: fmt.Sprintf("audit daemon pid %d owns the audit settings; reading only", st.PID)}, nil
	}
	switch {
	case st.Enabled != 0 && cs.EnabledByPalisade:
		l.Mode, l.Detail = ModeEnabled, "audit enabled by a Palisade supervisor while sandboxes run"
	case st.Enabled != 0:
		l.Mode, l.Detail = ModeAlreadyOn, "audit already enabled; settings left alone"
	default:
		set := Status{Mask: unix.AUDIT_STATUS_ENABLED, Enabled: 1}
		if st.BacklogLimit != 0 && st.BacklogLimit < Backlog {
			// 0 is no limit: nothing to raise.
			set.Mask |= unix.AUDIT_STATUS_BACKLOG_LIMIT
			set.BacklogLimit = Backlog
		}
		// The record comes first: a supervisor killed between the two
		// steps then leaves a record the next one restores from, never
		// audit on with nobody to turn it off.
		prev := cs
		prev.Holders = maps.Clone(cs.Holders)
		cs.EnabledByPalisade = true
		if set.Mask&unix.AUDIT_STATUS_BACKLOG_LIMIT != 0 {
			cs.PrevBacklogLimit = st.BacklogLimit
		}
		cs.Holders[l.token] = true
		if err := c.write(cs); err != nil {
			return nil, err // nothing changed yet
		}
		if err := c.set(set); err != nil {
			c.write(prev)
			return nil, err
		}
		l.Mode, l.Detail = ModeEnabled, "audit enabled while sandboxes run"
		return l, nil
	}
	cs.Holders[l.token] = true
	if err := c.write(cs); err != nil {
		// Without the record the last holder could not restore: undo.
		if l.Mode == ModeEnabled && len(cs.Holders) == 1 {
			c.set(restoreStatus(cs, Backlog))
		}
		return nil, err
	}
	return l, nil
}

// Release drops the lease. The last holder restores audit to off when a
// supervisor turned it on and nobody changed it since (no daemon
// registered, still enabled=1).
func (l *Lease) Release() error {
	if l == nil || l.token == "" {
		return nil
	}
	unlock, err := l.c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	return l.releaseLocked()
}

// releaseLocked is Release for a caller holding the host lock.
func (l *Lease) releaseLocked() error {
	if l == nil || l.token == "" {
		return nil
	}
	c := l.c
	cs := c.read()
	delete(cs.Holders, l.token)
	l.token = ""
	pruneHolders(&cs)
	if err := c.restoreLocked(&cs); err != nil {
		// Keep the duty: the next supervisor to start or finish
		// restores audit.
		c.write(cs)
		return err
	}
	return c.write(cs)
}

// restoreLocked is the last holder's duty, for a caller holding the host
// lock with cs pruned: when no holder is left and a supervisor turned
// audit on, turn it off again (and put the backlog limit back) unless
// somebody (a daemon, the operator) took the settings over since. The
// caller writes cs.
func (c *coordinator) restoreLocked(cs *coordState) error {
	if len(cs.Holders) != 0 || !cs.EnabledByPalisade {
		return nil
	}
	st, err := c.get()
	if err != nil {
		return err
	}
	if st.PID == 0 && st.Enabled == 1 {
		if err := c.set(restoreStatus(*cs, st.BacklogLimit)); err != nil {
			return err
		}
	}
	// Restored, or taken over: either way no longer Palisade's.
	cs.EnabledByPalisade = false
	cs.PrevBacklogLimit = 0
	return nil
}

// restoreStatus is the AUDIT_SET that undoes a supervisor's enablement:
// audit off, and the backlog limit back to what it was when it was raised
// and nobody changed it since (now is the current limit).
func restoreStatus(cs coordState, now uint32) Status {
	s := Status{Mask: unix.AUDIT_STATUS_ENABLED, Enabled: 0}
	if cs.PrevBacklogLimit != 0 && now == Backlog {
		s.Mask |= unix.AUDIT_STATUS_BACKLOG_LIMIT
		s.BacklogLimit = cs.PrevBacklogLimit
	}
	return s
}

func (c *coordinator) lock() (func(), error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: coordination directory %s: %w", c.dir, err)
	}
	p := filepath.Join(c.dir, "lock")
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", p, err)
	}
	// Bounded: a supervisor stopped while holding the lock must not stop
	// every other sandbox from starting (they run without denial events).
	for deadline := time.Now().Add(lockWait); ; {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR || time.Now().After(deadline) {
			unix.Close(fd)
			return nil, fmt.Errorf("audit: lock %s: %w", p, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func() { unix.Close(fd) }, nil
}

func (c *coordinator) file() string { return filepath.Join(c.dir, "holders.json") }

func (c *coordinator) read() coordState {
	cs := coordState{Holders: map[string]bool{}}
	b, err := os.ReadFile(c.file())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return cs
	}
	if len(b) > 0 && json.Unmarshal(b, &cs) != nil {
		cs = coordState{}
	}
	if cs.Holders == nil {
		cs.Holders = map[string]bool{}
	}
	return cs
}

func (c *coordinator) write(cs coordState) error {
	b, _ := json.Marshal(cs)
	if err := fsutil.ReplaceFile(c.file(), b, 0o600); err != nil {
		return fmt.Errorf("audit: write %s: %w", c.file(), err)
	}
	return nil
}

// pruneHolders drops holders whose process is gone (or whose pid was
// reused: the start time differs), so a crashed supervisor does not keep
// audit on forever: the next one to start or finish inherits its duty.
func pruneHolders(cs *coordState) {
	for tok := range cs.Holders {
		f := strings.Split(tok, ":")
		if len(f) != 3 {
			delete(cs.Holders, tok)
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		start, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			delete(cs.Holders, tok)
			continue
		}
		if got, err := state.ProcStartTime(pid); err != nil || got != start {
			delete(cs.Holders, tok)
		}
	}
}

func selfStart() uint64 {
	s, _ := state.ProcStartTime(os.Getpid())
	return s
}
