//go:build linux

package landlockaudit

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The lease protocol against a fake kernel and a coordination directory
// of the test's own: deterministic, and the host's audit settings (which
// live supervisors depend on) are never touched. The real kernel and
// the real coordination files are exercised by TestLeaseOnTheHost and
// TestAuditDaemonStandIn.

// fakeKernel stands in for the kernel's audit status: AUDIT_SET applies
// the fields its mask names, and refuses to change a locked enabled (2),
// as the kernel does.
type fakeKernel struct {
	mu     sync.Mutex
	st     Status
	gets   int
	sets   []Status
	setErr error
	// onSet, when set, runs before a set is applied (outside the lock).
	onSet func(Status)
}

func (k *fakeKernel) get() (Status, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gets++
	return k.st, nil
}

func (k *fakeKernel) set(s Status) error {
	if k.onSet != nil {
		k.onSet(s)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.setErr != nil {
		return k.setErr
	}
	if s.Mask&unix.AUDIT_STATUS_ENABLED != 0 {
		if k.st.Enabled == 2 {
			return unix.EPERM
		}
		k.st.Enabled = s.Enabled
	}
	if s.Mask&unix.AUDIT_STATUS_BACKLOG_LIMIT != 0 {
		k.st.BacklogLimit = s.BacklogLimit
	}
	if s.Mask&unix.AUDIT_STATUS_PID != 0 {
		k.st.PID = s.PID
	}
	k.sets = append(k.sets, s)
	return nil
}

func (k *fakeKernel) status() Status {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.st
}

// change is an operator or daemon changing the kernel's settings.
func (k *fakeKernel) change(f func(*Status)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f(&k.st)
}

func (k *fakeKernel) setCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.sets)
}

// fakeHost is a coordinator on a fake kernel in status st and an empty
// coordination directory.
func fakeHost(t *testing.T, st Status) (*coordinator, *fakeKernel) {
	t.Helper()
	k := &fakeKernel{st: st}
	return &coordinator{dir: t.TempDir(), get: k.get, set: k.set}, k
}

func mustAcquire(t *testing.T, c *coordinator, want Mode) *Lease {
	t.Helper()
	l, err := c.acquire()
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if l.Mode != want {
		t.Fatalf("lease mode %s (%s), want %s", l.Mode, l.Detail, want)
	}
	return l
}

func mustRelease(t *testing.T, l *Lease) {
	t.Helper()
	if err := l.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// checkIdleRecord fails unless the coordination record says nobody holds
// audit and no supervisor owes a restore.
func checkIdleRecord(t *testing.T, c *coordinator) {
	t.Helper()
	if cs := c.read(); len(cs.Holders) != 0 || cs.EnabledByPalisade || cs.PrevBacklogLimit != 0 {
		t.Fatalf("coordination record after the last release: %+v", cs)
	}
}

// Audit off and no daemon: enabled (and the kernel's queue raised when
// it is shorter than Backlog) while any lease is held; the last release
// puts every setting back, the first of two changes nothing.
func TestAcquireEnablesAndRestores(t *testing.T) {
	for _, tc := range []struct {
		name          string
		backlog, held uint32 // backlog_limit before and while held
	}{
		{"kernel default raised", 64, Backlog},
		{"no limit left alone", 0, 0},
		{"longer limit left alone", 2 * Backlog, 2 * Backlog},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := Status{Enabled: 0, Failure: 1, RateLimit: 7, BacklogLimit: tc.backlog}
			c, k := fakeHost(t, before)
			a := mustAcquire(t, c, ModeEnabled)
			b := mustAcquire(t, c, ModeEnabled)
			if st := k.status(); st.Enabled != 1 || st.BacklogLimit != tc.held {
				t.Fatalf("while two leases are held: enabled=%d backlog_limit=%d, want 1 and %d", st.Enabled, st.BacklogLimit, tc.held)
			}
			mustRelease(t, a)
			if st := k.status(); st.Enabled != 1 || st.BacklogLimit != tc.held {
				t.Fatalf("after the first of two releases: enabled=%d backlog_limit=%d, want 1 and %d", st.Enabled, st.BacklogLimit, tc.held)
			}
			mustRelease(t, b)
			if st := k.status(); st != before {
				t.Fatalf("after the last release %+v, before %+v", st, before)
			}
			checkIdleRecord(t, c)
			if err := a.Release(); err != nil || k.status() != before {
				t.Fatalf("a second release of a lease: %v, status %+v", err, k.status())
			}
		})
	}
}

