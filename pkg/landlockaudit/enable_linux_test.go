//go:build linux

package landlockaudit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/landlock"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// requireAudit skips (fails under PALISADE_REQUIRE_PRIVILEGED=1) unless
// this process can use the audit netlink interface, and serialises the
// test with the other tests that depend on the host's audit settings
// (the daemon stand-in registers itself). Live supervisors do not take
// that lock and are never waited for: these tests hold on a busy host.
func requireAudit(t *testing.T) Status {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.HostLock(t, "audit")
	st, err := GetStatus()
	if err != nil {
		testutil.RequireData(t, "the kernel's audit netlink interface", err)
	}
	return st
}

// requireOwnLease fails the test (skips without strict mode) unless l is
// a lease under which Palisade's supervisors may have turned audit on:
// no audit daemon owns the settings.
func requireOwnLease(t *testing.T, l *Lease) {
	t.Helper()
	if l.Mode != ModeEnabled && l.Mode != ModeAlreadyOn {
		testutil.RequireData(t, "audit settings without an audit daemon", fmt.Errorf("lease %s: %s", l.Mode, l.Detail))
	}
}

// hostSnapshot reads the coordination record and the kernel's status
// under the host lock, so that no supervisor changes either in between.
func hostSnapshot(t *testing.T, c *coordinator) (coordState, Status) {
	t.Helper()
	unlock, err := c.lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cs := c.read()
	st, err := c.get()
	if err != nil {
		t.Fatal(err)
	}
	return cs, st
}

func same(a, b Status) bool {
	return a.Enabled == b.Enabled && a.PID == b.PID && a.Failure == b.Failure &&
		a.RateLimit == b.RateLimit && a.BacklogLimit == b.BacklogLimit
}

// Real leases through the real path (Acquire, Release: the kernel and
// CoordDir), on a host where other supervisors may hold leases, start
// and finish: audit is on while ours are held; after the first of our
// two releases it stays on; after the second it is back to what it was
// before Palisade turned it on when we were the last holder, and still
// on when others hold leases. The lease protocol's every branch is
// checked against a fake kernel (lease_linux_test.go); this test never
// changes a setting a live supervisor depends on.
func TestLeaseOnTheHost(t *testing.T) {
	requireAudit(t)
	c := host()
	// Idle (no holder, audit off): what the last release must restore.
	idleRec, prior := hostSnapshot(t, c)
	pruneHolders(&idleRec)
	idle := len(idleRec.Holders) == 0 && !idleRec.EnabledByPalisade && prior.Enabled == 0 && prior.PID == 0

	a, b := Acquire(), Acquire()
	t.Cleanup(func() { a.Release(); b.Release() }) // a failure leaves no lease behind
	requireOwnLease(t, a)
	if b.Mode != a.Mode {
		t.Fatalf("second lease %s (%s), first %s", b.Mode, b.Detail, a.Mode)
	}
	tokA, tokB := a.token, b.token
	rec, held := hostSnapshot(t, c)
	if held.Enabled == 0 || !rec.Holders[tokA] || !rec.Holders[tokB] {
		t.Fatalf("while our leases are held: audit enabled=%d, holders %v (ours %s, %s)", held.Enabled, rec.Holders, tokA, tokB)
	}
	// What the last holder restores: audit off and the backlog limit
	// from before, when a supervisor turned it on; else nothing.
	want, palisades := held, rec.EnabledByPalisade
	if palisades {
		if a.Mode != ModeEnabled {
			t.Fatalf("lease %s while the record says a supervisor turned audit on", a.Mode)
		}
		// The kernel's queue is deep enough for bursts on a loaded host.
		if held.BacklogLimit != 0 && held.BacklogLimit < Backlog {
			t.Fatalf("backlog_limit %d while leases are held, want at least %d", held.BacklogLimit, Backlog)
		}
		want.Enabled = 0
		if rec.PrevBacklogLimit != 0 {
			want.BacklogLimit = rec.PrevBacklogLimit
		}
	}
	if idle && !same(want, prior) {
		t.Fatalf("audit was idle (%+v) before our leases; the record %+v would restore %+v", prior, rec, want)
	}

	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	rec, st := hostSnapshot(t, c)
	if !rec.Holders[tokB] || rec.Holders[tokA] || st.Enabled == 0 {
		t.Fatalf("after the first of our two releases: audit enabled=%d, holders %v (ours %s released, %s held)", st.Enabled, rec.Holders, tokA, tokB)
	}

	// The last release, and a look at its outcome before any other
	// supervisor can change it: Release is the lock and releaseLocked.
	unlock, err := c.lock()
	if err != nil {
		t.Fatal(err)
	}
	err = b.releaseLocked()
	rec = c.read()
	st, err2 := c.get()
	unlock()
	if err != nil || err2 != nil {
		t.Fatalf("last release: %v; status: %v", err, err2)
	}
	if len(rec.Holders) == 0 {
		t.Logf("we held the last lease: audit %+v, restored to %+v", held, st)
		if !same(st, want) || rec.EnabledByPalisade {
			t.Fatalf("after the last release: status %+v, want %+v; record %+v", st, want, rec)
		}
		return
	}
	t.Logf("%d other supervisors hold leases: audit stays on", len(rec.Holders))
	if st.Enabled == 0 || rec.Holders[tokB] || rec.EnabledByPalisade != palisades {
		t.Fatalf("released while others hold leases: audit enabled=%d, record %+v", st.Enabled, rec)
	}
}

