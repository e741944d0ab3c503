//go:build linux

package seccomp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/feature"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// markerErrno is a deny errno no kernel path returns, so that a denial by
// the filter cannot be mistaken for the kernel refusing the call itself
// (as root, many of these calls fail with EPERM for other reasons).
const markerErrno = 4000

const errnoEnv = "PALISADE_SECCOMP_TEST_ERRNO"

// reportPrefix marks the child's one line of results; test framework
// output around it is ignored.
const reportPrefix = "SECCOMP_REPORT "

type kernelResult struct {
	Name  string `json:"name"`
	Errno int    `json:"errno"`
}

type casesReport struct {
	Error       string         `json:"error,omitempty"`
	InstallTID  int            `json:"install_tid"`
	CasesTID    int            `json:"cases_tid"`
	Results     []kernelResult `json:"results"`
	ThreadModes map[int]string `json:"thread_modes"` // tid -> Seccomp: field
}

func printReport(v any) {
	b, _ := json.Marshal(v)
	fmt.Printf("\n%s%s\n", reportPrefix, b)
}

func readReport(t *testing.T, out []byte, v any) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), reportPrefix); ok {
			if err := json.Unmarshal([]byte(line), v); err != nil {
				t.Fatalf("child report: %v\n%s", err, out)
			}
			return
		}
	}
	t.Fatalf("child printed no report:\n%s", out)
}

// kernelCases are the table cases that run against the real kernel here.
func kernelCases() []tcase {
	var out []tcase
	for _, c := range cases() {
		if _, ok := c.nr(runtime.GOARCH); ok && !c.vmOnly {
			out = append(out, c)
		}
	}
	return out
}

// The case table against the real kernel: a child of the test binary
// sets no_new_privs, installs the filter with TSYNC from one thread and
// makes every call, with its raw 64-bit arguments, from another thread
// that existed before the filter did. The parent checks each errno. It
// runs once with the marker errno (so every denial is provably the
// filter's) and once with the production profile (EPERM).
func TestFilterTableInKernel(t *testing.T) {
	if testutil.IsChild("seccomp-cases") {
		casesChild()
		return
	}
	testutil.RequireFeature(t, "seccomp")
	if _, ok := arches[runtime.GOARCH]; !ok {
		t.Fatalf("no syscall table for %s", runtime.GOARCH)
	}
	for _, mode := range []struct {
		name  string
		errno int
	}{{"marker-errno", markerErrno}, {"default-eperm", 0}} {
		t.Run(mode.name, func(t *testing.T) {
			out, err := testutil.RunInChild(t, "TestFilterTableInKernel", "seccomp-cases",
				[]string{errnoEnv + "=" + strconv.Itoa(mode.errno)})
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			var rep casesReport
			readReport(t, out, &rep)
			if rep.Error != "" {
				t.Fatalf("child: %s", rep.Error)
			}
			denyErrno := mode.errno
			if denyErrno == 0 {
				denyErrno = EPERM
			}
			got := map[string]int{}
			for _, r := range rep.Results {
				got[r.Name] = r.Errno
			}
			kc := kernelCases()
			if len(kc) < 90 {
				t.Fatalf("only %d kernel cases", len(kc))
			}
			for _, c := range kc {
				e, ok := got[c.name]
				if !ok {
					t.Errorf("%s: no result", c.name)
					continue
				}
				switch c.want {
				case deny:
					if e != denyErrno {
						t.Errorf("%s: errno %d (%v), want the filter's %d", c.name, e, unix.Errno(e), denyErrno)
					}
				case enosys:
					if e != ENOSYS {
						t.Errorf("%s: errno %d (%v), want ENOSYS", c.name, e, unix.Errno(e))
					}
				case allow:
					if e == markerErrno {
						t.Errorf("%s: denied by the filter, want allowed", c.name)
					}
					if c.kerr == kernelFails {
						if e == 0 {
							t.Errorf("%s: the kernel accepted the call, want it to fail", c.name)
						}
					} else if c.kerr != anyKernelErrno && e != c.kerr {
						t.Errorf("%s: errno %d (%v), want %d (%v) from the kernel", c.name, e, unix.Errno(e), c.kerr, unix.Errno(c.kerr))
					}
				}
			}
			// TSYNC: the thread that ran the cases predates the filter,
			// and every thread reports filter mode.
			if rep.CasesTID == 0 || rep.CasesTID == rep.InstallTID {
				t.Errorf("cases ran on thread %d, filter installed on %d: want two different threads", rep.CasesTID, rep.InstallTID)
			}
			if len(rep.ThreadModes) < 2 {
				t.Errorf("child saw %d threads", len(rep.ThreadModes))
			}
			for tid, m := range rep.ThreadModes {
				if m != "2" {
					t.Errorf("thread %d has Seccomp: %q, want 2 (filter)", tid, m)
				}
			}
		})
	}
}

