//go:build linux

package landlockaudit

import (
	"bufio"
	"fmt"
	"io"
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
// test with every other test that touches the host's audit settings.
func requireAudit(t *testing.T) Status {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	testutil.HostLock(t, "audit")
	st, err := GetStatus()
	if err != nil {
		testutil.RequireData(t, "the kernel's audit netlink interface", err)
	}
	return st
}

// holdIdle waits until audit is off, no audit daemon is registered and
// no supervisor holds a lease (sandboxes of tests running in parallel
// come and go), then holds the host lock until the test ends, so that no
// supervisor changes anything meanwhile (they wait in Acquire). A
// supervisor that was killed holding the last lease (the SIGKILL tests
// of cmd/sandbox-supervisor do that) left audit on for the next one to
// restore: holdIdle does that duty as a supervisor would. The test uses
// acquireLocked and releaseLocked.
func holdIdle(t *testing.T) {
	t.Helper()
	requireAudit(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		unlock, err := lockCoord()
		if err != nil {
			t.Fatal(err)
		}
		cs := readCoord()
		pruneHolders(&cs)
		if len(cs.Holders) == 0 && cs.EnabledByPalisade {
			err := restoreLocked(&cs)
			if err == nil {
				err = writeCoord(cs)
			}
			if err != nil {
				unlock()
				t.Fatalf("restoring audit after a killed supervisor: %v", err)
			}
		}
		st, err := GetStatus()
		if err != nil {
			unlock()
			t.Fatal(err)
		}
		if len(cs.Holders) == 0 && st.Enabled == 0 && st.PID == 0 {
			t.Cleanup(unlock)
			return
		}
		unlock()
		if len(cs.Holders) == 0 || time.Now().After(deadline) {
			// Not ours to wait for: the operator or a daemon has audit.
			testutil.RequireData(t, "audit off with no audit daemon",
				fmt.Errorf("audit enabled=%d pid=%d, %d supervisors holding it", st.Enabled, st.PID, len(cs.Holders)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kernelBacklog sets the kernel's default backlog limit for the test
// (the host's may be anything) and puts the host's back at the end.
func kernelBacklog(t *testing.T) {
	t.Helper()
	st, err := GetStatus()
	if err != nil {
		t.Fatal(err)
	}
	if err := setStatus(Status{Mask: unix.AUDIT_STATUS_BACKLOG_LIMIT, BacklogLimit: 64}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setStatus(Status{Mask: unix.AUDIT_STATUS_BACKLOG_LIMIT, BacklogLimit: st.BacklogLimit}) })
}

func same(a, b Status) bool {
	return a.Enabled == b.Enabled && a.PID == b.PID && a.Failure == b.Failure &&
		a.RateLimit == b.RateLimit && a.BacklogLimit == b.BacklogLimit
}

// Audit off and no daemon: enabled while any lease is held, restored by
// the last release.
func TestAcquireEnablesAndRestores(t *testing.T) {
	holdIdle(t)
	kernelBacklog(t)
	before, _ := GetStatus()
	a, _ := acquireLocked()
	b, _ := acquireLocked()
	t.Cleanup(func() { a.releaseLocked(); b.releaseLocked() }) // a failure leaves audit as it was
	if a.Mode != ModeEnabled || b.Mode != ModeEnabled {
		t.Fatalf("modes %s (%s), %s (%s)", a.Mode, a.Detail, b.Mode, b.Detail)
	}
	if st, _ := GetStatus(); st.Enabled != 1 {
		t.Fatalf("audit enabled=%d while leases are held", st.Enabled)
	}
	// The kernel's queue is deep enough for bursts on a loaded host.
	if st, _ := GetStatus(); st.BacklogLimit != Backlog {
		t.Fatalf("audit backlog_limit %d while leases are held (was %d), want %d", st.BacklogLimit, before.BacklogLimit, Backlog)
	}
	if err := a.releaseLocked(); err != nil {
		t.Fatal(err)
	}
	if st, _ := GetStatus(); st.Enabled != 1 {
		t.Fatalf("audit enabled=%d after the first of two releases", st.Enabled)
	}
	if err := b.releaseLocked(); err != nil {
		t.Fatal(err)
	}
	if st, _ := GetStatus(); !same(st, before) {
		t.Fatalf("status after the last release %+v, before %+v", st, before)
	}
}

// The record that a supervisor turned audit on is on disk before audit
// is: a supervisor killed between the two steps leaves a record the next
// one restores from, never audit on with nobody to turn it off.
func TestRecordWrittenBeforeAuditIsEnabled(t *testing.T) {
	holdIdle(t)
	kernelBacklog(t)
	var recorded, enabledYet, called bool
	beforeEnable = func() {
		called = true
		recorded = readCoord().EnabledByPalisade
		st, _ := GetStatus()
		enabledYet = st.Enabled != 0
	}
	t.Cleanup(func() { beforeEnable = nil })
	l, err := acquireLocked()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.releaseLocked() })
	if !called {
		t.Fatal("acquire did not turn audit on (the test's precondition is audit off)")
	}
	if !recorded || enabledYet {
		t.Fatalf("when audit was turned on: record written %v, audit already on %v; want true, false", recorded, enabledYet)
	}
}

// An operator who changes the backlog limit while sandboxes run keeps
// it: the last release turns audit off but leaves the limit alone.
func TestBacklogLimitChangedMeanwhileIsKept(t *testing.T) {
	holdIdle(t)
	kernelBacklog(t)
	l, _ := acquireLocked()
	if l == nil || l.Mode != ModeEnabled {
		t.Fatalf("lease %+v", l)
	}
	const operators = Backlog + 1
	if err := setStatus(Status{Mask: unix.AUDIT_STATUS_BACKLOG_LIMIT, BacklogLimit: operators}); err != nil {
		t.Fatal(err)
	}
	if err := l.releaseLocked(); err != nil {
		t.Fatal(err)
	}
	if st, _ := GetStatus(); st.Enabled != 0 || st.BacklogLimit != operators {
		t.Fatalf("after the last release enabled=%d backlog_limit=%d, want 0 and the operator's %d", st.Enabled, st.BacklogLimit, operators)
	}
}

// A lease whose holder died is pruned: the next release restores.
func TestCrashedHolderIsPruned(t *testing.T) {
	holdIdle(t)
	l, _ := acquireLocked()
	if l == nil || l.Mode != ModeEnabled {
		t.Fatalf("lease %+v", l)
	}
	// Forge a holder that no longer exists.
	cs := readCoord()
	cs.Holders["999999999:1:1"] = true
	writeCoord(cs)
	l.releaseLocked()
	if st, _ := GetStatus(); st.Enabled != 0 {
		t.Fatalf("audit left enabled=%d by a dead holder", st.Enabled)
	}
}

// The audit-daemon stand-in runs in a child process: it registers as the
// audit daemon (AUDIT_SET with AUDIT_STATUS_PID) and enables audit, then
// drains its socket until stdin closes, unregisters and puts enabled
// back.
func standInChild() {
	before, err := GetStatus()
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	d, err := RegisterDaemon()
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	go d.Drain()
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
	err = d.Unregister()
	setStatus(Status{Mask: unix.AUDIT_STATUS_ENABLED, Enabled: before.Enabled})
	if err != nil {
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
func TestAuditDaemonStandIn(t *testing.T) {
	if testutil.IsChild("audit-standin") {
		standInChild()
	}
	if testutil.IsChild("landlock-denied") {
		deniedChild()
	}
	holdIdle(t)
	abi := landlockABI(t)
	if abi < landlock.MinLogABI {
		testutil.RequireData(t, "Landlock ABI 7 (audit logging)", fmt.Errorf("kernel offers ABI %d", abi))
	}
	idle, _ := GetStatus()
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
		if st, err := GetStatus(); err == nil && !same(st, idle) {
			t.Errorf("audit not back to idle after the stand-in: %+v", st)
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
	coordBefore, _ := os.ReadFile(coordFile())

	lease, err := acquireLocked()
	if err != nil || lease.Mode != ModeDaemon {
		t.Fatalf("mode %s (%s), want %s", lease.Mode, lease.Detail, ModeDaemon)
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
	if err := lease.releaseLocked(); err != nil {
		t.Fatal(err)
	}
	if st, _ := GetStatus(); !same(st, held) {
		t.Fatalf("audit settings changed under the daemon: %+v, held %+v", st, held)
	}
	if coordAfter, _ := os.ReadFile(coordFile()); string(coordAfter) != string(coordBefore) {
		t.Fatalf("coordination state changed: %s -> %s", coordBefore, coordAfter)
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
