// Command testsum runs `go test -json` and prints what go test prints
// without -v — one ok/FAIL line per package, and the output of the tests
// that failed (their t.Log lines, where the tests put their child
// processes' logs) — then a summary of the tests that were skipped and
// why. `make test` runs it.
//
// It never turns a failure into success: it exits with go test's own
// status, and with 1 when go test said 0 but a test or package failed,
// or when its output could not be read to the end.
//
// Usage: go run ./scripts/testsum [-go GO] [-C DIR] -- [go test flags] [packages]
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testsum", flag.ContinueOnError)
	fs.SetOutput(stderr)
	goCmd := fs.String("go", "go", "the go command")
	dir := fs.String("C", "", "run go test in this directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cmd := exec.Command(*goCmd, append([]string{"test", "-json"}, fs.Args()...)...)
	cmd.Dir = *dir
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testsum:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testsum:", err)
		return 1
	}
	// An interrupt reaches go test too (the terminal signals the whole
	// process group); keep reading until it has reported and exited. A
	// SIGTERM sent to this process alone is passed on.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	s := newSummary(stdout)
	readErr := s.read(out)
	werr := cmd.Wait()
	signal.Stop(sigs)
	s.printSkips()
	return exitCode(werr, readErr, s)
}

// exitCode is go test's status, made a failure when anything the stream
// showed (or failed to show) says so.
func exitCode(waitErr, readErr error, s *summary) int {
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(waitErr, &ee):
		code = ee.ExitCode()
		if code <= 0 {
			code = 1 // killed by a signal
		}
	case waitErr != nil:
		code = 1
	}
	if code == 0 && (readErr != nil || s.failed) {
		code = 1
	}
	return code
}

// event is one line of `go test -json` (test2json).
type event struct {
	Action  string  `json:"Action"`
	Package string  `json:"Package"`
	Test    string  `json:"Test"`
	Elapsed float64 `json:"Elapsed"`
	Output  string  `json:"Output"`
}

type testKey struct{ pkg, test string }

type summary struct {
	w       io.Writer
	failed  bool
	outputs map[testKey][]string // output of tests (and packages, test "") still running
	skipped []skip
}

type skip struct {
	pkg, test, reason string
}

func newSummary(w io.Writer) *summary {
	return &summary{w: w, outputs: map[testKey][]string{}}
}

// read consumes the stream. Lines that are not JSON events (a go command
// error, a compiler message) are printed as they are.
func (s *summary) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			s.line(line)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			s.failed = true
			return err
		}
	}
}

func (s *summary) line(line []byte) {
	var e event
	if !bytes.HasPrefix(line, []byte("{")) || json.Unmarshal(line, &e) != nil || e.Action == "" {
		s.w.Write(line)
		return
	}
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		// A compiler's message, as go test prints it at once.
		io.WriteString(s.w, e.Output)
	case "build-fail":
		s.failed = true
	case "output":
		s.outputs[k] = append(s.outputs[k], e.Output)
	case "pass":
		if e.Test == "" {
			// go test's own "ok" line ("(cached)", coverage and all).
			if l := verdictLine(s.outputs[k], "ok  \t"+e.Package); l != "" {
				io.WriteString(s.w, l)
			} else {
				fmt.Fprintf(s.w, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
			}
			s.dropPackage(e.Package)
		}
		delete(s.outputs, k)
	case "skip":
		if e.Test == "" {
			fmt.Fprintf(s.w, "?   \t%s\t[no test files]\n", e.Package)
			s.dropPackage(e.Package)
		} else {
			s.skipped = append(s.skipped, skip{e.Package, e.Test, skipReason(s.outputs[k])})
		}
		delete(s.outputs, k)
	case "fail":
		s.failed = true
		if e.Test != "" {
			s.print(s.outputs[k])
			delete(s.outputs, k)
			return
		}
		// The package: what it printed outside its tests (a panic, a
		// timeout), ending with go test's own FAIL line.
		s.print(s.outputs[k])
		if verdictLine(s.outputs[k], "FAIL\t"+e.Package) == "" {
			fmt.Fprintf(s.w, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
		delete(s.outputs, k)
		s.dropPackage(e.Package)
	}
}

// verdictLine is the line of lines that starts with prefix followed by
// a tab or a space ("ok  \tpkg\t0.1s", "FAIL\tpkg [build failed]").
func verdictLine(lines []string, prefix string) string {
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok && (strings.HasPrefix(rest, "\t") || strings.HasPrefix(rest, " ")) {
			return l
		}
	}
	return ""
}

// print writes a test's output as go test does without -v: its
// "--- FAIL" line first, then what it logged, without the progress
// lines.
func (s *summary) print(lines []string) {
	for _, l := range lines {
		if verdict.MatchString(l) {
			io.WriteString(s.w, l)
		}
	}
	for _, l := range lines {
		if !progress.MatchString(l) && !verdict.MatchString(l) {
			io.WriteString(s.w, l)
		}
	}
}

var (
	progress = regexp.MustCompile(`^=== (RUN|PAUSE|CONT|NAME)\s`)
	verdict  = regexp.MustCompile(`^\s*--- (FAIL|PASS|SKIP): `)
)

// dropPackage forgets what is left of a finished package.
func (s *summary) dropPackage(pkg string) {
	for k := range s.outputs {
		if k.pkg == pkg {
			delete(s.outputs, k)
		}
	}
}

// skipLine is a t.Skip message as the testing package prints it:
// "    file_test.go:12: reason".
var skipLine = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)

// skipReason is the last message a skipped test logged (t.Skip's own).
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if m := skipLine.FindStringSubmatch(strings.TrimRight(lines[i], "\n")); m != nil {
			return m[1]
		}
	}
	return "no reason given"
}

// printSkips writes the skipped tests grouped by reason, most frequent
// first, at most maxNames names per reason.
func (s *summary) printSkips() {
	const maxNames = 6
	if len(s.skipped) == 0 {
		fmt.Fprintln(s.w, "\nSkipped tests: none.")
		return
	}
	by := map[string][]string{}
	for _, sk := range s.skipped {
		by[sk.reason] = append(by[sk.reason], shortPkg(sk.pkg)+"."+sk.test)
	}
	reasons := make([]string, 0, len(by))
	for r := range by {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if len(by[reasons[i]]) != len(by[reasons[j]]) {
			return len(by[reasons[i]]) > len(by[reasons[j]])
		}
		return reasons[i] < reasons[j]
	})
	fmt.Fprintf(s.w, "\nSkipped tests: %d, by reason", len(s.skipped))
	if os.Getenv("PALISADE_REQUIRE_PRIVILEGED") == "" {
		fmt.Fprint(s.w, " (PALISADE_REQUIRE_PRIVILEGED=1, as .ci/run sets, turns a missing privilege, feature, command or data into a failure)")
	}
	fmt.Fprintln(s.w, ":")
	for _, r := range reasons {
		names := by[r]
		sort.Strings(names)
		more := ""
		if len(names) > maxNames {
			more = fmt.Sprintf(" and %d more", len(names)-maxNames)
			names = names[:maxNames]
		}
		fmt.Fprintf(s.w, "  %3d  %s\n       %s%s\n", len(by[r]), r, strings.Join(names, ", "), more)
	}
}

// shortPkg drops the module path.
func shortPkg(p string) string {
	const mod = "github.com/palisade-sandbox/palisade/"
	return strings.TrimPrefix(p, mod)
}