func casesChild() {
	rep := casesReport{ThreadModes: map[int]string{}}
	defer func() {
		printReport(rep)
		os.Exit(0)
	}()
	errno, err := strconv.Atoi(os.Getenv(errnoEnv))
	if err != nil {
		rep.Error = fmt.Sprintf("%s: %v", errnoEnv, err)
		return
	}
	filter, err := Build(Config{denyErrno: uint16(errno)})
	if err != nil {
		rep.Error = err.Error()
		return
	}
	kc := kernelCases()

	// A thread that exists, idle, before the filter is installed from
	// another one. It keeps its OS thread to itself for good.
	ready := make(chan int)
	start := make(chan struct{})
	done := make(chan []kernelResult)
	go func() {
		runtime.LockOSThread()
		ready <- unix.Gettid()
		<-start
		res := make([]kernelResult, 0, len(kc))
		for _, c := range kc {
			nr, _ := c.nr(runtime.GOARCH)
			a := c.args
			buf := new([2]int32)
			if c.bufArg > 0 {
				a[c.bufArg-1] = uint64(uintptr(unsafe.Pointer(buf)))
			}
			r1, _, e := unix.Syscall6(uintptr(nr), uintptr(a[0]), uintptr(a[1]), uintptr(a[2]), uintptr(a[3]), uintptr(a[4]), uintptr(a[5]))
			runtime.KeepAlive(buf)
			if e == 0 && c.sys == "socket" {
				unix.Close(int(r1))
			}
			if e == 0 && c.sys == "socketpair" && c.bufArg > 0 {
				unix.Close(int(buf[0]))
				unix.Close(int(buf[1]))
			}
			res = append(res, kernelResult{Name: c.name, Errno: int(e)})
		}
		done <- res
	}()
	rep.CasesTID = <-ready

	runtime.LockOSThread()
	rep.InstallTID = unix.Gettid()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		rep.Error = "PR_SET_NO_NEW_PRIVS: " + err.Error()
		return
	}
	if err := Install(filter); err != nil {
		rep.Error = "Install: " + err.Error()
		return
	}
	close(start)
	rep.Results = <-done

	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		rep.Error = fmt.Sprintf("list threads: %v", err)
		return
	}
	for _, p := range tasks {
		tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		b, err := os.ReadFile(p)
		if err != nil {
			continue // thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
				rep.ThreadModes[tid] = strings.TrimSpace(v)
			}
		}
	}
}

// Install refuses to run without no_new_privs and installs nothing.
func TestInstallRequiresNoNewPrivs(t *testing.T) {
	if testutil.IsChild("seccomp-no-nnp") {
		runtime.LockOSThread()
		rep := map[string]any{}
		filter, err := Build(Config{})
		if err == nil {
			err = Install(filter)
		}
		rep["is_errnonewprivs"] = errors.Is(err, ErrNoNewPrivs)
		rep["error"] = fmt.Sprint(err)
		mode, _ := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
		rep["mode"] = mode
		printReport(rep)
		os.Exit(0)
	}
	testutil.RequireFeature(t, "seccomp")
	requireCondition(t, "seccomp-test:no-nnp", func() error {
		if v, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); v != 0 {
			return errors.New("the test process already runs with no_new_privs, so a child cannot lack it")
		}
		return nil
	})
	out, err := testutil.RunInChild(t, "TestInstallRequiresNoNewPrivs", "seccomp-no-nnp", nil)
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var rep struct {
		IsErr bool   `json:"is_errnonewprivs"`
		Error string `json:"error"`
		Mode  int    `json:"mode"`
	}
	readReport(t, out, &rep)
	if !rep.IsErr || !strings.Contains(rep.Error, "PR_SET_NO_NEW_PRIVS") {
		t.Errorf("Install without no_new_privs: %q, want ErrNoNewPrivs naming PR_SET_NO_NEW_PRIVS", rep.Error)
	}
	if rep.Mode != 0 {
		t.Errorf("seccomp mode %d after the refused Install, want 0", rep.Mode)
	}
}

