//go:build linux

package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/landlockaudit"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

func init() {
	// fsdeny OP:PATH... performs each operation and prints one line of
	// errno names; burst:PATH:N opens PATH N times and prints the time.
	helpers["fsdeny"] = func(args []string) int {
		var out []string
		for _, a := range args {
			op, p, _ := strings.Cut(a, ":")
			var err error
			switch op {
			case "read":
				_, err = os.ReadFile(p)
			case "write":
				var f *os.File
				if f, err = os.OpenFile(p, os.O_WRONLY, 0); err == nil {
					f.Close()
				}
			case "create":
				var f *os.File
				if f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
					f.Close()
				}
			case "truncate":
				err = syscall.Truncate(p, 0)
			case "exec":
				_, err = syscall.ForkExec(p, []string{p}, &syscall.ProcAttr{})
			case "burst":
				path, ns, _ := strings.Cut(p, ":")
				n, _ := strconv.Atoi(ns)
				t0 := time.Now()
				for i := 0; i < n; i++ {
					if fd, e := syscall.Open(path, syscall.O_RDONLY, 0); e == nil {
						syscall.Close(fd)
					}
				}
				out = append(out, fmt.Sprintf("elapsed_ns=%d", time.Since(t0).Nanoseconds()))
				continue
			}
			var errno syscall.Errno
			switch {
			case err == nil:
				out = append(out, op+"=ok")
			case errors.As(err, &errno):
				out = append(out, op+"="+errnoName(errno))
			default:
				out = append(out, op+"="+err.Error())
			}
		}
		fmt.Println(strings.Join(out, " "))
		return 0
	}
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	}
	return e.Error()
}

// outsideDir makes a directory the policy does not grant, holding a
// world-readable file and an executable: only Landlock refuses them.
func outsideDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "palisade-outside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	os.WriteFile(filepath.Join(d, "secret"), []byte("not for the sandbox"), 0o644)
	copyFile(t, "/bin/true", filepath.Join(d, "tool"), 0o755)
	return d
}

// fileEvents returns the File System Activity events of a run.
func fileEvents(evs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e["class_uid"] == float64(ocsf.ClassFileActivity) {
			out = append(out, e)
		}
	}
	return out
}

func evPath(e map[string]any) string {
	f, _ := e["file"].(map[string]any)
	p, _ := f["path"].(string)
	return p
}

func requireDenialEvents(t *testing.T) {
	t.Helper()
	if _, err := landlockaudit.GetStatus(); err != nil {
		testutil.RequireData(t, "the kernel's audit netlink interface", err)
	}
	abi, _ := landlockABI()
	if abi < 7 {
		testutil.RequireData(t, "Landlock ABI 7 (audit logging)", fmt.Errorf("kernel offers ABI %d", abi))
	}
}

func TestFilesystemDenialEvents(t *testing.T) {
	f := newFixture(t)
	requireDenialEvents(t)
	testutil.HostLock(t, "audit")
	out := outsideDir(t)
	secret, tool := filepath.Join(out, "secret"), filepath.Join(out, "tool")
	ro := filepath.Join(f.roDir, "f")
	created := filepath.Join(f.roDir, "new")
	defer os.Remove(created)
	env, _ := BuildEnv(EnvInput{Host: os.Environ(), Workdir: f.workdir, Name: "t"})
	stdout, stderr, res := f.run(f.options([]string{f.exe, "fsdeny",
		"read:" + secret, "write:" + ro, "create:" + created, "truncate:" + ro, "exec:" + tool,
		"read:" + ro, "read:" + filepath.Join(f.workdir, "..", filepath.Base(f.workdir))}, env))
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s %s", res.ExitCode, stdout, stderr)
	}
	if strings.TrimSpace(stdout) != "read=EACCES write=EACCES create=EACCES truncate=EACCES exec=EACCES read=ok read=is a directory" {
		t.Fatalf("operations: %q", stdout)
	}
	evs := fileEvents(f.validateEvents())
	type key struct{ path, right string }
	got := map[key]int{}
	for _, e := range evs {
		p := evPath(e)
		for _, r := range strings.Split(e["status_detail"].(string), ",") {
			got[key{p, r}]++
		}
		proc := e["actor"].(map[string]any)["process"].(map[string]any)
		if proc["sandbox"] == "" || e["device"].(map[string]any)["name"] != proc["sandbox"] {
			t.Errorf("event names sandbox %v on device %v", proc["sandbox"], e["device"])
		}
		if pol, _ := e["policy"].(map[string]any); pol["uid"] != "sha256:"+strings.Repeat("ab", 32) {
			t.Errorf("event policy %v", e["policy"])
		}
		if strings.Contains(fmt.Sprint(e), "not for the sandbox") {
			t.Fatalf("event carries file contents: %v", e)
		}
	}
	// A refused create names the directory it was refused in (the
	// kernel's record carries the parent); execve needs both execute
	// and read_file, and one event names both.
	want := map[key]int{
		{secret, "fs.read_file"}: 1, {ro, "fs.write_file"}: 1, {f.roDir, "fs.make_reg"}: 1,
		{ro, "fs.truncate"}: 1, {tool, "fs.execute"}: 1, {tool, "fs.read_file"}: 1,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s %s: %d events, want %d (all: %v)", k.right, k.path, got[k], n, got)
		}
	}
	for k, n := range got {
		if _, ok := want[k]; ok {
			continue
		}
		// The Go runtime of the attacker reads /sys (transparent huge
		// pages) at start-up: a real denial, but not one of the test's.
		if strings.HasPrefix(k.path, "/sys/") {
			continue
		}
		if k.path == ro || strings.HasPrefix(k.path, f.workdir) {
			t.Errorf("allowed access %s %s yielded %d events", k.right, k.path, n)
		} else {
			t.Errorf("unexpected denial event %s %s (%d)", k.right, k.path, n)
		}
	}
	for _, e := range evs {
		if evPath(e) == secret {
			proc := e["actor"].(map[string]any)["process"].(map[string]any)
			if exe, _ := proc["file"].(map[string]any); exe["path"] != f.exe || proc["pid"] == nil {
				t.Errorf("actor of the read denial: %v", proc)
			}
		}
	}
}

