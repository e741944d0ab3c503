package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runFixture runs testsum on testdata/fixture (a module of its own with
// a passing, a skipping and, with FIXTURE_FAIL=1, a failing test).
func runFixture(t *testing.T, fail bool) (string, int) {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err) // the test itself runs under go test
	}
	dir, _ := filepath.Abs("testdata/fixture")
	v := "0"
	if fail {
		v = "1"
	}
	t.Setenv("FIXTURE_FAIL", v)
	t.Setenv("GOFLAGS", "-mod=mod")
	var out, errb bytes.Buffer
	code := run([]string{"-go", goCmd, "-C", dir, "--", "-count=1", "./..."}, &out, &errb)
	return out.String() + errb.String(), code
}

// A failing test: exit 1, its log shown (the child's WARN line with it),
// a passing test's log and stray stderr never; the skip summary last.
func TestFailureStaysFailure(t *testing.T) {
	out, code := runFixture(t, true)
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{"--- FAIL: TestFail", "FAILING-LOG", "boom", "FAIL\texample.com/fixture/a", "ok  \texample.com/fixture/b"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "PASSING-LOG") || strings.Contains(out, "PASSING-STDERR") {
		t.Errorf("a passing test's output was printed:\n%s", out)
	}
	if i := strings.Index(out, "--- FAIL: TestFail"); i < 0 || i > strings.Index(out, "FAILING-LOG") {
		t.Errorf("the --- FAIL line does not come first:\n%s", out)
	}
}

// All passing: exit 0, one ok line per package, and the skips grouped
// by reason, most frequent first, naming the tests.
func TestSkipSummary(t *testing.T) {
	out, code := runFixture(t, false)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, out)
	}
	i := strings.Index(out, "\nSkipped tests: 3, by reason")
	if i < 0 {
		t.Fatalf("no skip summary:\n%s", out)
	}
	sum := out[i:]
	root := strings.Index(sum, "2  requires root (euid is 1000)")
	curl := strings.Index(sum, "1  requires the curl command on PATH")
	if root < 0 || curl < root || !strings.Contains(sum, "example.com/fixture/a.TestSkip, example.com/fixture/b.TestSkip2") ||
		!strings.Contains(sum, "example.com/fixture/b.TestSub/inner") {
		t.Errorf("skip summary:\n%s", sum)
	}
	if strings.Contains(out, "PASSING") {
		t.Errorf("a passing test's output was printed:\n%s", out)
	}
}

func TestExitCodeNeverHidesAFailure(t *testing.T) {
	okSum, failedSum := &summary{}, &summary{failed: true}
	exitErr := func(code string) error { return exec.Command("sh", "-c", "exit "+code).Run() }
	cases := []struct {
		name string
		wait error
		read error
		s    *summary
		want int
	}{
		{"pass", nil, nil, okSum, 0},
		{"go test failed", exitErr("1"), nil, okSum, 1},
		{"go test usage", exitErr("2"), nil, okSum, 2},
		{"go test killed", exec.Command("sh", "-c", "kill -9 $$").Run(), nil, okSum, 1},
		{"go test said 0 but a test failed", nil, nil, failedSum, 1},
		{"stream unreadable", nil, errors.New("read error"), okSum, 1},
		{"go test not run", os.ErrNotExist, nil, okSum, 1},
	}
	for _, c := range cases {
		if got := exitCode(c.wait, c.read, c.s); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
}

// Lines that are not events (a go command error) pass through; a
// build failure is printed and counts as a failure.
func TestNonEventsAndBuildFailures(t *testing.T) {
	var out bytes.Buffer
	s := newSummary(&out)
	stream := `go: warning: something
{"ImportPath":"x/c [x/c.test]","Action":"build-output","Output":"# x/c\n"}
{"ImportPath":"x/c [x/c.test]","Action":"build-output","Output":"c.go:3:23: cannot use \"x\"\n"}
{"ImportPath":"x/c [x/c.test]","Action":"build-fail"}
{"Action":"start","Package":"x/c"}
{"Action":"output","Package":"x/c","Output":"FAIL\tx/c [build failed]\n"}
{"Action":"fail","Package":"x/c","Elapsed":0,"FailedBuild":"x/c [x/c.test]"}
`
	if err := s.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	want := "go: warning: something\n# x/c\nc.go:3:23: cannot use \"x\"\nFAIL\tx/c [build failed]\n"
	if out.String() != want || !s.failed {
		t.Errorf("output %q (failed %v), want %q", out.String(), s.failed, want)
	}
}