// A thread already under a filter that is not an ancestor of the new one
// cannot be synchronised: Install reports it as *TSYNCError with its TID
// and installs nothing.
func TestInstallReportsTSYNCFailure(t *testing.T) {
	if testutil.IsChild("seccomp-tsync") {
		tsyncChild()
		return
	}
	testutil.RequireFeature(t, "seccomp")
	out, err := testutil.RunInChild(t, "TestInstallReportsTSYNCFailure", "seccomp-tsync", nil)
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var rep struct {
		Error     string `json:"error"`
		OtherTID  int    `json:"other_tid"`
		ErrTID    int    `json:"err_tid"`
		IsTSYNC   bool   `json:"is_tsync"`
		Message   string `json:"message"`
		Mode      int    `json:"mode"`
		OtherMode string `json:"other_mode"`
	}
	readReport(t, out, &rep)
	if rep.Error != "" {
		t.Fatalf("child: %s", rep.Error)
	}
	if !rep.IsTSYNC || rep.ErrTID != rep.OtherTID || rep.OtherTID == 0 {
		t.Fatalf("Install error %q (TSYNCError %v, TID %d), want *TSYNCError naming thread %d", rep.Message, rep.IsTSYNC, rep.ErrTID, rep.OtherTID)
	}
	if !strings.Contains(rep.Message, strconv.Itoa(rep.OtherTID)) {
		t.Errorf("message %q does not name thread %d", rep.Message, rep.OtherTID)
	}
	if rep.Mode != 0 {
		t.Errorf("calling thread has seccomp mode %d after the failed Install, want 0", rep.Mode)
	}
	if rep.OtherMode != "2" {
		t.Errorf("other thread mode %q, want its own filter (2)", rep.OtherMode)
	}
}

func tsyncChild() {
	rep := map[string]any{}
	defer func() {
		printReport(rep)
		os.Exit(0)
	}()
	// Another thread installs its own allow-all filter without TSYNC.
	other := make(chan any)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread keeps its filter
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			other <- err
			return
		}
		prog := []unix.SockFilter{{Code: 0x06, K: uint32(ActionAllow)}}
		fprog := unix.SockFprog{Len: 1, Filter: &prog[0]}
		if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
			other <- e
			return
		}
		other <- unix.Gettid()
		select {} // keep the thread alive and locked
	}()
	v := <-other
	tid, ok := v.(int)
	if !ok {
		rep["error"] = fmt.Sprintf("other thread: %v", v)
		return
	}
	rep["other_tid"] = tid
	if b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if m, ok := strings.CutPrefix(line, "Seccomp:"); ok {
				rep["other_mode"] = strings.TrimSpace(m)
			}
		}
	}

	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		rep["error"] = err.Error()
		return
	}
	filter, err := Build(Config{})
	if err != nil {
		rep["error"] = err.Error()
		return
	}
	err = Install(filter)
	var te *TSYNCError
	if errors.As(err, &te) {
		rep["is_tsync"] = true
		rep["err_tid"] = te.TID
	}
	rep["message"] = fmt.Sprint(err)
	rep["mode"], _ = unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
}

func TestInstallRejectsBadLength(t *testing.T) {
	// Checked before anything touches the process, so safe in-process.
	if err := Install(nil); err == nil {
		t.Fatal("Install(nil) succeeded")
	}
	if err := Install(make([]bpf.RawInstruction, MaxInstructions+1)); err == nil {
		t.Fatal("Install of an oversized filter succeeded")
	}
}

var conditionMu sync.Mutex

// requireCondition registers a test-only feature probe (once) and gates on
// it through testutil.RequireFeature, so that a precondition this test
// cannot create skips with a reason, or fails under
// PALISADE_REQUIRE_PRIVILEGED=1.
func requireCondition(t *testing.T, name string, check func() error) {
	t.Helper()
	conditionMu.Lock()
	if _, ok := feature.Lookup(name); !ok {
		feature.Register(&feature.Probe{Name: name, Check: check})
	}
	conditionMu.Unlock()
	testutil.RequireFeature(t, name)
}

// childOutput runs the test binary's named test as helper without a
// testing.TB (for probes), returning its output.
func childOutput(testName, helper string) ([]byte, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^"+testName+"$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(), testutil.ChildEnv+"="+helper)
	return cmd.CombinedOutput()
}