// Two sandboxes at once: each reports its own denials only.
func TestDenialEventsStayInTheirSandbox(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	requireDenialEvents(t)
	testutil.HostLock(t, "audit")
	out := outsideDir(t)
	pa, pb := filepath.Join(out, "only-a"), filepath.Join(out, "only-b")
	os.WriteFile(pa, nil, 0o644)
	os.WriteFile(pb, nil, 0o644)
	var wg sync.WaitGroup
	for _, c := range []struct {
		f *fixture
		p string
	}{{a, pa}, {b, pb}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env, _ := BuildEnv(EnvInput{Host: os.Environ(), Workdir: c.f.workdir, Name: "t"})
			args := []string{c.f.exe, "fsdeny"}
			for range 20 {
				args = append(args, "read:"+c.p)
			}
			c.f.run(c.f.options(args, env))
		}()
	}
	wg.Wait()
	for _, c := range []struct {
		f           *fixture
		mine, other string
	}{{a, pa, pb}, {b, pb, pa}} {
		n, count := 0, 0
		for _, e := range fileEvents(c.f.validateEvents()) {
			switch evPath(e) {
			case c.mine:
				n++
				count += eventCount(e)
			case c.other:
				t.Errorf("sandbox got the other sandbox's denial: %v", e["message"])
			}
		}
		// The first denial is reported at once; the 19 repeats fold into
		// one more event with their count. (Under load the kernel drops
		// records beyond its audit queue, so the count can fall short;
		// it can never exceed what the sandbox did.)
		if n < 1 || n > 2 || count > 20 {
			t.Errorf("sandbox reading %s: %d events counting %d denials, want 2 counting up to 20", c.mine, n, count)
			for _, e := range c.f.validateEvents() {
				if e["class_uid"] != float64(ocsf.ClassProcessActivity) {
					t.Logf("event %v %v: %v", e["class_uid"], e["activity_name"], e["message"])
				}
			}
		}
		if count < 20 {
			t.Logf("sandbox reading %s: %d of 20 denials arrived (kernel audit backlog)", c.mine, count)
		}
	}
}

// A burst of 10,000 denied opens yields a bounded, folded set of events.
func TestDenialBurstIsFolded(t *testing.T) {
	f := newFixture(t)
	requireDenialEvents(t)
	testutil.HostLock(t, "audit")
	out := outsideDir(t)
	secret := filepath.Join(out, "secret")
	env, _ := BuildEnv(EnvInput{Host: os.Environ(), Workdir: f.workdir, Name: "t"})
	t0 := time.Now()
	stdout, _, res := f.run(f.options([]string{f.exe, "fsdeny", "burst:" + secret + ":10000"}, env))
	if res.ExitCode != 0 || !strings.HasPrefix(stdout, "elapsed_ns=") {
		t.Fatalf("burst: exit %d, %q", res.ExitCode, stdout)
	}
	var events, count int
	for _, e := range fileEvents(f.validateEvents()) {
		if evPath(e) != secret {
			continue
		}
		events++
		count += eventCount(e)
	}
	t.Logf("10000 denied opens in %v (run %v): %d events, counts summing to %d", strings.TrimSpace(stdout), time.Since(t0), events, count)
	// One key reports at most twice in a run (the first, then the folded
	// count). Under a burst the kernel drops records beyond its queue; a
	// denial whose syscall record was dropped has no executable, so it
	// is a second key: at most four events.
	if events < 1 || events > 4 {
		t.Fatalf("%d events for one repeated denial, want 1 to 4 (first + folded count, with and without the executable)", events)
	}
	if count > 10000 || count < 1 {
		t.Fatalf("folded count %d", count)
	}
}

func eventCount(e map[string]any) int {
	if v, ok := e["count"].(float64); ok {
		return int(v)
	}
	return 1
}

func landlockABI() (int, error) {
	pf := RunPreflight(nil, "landlock")
	return pf.LandlockABI, nil
}