// The audit-daemon stand-in runs in a child process: it registers as the
// audit daemon (AUDIT_SET with AUDIT_STATUS_PID; audit is on already,
// under the test's lease), drains its socket until stdin closes, and
// unregisters. Audit's enabled setting stays the lease's to restore.
func standInChild() {
	d, err := RegisterDaemon()
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	go d.Drain()
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
	if err := d.Unregister(); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// deniedChild confines itself with Landlock (read-only /usr and the
// libraries), then tries to read the file named by PALISADE_LA_PATH.
func deniedChild() {
	runtime.LockOSThread()
	rs, err := landlock.Build(landlock.Rules{ReadOnly: []string{"/usr", "/lib", "/lib64", "/bin"}, HardRequirement: true})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if _, err := rs.Enforce(); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	// Wait until the parent knows this process, then try three times:
	// the first is reported at once, the repeats fold into a count.
	bufio.NewReader(os.Stdin).ReadString('\n')
	for range 3 {
		_, err = unix.Open(os.Getenv("PALISADE_LA_PATH"), unix.O_RDONLY, 0)
	}
	fmt.Println("open:", err)
	os.Exit(0)
}

// With an audit daemon holding the settings, a supervisor changes
// nothing, and denials still reach it through the multicast group.
//
// On a host where other supervisors run: the test first takes a real
// lease, so audit is on and no other supervisor is the last holder
// while the stand-in is registered (a last holder would take a
// registered daemon for one that took the settings over, and leave
// audit on for good); the stand-in changes nothing but the daemon pid,
// and puts that back. The supervisor under test coordinates through a
// directory of its own, as the first one on an idle host would: with
// the real one it would join the running supervisors without asking the
// kernel (TestJoiningLeaseAsksNoKernel).
func TestAuditDaemonStandIn(t *testing.T) {
	if testutil.IsChild("audit-standin") {
		standInChild()
	}
	if testutil.IsChild("landlock-denied") {
		deniedChild()
	}
	requireAudit(t)
	testutil.RequireFeature(t, "landlock")
	abi := landlockABI(t)
	if abi < landlock.MinLogABI {
		testutil.RequireData(t, "Landlock ABI 7 (audit logging)", fmt.Errorf("kernel offers ABI %d", abi))
	}
	ours := Acquire()
	t.Cleanup(func() {
		if err := ours.Release(); err != nil {
			t.Errorf("release: %v", err)
		}
	})
	requireOwnLease(t, ours)
	daemon := exec.Command(os.Args[0], "-test.run=^TestAuditDaemonStandIn$", "-test.count=1")
	daemon.Env = append(os.Environ(), testutil.ChildEnv+"=audit-standin")
	stdin, _ := daemon.StdinPipe()
	stdout, _ := daemon.StdoutPipe()
	daemon.Stderr = testutil.LogWriter(t, "audit daemon")
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stdin.Close()
			daemon.Wait()
		}
	}
	t.Cleanup(func() {
		stop()
		if !daemon.ProcessState.Success() {
			t.Errorf("stand-in failed to unregister: %v", daemon.ProcessState)
		}
		// Back to how the lease holds it: no daemon, audit on.
		if st, err := GetStatus(); err != nil || st.PID != 0 || st.Enabled == 0 {
			t.Errorf("audit after the stand-in: %+v, %v; want pid 0 and enabled", st, err)
		}
	})
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "READY" {
		t.Fatalf("stand-in: %q", line)
	}
	held, _ := GetStatus()
	if held.PID != uint32(daemon.Process.Pid) || held.Enabled != 1 {
		t.Fatalf("stand-in did not register: %+v (pid %d)", held, daemon.Process.Pid)
	}
	c := &coordinator{dir: t.TempDir(), get: GetStatus, set: setStatus}
	lease, err := c.acquire()
	if err != nil || lease.Mode != ModeDaemon {
		t.Fatalf("lease %+v, %v; want mode %s", lease, err, ModeDaemon)
	}
	var mu sync.Mutex
	var got []Denial
	var producerPID atomic.Int64
	w, err := Watch(Config{
		Owns: func(pid int) bool { return int64(pid) == producerPID.Load() },
		Emit: func(d Denial) { mu.Lock(); got = append(got, d); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	target := t.TempDir() + "/secret"
	os.WriteFile(target, []byte("x"), 0o644)
	producer := exec.Command(os.Args[0], "-test.run=^TestAuditDaemonStandIn$", "-test.count=1")
	producer.Env = append(os.Environ(), testutil.ChildEnv+"=landlock-denied", "PALISADE_LA_PATH="+target)
	var out strings.Builder
	producer.Stdout, producer.Stderr = &out, &out
	go2, _ := producer.StdinPipe()
	if err := producer.Start(); err != nil {
		t.Fatal(err)
	}
	producerPID.Store(int64(producer.Process.Pid))
	go2.Write([]byte("go\n"))
	go2.Close()
	if err := producer.Wait(); err != nil || !strings.Contains(out.String(), "permission denied") {
		t.Fatalf("producer: %v %s", err, out.String())
	}
	time.Sleep(50 * time.Millisecond)
	stats := w.Stop()
	if err := lease.Release(); err != nil {
		t.Fatal(err)
	}
	if st, _ := GetStatus(); !same(st, held) {
		t.Fatalf("audit settings changed under the daemon: %+v, held %+v", st, held)
	}
	if _, err := os.Stat(c.file()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a lease under a daemon wrote the coordination record (%v)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, d := range got {
		if d.Path != target {
			t.Errorf("a denial of another process: %+v", d)
			continue
		}
		n += d.Count
		if d.Blockers[0] != "fs.read_file" || (d.PID != 0 && d.PID != producer.Process.Pid) {
			t.Errorf("denial %+v", d)
		}
	}
	// Three denied reads: one event at once and one folded count, unless
	// the kernel dropped records under load (its audit queue holds 64).
	if n < 1 || n > 3 || len(got) > 2 {
		t.Fatalf("%d events counting %d denied reads, want 1 or 2 counting 1 to 3 (stats %+v, all %+v)", len(got), n, stats, got)
	}
	stop()
}

func landlockABI(t *testing.T) int {
	rs, err := landlock.Build(landlock.Rules{ReadOnly: []string{"/usr"}})
	if err != nil || rs == nil {
		return 0
	}
	defer rs.Close()
	return rs.Result().ABI
}

// AUDIT_GET while the process is being signalled (as the Go runtime
// signals its threads to preempt them): the wait for the kernel's answer
// resumes instead of failing with EINTR.
func TestStatusSurvivesSignals(t *testing.T) {
	requireAudit(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			unix.Kill(os.Getpid(), unix.SIGURG) // ignored by Go programs, but runs a handler
			time.Sleep(20 * time.Microsecond)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < 300; i++ {
		if _, err := GetStatus(); err != nil {
			t.Fatalf("AUDIT_GET %d under signals: %v", i, err)
		}
	}
}