// A supervisor joining running ones does not ask the kernel (each
// AUDIT_GET costs a kernel thread on a loaded host).
func TestJoiningLeaseAsksNoKernel(t *testing.T) {
	c, k := fakeHost(t, Status{BacklogLimit: 64})
	a := mustAcquire(t, c, ModeEnabled)
	defer a.Release()
	gets, sets := k.gets, k.setCount()
	b := mustAcquire(t, c, ModeEnabled)
	defer b.Release()
	if k.gets != gets || k.setCount() != sets {
		t.Fatalf("joining asked the kernel %d times and set it %d times", k.gets-gets, k.setCount()-sets)
	}
}

// The record that a supervisor turned audit on is on disk before audit
// is: a supervisor killed between the two steps leaves a record the next
// one restores from, never audit on with nobody to turn it off.
func TestRecordWrittenBeforeAuditIsEnabled(t *testing.T) {
	c, k := fakeHost(t, Status{BacklogLimit: 64})
	enables := 0
	k.onSet = func(s Status) {
		if s.Mask&unix.AUDIT_STATUS_ENABLED == 0 || s.Enabled != 1 {
			return
		}
		enables++
		if cs := c.read(); !cs.EnabledByPalisade || len(cs.Holders) != 1 || cs.PrevBacklogLimit != 64 {
			t.Errorf("when audit was turned on the record was %+v, want enabled_by_palisade, one holder, prev_backlog_limit 64", cs)
		}
	}
	l := mustAcquire(t, c, ModeEnabled)
	defer l.Release()
	if enables != 1 {
		t.Fatalf("audit turned on %d times, want 1", enables)
	}
}

// A supervisor killed after writing the record (before or after turning
// audit on) leaves the duty to the next one: its lease turns audit on if
// it is off, and its last release restores the settings the record
// names.
func TestKilledHolderDutyInherited(t *testing.T) {
	dead := fmt.Sprintf("%d:1:1", deadPID(t))
	for _, tc := range []struct {
		name string
		now  Status // the kernel when the next supervisor starts
	}{
		{"killed before enabling", Status{Enabled: 0, BacklogLimit: 64}},
		{"killed after enabling", Status{Enabled: 1, BacklogLimit: Backlog}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, k := fakeHost(t, tc.now)
			if err := c.write(coordState{EnabledByPalisade: true, Holders: map[string]bool{dead: true}, PrevBacklogLimit: 64}); err != nil {
				t.Fatal(err)
			}
			l := mustAcquire(t, c, ModeEnabled)
			if st := k.status(); st.Enabled != 1 || st.BacklogLimit != Backlog {
				t.Fatalf("while held: %+v", st)
			}
			if cs := c.read(); len(cs.Holders) != 1 || cs.Holders[dead] {
				t.Fatalf("the killed holder was not pruned: %+v", cs)
			}
			mustRelease(t, l)
			if st := k.status(); st != (Status{Enabled: 0, BacklogLimit: 64}) {
				t.Fatalf("after the last release %+v, want audit off with backlog_limit 64", st)
			}
			checkIdleRecord(t, c)
		})
	}
}

// Enabling fails: no lease, and no record claiming audit was turned on.
func TestFailedEnableLeavesNoRecord(t *testing.T) {
	before := Status{BacklogLimit: 64}
	c, k := fakeHost(t, before)
	k.setErr = unix.EPERM
	if l, err := c.acquire(); !errors.Is(err, unix.EPERM) {
		t.Fatalf("acquire with AUDIT_SET refused: %+v, %v", l, err)
	}
	if k.status() != before {
		t.Fatalf("status %+v, before %+v", k.status(), before)
	}
	checkIdleRecord(t, c)
	k.setErr = nil
	mustRelease(t, mustAcquire(t, c, ModeEnabled))
	if k.status() != before {
		t.Fatalf("status %+v after a later lease, before %+v", k.status(), before)
	}
}