var _ = json.Marshal

// Audit unavailable: the sandbox runs as usual and one Device Config
// State Change says denials are not reported.
func TestDenialLoggingUnavailable(t *testing.T) {
	f := newFixture(t)
	acquireAudit = func() *landlockaudit.Lease {
		return &landlockaudit.Lease{Mode: landlockaudit.ModeUnavailable, Detail: "simulated: no CAP_AUDIT_READ"}
	}
	defer func() { acquireAudit = landlockaudit.Acquire }()
	env, _ := BuildEnv(EnvInput{Host: os.Environ(), Workdir: f.workdir, Name: "t"})
	stdout, _, res := f.run(f.options([]string{f.exe, "fsdeny", "read:/root"}, env))
	if res.ExitCode != 0 || strings.TrimSpace(stdout) != "read=EACCES" {
		t.Fatalf("exit %d, %q", res.ExitCode, stdout)
	}
	n := 0
	for _, e := range f.validateEvents() {
		if e["class_uid"] == float64(ocsf.ClassDeviceConfigStateChange) && e["activity_name"] == ocsf.ActivityDenialLogging {
			n++
			if e["state_id"] != float64(ocsf.StateDisabled) || !strings.Contains(e["status_detail"].(string), "simulated") {
				t.Errorf("event %v", e)
			}
		}
		if e["class_uid"] == float64(ocsf.ClassFileActivity) {
			t.Errorf("a denial event without audit: %v", e["message"])
		}
	}
	if n != 1 {
		t.Fatalf("%d Denial Logging events, want 1", n)
	}
}

// The watcher reads the records only once the processes they name are
// gone (as on a loaded host, with a command that lives milliseconds):
// the sandbox's own domain is still recognised and its denials reported.
// Attribution that asked the cgroup about the domain's creator (the
// init) took it for another sandbox's and reported nothing.
func TestDenialsReadAfterTheProcessesExited(t *testing.T) {
	f := newFixture(t)
	requireDenialEvents(t)
	testutil.HostLock(t, "audit")
	watchAudit = func(cfg landlockaudit.Config) (*landlockaudit.Watcher, error) {
		owns := cfg.Owns
		cfg.Owns = func(pid int) bool {
			// Late: wait for the process to be gone (reaped), bounded.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if syscall.Kill(pid, 0) == syscall.ESRCH {
					break
				}
			}
			return owns(pid)
		}
		return landlockaudit.Watch(cfg)
	}
	defer func() { watchAudit = landlockaudit.Watch }()
	secret := filepath.Join(outsideDir(t), "secret")
	env, _ := BuildEnv(EnvInput{Host: os.Environ(), Workdir: f.workdir, Name: "t"})
	stdout, _, res := f.run(f.options([]string{f.exe, "fsdeny", "read:" + secret}, env))
	if res.ExitCode != 0 || strings.TrimSpace(stdout) != "read=EACCES" {
		t.Fatalf("exit %d, %q", res.ExitCode, stdout)
	}
	n := 0
	for _, e := range fileEvents(f.validateEvents()) {
		if evPath(e) != secret {
			continue
		}
		n++
		proc := e["actor"].(map[string]any)["process"].(map[string]any)
		if exe, _ := proc["file"].(map[string]any); exe["path"] != f.exe {
			t.Errorf("actor of the read denial: %v", proc)
		}
	}
	if n != 1 {
		t.Fatalf("%d events for the denied read, want 1", n)
	}
}

// A denial in the command's first instruction is reported even when
// setting up the reading (the audit lease, the subscription) is slow:
// the command here is itself a binary Landlock refuses to execute, so
// the refused execve is the first thing it does, and the reading is
// delayed by 300 ms. The init confines its spawning thread and starts
// the command only once the supervisor says the denials are read
// (MsgStart); were the command started before (as "go", which the
// supervisor sends before the reading is up), the denial would happen
// while audit is not yet enabled or nothing subscribed, and this test
// finds no event.
func TestDenialInTheFirstInstructionIsReported(t *testing.T) {
	f := newFixture(t)
	requireDenialEvents(t)
	testutil.HostLock(t, "audit")
	acquireAudit = func() *landlockaudit.Lease {
		time.Sleep(300 * time.Millisecond)
		return landlockaudit.Acquire()
	}
	defer func() { acquireAudit = landlockaudit.Acquire }()
	tool := filepath.Join(outsideDir(t), "tool")
	env, _ := BuildEnv(EnvInput{Host: os.Environ(), Workdir: f.workdir, Name: "t"})
	_, stderr, res := f.run(f.options([]string{tool}, env))
	if res.ExitCode != ExitNotExecutable {
		t.Fatalf("exit %d, want %d (stderr %s)", res.ExitCode, ExitNotExecutable, stderr)
	}
	n := 0
	for _, e := range fileEvents(f.validateEvents()) {
		if evPath(e) == tool && strings.Contains(e["status_detail"].(string), "fs.execute") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d events for the refused execve of %s, want 1", n, tool)
	}
}
