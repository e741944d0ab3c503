// Package ocsftest validates OCSF events against the OCSF 1.8.0 class and
// object definitions (the schema server export the repository carries in testdata/ocsf/v1.8.0),
// so every producer's tests can prove what it emits is well formed:
// attribute names per class and object (profiles honoured), types, required
// attributes, enum ids and their caption siblings, at_least_one/just_one
// constraints, type_uid and metadata.version.
//
// ValidateJSON and Schema.Validate are plain functions; Validate,
// ValidateEvent, ValidateLines and Recorder are the testing.TB helpers. The
// definitions are a data dependency: when they cannot be found the helpers
// skip the test with the reason, or fail it under
// PALISADE_REQUIRE_PRIVILEGED=1 (testutil.RequireData).
//
// The shared export lacks a few objects Palisade events carry (os, file,
// fingerprint, policy, network_connection_info, user). The package embeds
// them under supplement/, compiled from the OCSF schema source at the 1.8.0
// release by supplement/compile.py, which first proves its output equal to
// the export for every object the export does have.
package ocsftest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// RequireSchema returns the definitions, or skips (fails under
// PALISADE_REQUIRE_PRIVILEGED=1) when they cannot be found or loaded.
func RequireSchema(t testing.TB) *Schema {
	t.Helper()
	s, err := Default()
	testutil.RequireData(t, "the OCSF "+Version+" definitions (testdata/ocsf/v"+Version+" or $"+DirEnv+")", err)
	return s
}

// Validate fails t with every violation in one JSONL line.
func Validate(t testing.TB, line []byte) {
	t.Helper()
	s := RequireSchema(t)
	report(t, line, s.Validate(line))
}

func report(t testing.TB, line []byte, errs []error) {
	t.Helper()
	if len(errs) == 0 {
		return
	}
	shown := line
	if len(shown) > 2000 {
		shown = append(shown[:2000:2000], "..."...)
	}
	for _, err := range errs {
		t.Errorf("OCSF: %v", err)
	}
	t.Errorf("OCSF: in event %s", shown)
}

// ValidateEvent marshals ev with ocsf.Marshal, validates it and returns
// the line.
func ValidateEvent(t testing.TB, ev ocsf.Event) []byte {
	t.Helper()
	line, err := ocsf.Marshal(ev)
	if err != nil {
		t.Errorf("ocsf.Marshal: %v", err)
		return nil
	}
	Validate(t, line)
	return line
}

// ValidateLines validates every non-empty line of a JSONL stream (an
// events file) and returns the number of events.
func ValidateLines(t testing.TB, data []byte) int {
	t.Helper()
	s := RequireSchema(t)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	n := 0
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		n++
		report(t, line, s.Validate(line))
	}
	if err := sc.Err(); err != nil {
		t.Errorf("reading events: %v", err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("events stream does not end with a newline (a half-written line?)")
	}
	return n
}

// Recorder is an ocsf.Emitter (and ocsf.LineEmitter) for tests: it
// validates every event as it is emitted (reporting through t) and
// keeps the lines. Safe for
// concurrent use.
type Recorder struct {
	t      testing.TB
	schema *Schema
	mu     sync.Mutex
	lines  [][]byte
}

// NewRecorder returns a Recorder reporting to t. Call it from the test
// goroutine (it may skip the test when the definitions are missing).
func NewRecorder(t testing.TB) *Recorder {
	t.Helper()
	return &Recorder{t: t, schema: RequireSchema(t)}
}

// Emit implements ocsf.Emitter.
func (r *Recorder) Emit(ev ocsf.Event) error {
	line, err := ocsf.Marshal(ev)
	if err != nil {
		r.t.Errorf("ocsf.Marshal: %v", err)
		return err
	}
	report(r.t, line, r.schema.Validate(line))
	r.mu.Lock()
	r.lines = append(r.lines, line)
	r.mu.Unlock()
	return nil
}

// EmitLine implements ocsf.LineEmitter: the line (one JSON object and
// its newline) is validated and kept as Emit keeps a marshalled event.
func (r *Recorder) EmitLine(line []byte) error {
	body, ok := bytes.CutSuffix(line, []byte("\n"))
	if !ok || bytes.IndexByte(body, '\n') >= 0 {
		r.t.Errorf("EmitLine: %q is not one line ending in a newline", line)
		return errors.New("ocsftest: not one line")
	}
	body = bytes.Clone(body)
	report(r.t, body, r.schema.Validate(body))
	r.mu.Lock()
	r.lines = append(r.lines, body)
	r.mu.Unlock()
	return nil
}

// Lines returns the emitted lines in order.
func (r *Recorder) Lines() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.lines...)
}

// Events returns the emitted events decoded as generic JSON objects.
func (r *Recorder) Events() []map[string]any {
	var out []map[string]any
	for _, l := range r.Lines() {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			r.t.Errorf("decode recorded event: %v", err)
			continue
		}
		out = append(out, m)
	}
	return out
}

// ByClass returns the recorded events of one class_uid.
func (r *Recorder) ByClass(classUID int) []map[string]any {
	var out []map[string]any
	for _, m := range r.Events() {
		if n, ok := m["class_uid"].(float64); ok && int(n) == classUID {
			out = append(out, m)
		}
	}
	return out
}
