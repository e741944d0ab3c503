package ocsf_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// padded returns a launch event whose process name is n bytes long, so
// lines are large enough to expose interleaving.
func padded(src *ocsf.Source, writer, seq, n int) ocsf.Event {
	p := ocsf.Process{PID: 1000 + seq, Name: strings.Repeat("x", n), UID: fmt.Sprintf("w%d-%d", writer, seq)}
	return src.ProcessLaunch(p, ocsf.Actor{AppName: "test"})
}

// checkLines parses every line of data and returns how many came from
// each writer, failing on any line that is not one whole JSON object.
func checkLines(t *testing.T, data []byte) map[string]int {
	t.Helper()
	per := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	n := 0
	for sc.Scan() {
		n++
		var ev struct {
			Process struct {
				UID string `json:"uid"`
			} `json:"process"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %d is not one JSON object (interleaved?): %v: %.120s", n, err, sc.Text())
		}
		w, _, _ := strings.Cut(ev.Process.UID, "-")
		per[w]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte("\n")) {
		t.Fatal("file does not end with a newline")
	}
	return per
}

func testSource() *ocsf.Source {
	s := ocsf.NewSource("sbx-test", "ocsf-test", "0.0.0-test")
	return s
}

func TestWriterConcurrentGoroutines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	w, err := ocsf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := testSource()
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				if err := w.Emit(padded(src, i, j, 100+(j*37)%9000)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Written() != writers*each || w.Errors() != 0 {
		t.Fatalf("written %d errors %d, want %d and 0", w.Written(), w.Errors(), writers*each)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	per := checkLines(t, data)
	for i := range writers {
		if got := per[fmt.Sprintf("w%d", i)]; got != each {
			t.Errorf("writer %d: %d lines, want %d", i, got, each)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("events file mode %v, want 0600", fi.Mode().Perm())
	}
}

const childEnvPath = "OCSF_TEST_EVENTS_PATH"
const childEnvID = "OCSF_TEST_WRITER_ID"

// TestWriterConcurrentProcesses appends from several processes (child
// copies of this test binary) to one file and checks no line interleaves.
func TestWriterConcurrentProcesses(t *testing.T) {
	if testutil.IsChild("ocsf-append") {
		id, _ := strconv.Atoi(os.Getenv(childEnvID))
		w, err := ocsf.OpenFile(os.Getenv(childEnvPath))
		if err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		src := testSource()
		for j := range 300 {
			if err := w.Emit(padded(src, id, j, 200+(j*53)%20000)); err != nil {
				fmt.Println(err)
				os.Exit(4)
			}
		}
		w.Close()
		os.Exit(0)
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	const procs = 4
	var wg sync.WaitGroup
	errs := make([]error, procs)
	outs := make([][]byte, procs)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = testutil.RunInChild(t, "TestWriterConcurrentProcesses", "ocsf-append",
				[]string{childEnvPath + "=" + path, childEnvID + "=" + strconv.Itoa(i)})
		}()
	}
	wg.Wait()
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("child %d: %v: %s", i, errs[i], outs[i])
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	per := checkLines(t, data)
	for i := range procs {
		if got := per[fmt.Sprintf("w%d", i)]; got != 300 {
			t.Errorf("process %d: %d lines, want 300", i, got)
		}
	}
}

type failingWriter struct{ calls int }

func (f *failingWriter) Write(p []byte) (int, error) {
	f.calls++
	return 0, errors.New("disk full")
}

func TestWriterErrorsCountedNotFatal(t *testing.T) {
	fw := &failingWriter{}
	w := ocsf.NewWriter(fw)
	src := testSource()
	for i := range 3 {
		err := w.Emit(padded(src, 0, i, 10))
		if err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("Emit error = %v, want the write error", err)
		}
	}
	if w.Errors() != 3 || w.Written() != 0 {
		t.Fatalf("errors %d written %d, want 3 and 0", w.Errors(), w.Written())
	}
	if w.Err() == nil {
		t.Fatal("Err() = nil after failures")
	}
	// A malformed event is an error too, counted, and reaches no writer.
	bad := src.ProcessLaunch(ocsf.Process{}, ocsf.Actor{AppName: "x"})
	if err := w.Emit(bad); err == nil {
		t.Fatal("event without process.pid/uid was written")
	}
	if w.Errors() != 4 || fw.calls != 3 {
		t.Fatalf("errors %d, writer calls %d; want 4 and 3", w.Errors(), fw.calls)
	}
	w.Close()
	if err := w.Emit(padded(src, 0, 0, 1)); !errors.Is(err, ocsf.ErrClosed) {
		t.Fatalf("Emit after Close = %v, want ErrClosed", err)
	}
}

// oneWrite records each Write call, to prove a line is one call.
type oneWrite struct{ calls [][]byte }

func (o *oneWrite) Write(p []byte) (int, error) {
	o.calls = append(o.calls, append([]byte(nil), p...))
	return len(p), nil
}

func TestWriterOneWritePerLine(t *testing.T) {
	ow := &oneWrite{}
	w := ocsf.NewWriter(ow)
	src := testSource()
	for i := range 5 {
		if err := w.Emit(padded(src, 0, i, 5000)); err != nil {
			t.Fatal(err)
		}
	}
	if len(ow.calls) != 5 {
		t.Fatalf("%d Write calls for 5 events", len(ow.calls))
	}
	for i, c := range ow.calls {
		if bytes.Count(c, []byte("\n")) != 1 || c[len(c)-1] != '\n' {
			t.Fatalf("call %d is not exactly one line", i)
		}
		if !json.Valid(c) {
			t.Fatalf("call %d is not valid JSON", i)
		}
	}
	if err := w.WriteLine([]byte("{\"a\":1}\n{}")); err == nil {
		t.Fatal("WriteLine accepted an embedded newline")
	}
}

func TestOpenDest(t *testing.T) {
	var stdout bytes.Buffer
	w, err := ocsf.OpenDest("-", &stdout)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Emit(padded(testSource(), 0, 0, 3)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if !json.Valid(bytes.TrimSpace(stdout.Bytes())) {
		t.Fatalf("stdout got %q", stdout.String())
	}
	if _, err := ocsf.OpenDest("", &stdout); err == nil {
		t.Fatal("empty destination accepted")
	}
	dir := t.TempDir()
	// A symlink planted at the events path is refused (O_NOFOLLOW).
	target := filepath.Join(dir, "target")
	os.WriteFile(target, nil, 0o644)
	link := filepath.Join(dir, "events.jsonl")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ocsf.OpenDest(link, nil); err == nil {
		t.Fatal("symlinked events path accepted")
	}
	if _, err := ocsf.OpenFile(dir); err == nil {
		t.Fatal("directory accepted as events file")
	}
	// Appends: existing content is kept.
	p := filepath.Join(dir, "append.jsonl")
	os.WriteFile(p, []byte("{\"old\":1}\n"), 0o600)
	w, err = ocsf.OpenDest(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Emit(padded(testSource(), 0, 0, 3))
	w.Close()
	data, _ := os.ReadFile(p)
	if !bytes.HasPrefix(data, []byte("{\"old\":1}\n")) || bytes.Count(data, []byte("\n")) != 2 {
		t.Fatalf("append lost data: %q", data)
	}
}

func TestDiscard(t *testing.T) {
	if err := ocsf.Discard.Emit(padded(testSource(), 0, 0, 3)); err != nil {
		t.Fatal(err)
	}
	if err := ocsf.Discard.Emit(testSource().ProcessLaunch(ocsf.Process{}, ocsf.Actor{})); err == nil {
		t.Fatal("Discard accepted a malformed event")
	}
}

// EmitLine writes an encoded line as Emit writes an event's: one Write
// call, counted; a line without its final newline or with another one
// inside is refused, counted as an error, and reaches no writer.
func TestWriterEmitLine(t *testing.T) {
	ow := &oneWrite{}
	w := ocsf.NewWriter(ow)
	var le ocsf.LineEmitter = w
	if err := le.EmitLine([]byte("{\"a\":1}\n")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "{\"a\":1}", "{\"a\":1}\n{}\n", "\n", "[1]\n"} {
		if err := w.EmitLine([]byte(bad)); err == nil {
			t.Errorf("EmitLine(%q) accepted", bad)
		}
	}
	if len(ow.calls) != 1 || string(ow.calls[0]) != "{\"a\":1}\n" {
		t.Fatalf("Write calls %q, want the one good line", ow.calls)
	}
	if w.Written() != 1 || w.Errors() != 5 {
		t.Fatalf("written %d errors %d, want 1 and 5", w.Written(), w.Errors())
	}
	w.Close()
	if err := w.EmitLine([]byte("{}\n")); !errors.Is(err, ocsf.ErrClosed) {
		t.Fatalf("EmitLine after Close = %v, want ErrClosed", err)
	}
}
