package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The gate must fail, not skip, when PALISADE_REQUIRE_PRIVILEGED=1. Run a
// child test that calls RequireFeature on a feature that cannot exist and
// check how it ends in both modes.
func TestRequireFeatureStrictFails(t *testing.T) {
	if IsChild("strict-gate") {
		RequireFeature(t, "test:never")
		t.Log("REACHED-AFTER-GATE")
		return
	}
	run := func(strict string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRequireFeatureStrictFails$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), ChildEnv+"=strict-gate", RequirePrivilegedEnv+"="+strict)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("1")
	if err == nil || !strings.Contains(out, "--- FAIL") || strings.Contains(out, "REACHED-AFTER-GATE") {
		t.Fatalf("strict mode: err=%v out=%s", err, out)
	}
	out, err = run("")
	if err != nil || !strings.Contains(out, "--- SKIP") || !strings.Contains(out, "test:never") {
		t.Fatalf("lenient mode: err=%v out=%s", err, out)
	}
}

// A host-shape probe (a layout, not a lack) skips in both modes.
func TestRequireFeatureHostShapeSkips(t *testing.T) {
	if IsChild("shape-gate") {
		RequireFeature(t, "test:other-layout")
		t.Log("REACHED-AFTER-GATE")
		return
	}
	for _, strict := range []string{"1", ""} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRequireFeatureHostShapeSkips$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), ChildEnv+"=shape-gate", RequirePrivilegedEnv+"="+strict)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- SKIP") || strings.Contains(string(out), "REACHED-AFTER-GATE") ||
			!strings.Contains(string(out), "another host layout") {
			t.Fatalf("%s=%q: err=%v out=%s", RequirePrivilegedEnv, strict, err, out)
		}
	}
}

func TestUniqueName(t *testing.T) {
	a, b := UniqueName("pal"), UniqueName("pal")
	if a == b || len(a) != 11 || !strings.HasPrefix(a, "pal") {
		t.Fatalf("UniqueName gave %q and %q", a, b)
	}
}

func TestCheckFDLeaksDetects(t *testing.T) {
	ft := &fakeT{TB: t}
	CheckFDLeaks(ft)
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ft.cleanups {
		c()
	}
	f.Close()
	if !ft.failed {
		t.Fatal("an open fd was not reported as leaked")
	}
}

type fakeT struct {
	testing.TB
	cleanups []func()
	failed   bool
}

func (f *fakeT) Cleanup(fn func())     { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Helper()               {}

// An unreachable service fails, not skips, under
// PALISADE_REQUIRE_PRIVILEGED=1, and names what the test needed.
func TestRequireReachableStrictFails(t *testing.T) {
	if IsChild("reach-gate") {
		RequireReachable(t, "the test registry", "127.0.0.1:1")
		t.Log("REACHED-AFTER-GATE")
		return
	}
	for strict, want := range map[string]string{"1": "--- FAIL", "": "--- SKIP"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRequireReachableStrictFails$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), ChildEnv+"=reach-gate", RequirePrivilegedEnv+"="+strict)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), want) || strings.Contains(string(out), "REACHED-AFTER-GATE") ||
			!strings.Contains(string(out), "the test registry (127.0.0.1:1 reachable from this host)") {
			t.Fatalf("%s=%q: %s", RequirePrivilegedEnv, strict, out)
		}
	}
}

// fakeTB records Logf calls.
type fakeTB struct {
	testing.TB
	logs     []string
	cleanups []func()
}

func (f *fakeTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Helper()           {}

func TestLogWriterLinesToTheTestLog(t *testing.T) {
	f := &fakeTB{}
	w := LogWriter(f, "proxy")
	w.Write([]byte("level=WARN msg=one\nlevel=INFO ms"))
	w.Write([]byte("g=two\nunfinished"))
	for _, c := range f.cleanups {
		c()
	}
	w.Write([]byte("after the test\n"))
	want := []string{"proxy: level=WARN msg=one", "proxy: level=INFO msg=two", "proxy: unfinished"}
	if strings.Join(f.logs, "|") != strings.Join(want, "|") {
		t.Fatalf("logged %q, want %q", f.logs, want)
	}
}