// An operator who changes the backlog limit while sandboxes run keeps
// it: the last release turns audit off but leaves the limit alone.
func TestBacklogLimitChangedMeanwhileIsKept(t *testing.T) {
	c, k := fakeHost(t, Status{BacklogLimit: 64})
	l := mustAcquire(t, c, ModeEnabled)
	const operators = Backlog + 1
	k.change(func(s *Status) { s.BacklogLimit = operators })
	mustRelease(t, l)
	if st := k.status(); st.Enabled != 0 || st.BacklogLimit != operators {
		t.Fatalf("after the last release enabled=%d backlog_limit=%d, want 0 and the operator's %d", st.Enabled, st.BacklogLimit, operators)
	}
	checkIdleRecord(t, c)
}

// Holders whose process is gone, whose pid now names another process
// (start time differs) or whose token is malformed are pruned: the last
// live holder's release restores.
func TestCrashedHolderIsPruned(t *testing.T) {
	before := Status{BacklogLimit: 64}
	c, k := fakeHost(t, before)
	l := mustAcquire(t, c, ModeEnabled)
	cs := c.read()
	for _, tok := range []string{
		fmt.Sprintf("%d:1:1", deadPID(t)),
		fmt.Sprintf("%d:%d:1", os.Getpid(), selfStart()+1), // pid reused
		"garbage",
	} {
		cs.Holders[tok] = true
	}
	if err := c.write(cs); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, l)
	if st := k.status(); st != before {
		t.Fatalf("after the last live holder's release %+v, before %+v", st, before)
	}
	checkIdleRecord(t, c)
}

// deadPID is a pid no process has: one above the kernel's pid_max.
func deadPID(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	var max int
	if _, err := fmt.Sscan(string(b), &max); err != nil {
		t.Fatal(err)
	}
	return max + 1
}

// Settings the supervisors do not own are never changed: an audit
// daemon's, and audit the operator turned on.
func TestSettingsOwnedByOthersLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   Status
		mode Mode // "" when acquire must fail
	}{
		{"daemon", Status{Enabled: 1, PID: 4242, BacklogLimit: 64}, ModeDaemon},
		{"daemon keeps audit off", Status{Enabled: 0, PID: 4242, BacklogLimit: 64}, ""},
		{"operator turned audit on", Status{Enabled: 1, BacklogLimit: 64}, ModeAlreadyOn},
		{"operator locked audit on", Status{Enabled: 2, BacklogLimit: 64}, ModeAlreadyOn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, k := fakeHost(t, tc.st)
			l, err := c.acquire()
			if tc.mode == "" {
				if err == nil {
					t.Fatalf("lease %s (%s), want an error", l.Mode, l.Detail)
				}
			} else {
				if err != nil || l.Mode != tc.mode {
					t.Fatalf("lease %+v, %v; want mode %s", l, err, tc.mode)
				}
				mustRelease(t, l)
			}
			if n := k.setCount(); n != 0 || k.status() != tc.st {
				t.Fatalf("%d AUDIT_SETs, status %+v, before %+v", n, k.status(), tc.st)
			}
			checkIdleRecord(t, c)
		})
	}
}

// Somebody takes the settings over while sandboxes run (a daemon
// registers, the operator turns audit off or locks it): the last release
// changes nothing and drops the duty.
func TestTakenOverSettingsLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		take func(*Status)
	}{
		{"daemon registered", func(s *Status) { s.PID = 4242 }},
		{"operator turned audit off", func(s *Status) { s.Enabled = 0 }},
		{"operator locked audit on", func(s *Status) { s.Enabled = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, k := fakeHost(t, Status{BacklogLimit: 64})
			l := mustAcquire(t, c, ModeEnabled)
			k.change(tc.take)
			taken, sets := k.status(), k.setCount()
			mustRelease(t, l)
			if k.setCount() != sets || k.status() != taken {
				t.Fatalf("the last release changed %+v to %+v", taken, k.status())
			}
			checkIdleRecord(t, c)
		})
	}
}
