package collector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/actionevent"
	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
)

const agent = "agent-test"

// ocsfLine is a distinct OCSF HTTP Activity event for each i.
func ocsfLine(i int) string {
	return fmt.Sprintf(`{"class_uid":4002,"activity_id":3,"time":%d,"severity_id":1,"action_id":%d,"metadata":{"version":"1.8.0","uid":"sbx-test"},"actor":{"process":{"pid":%d,"name":"curl","file":{"path":"/usr/bin/curl"}}},"http_request":{"http_method":"GET","url":{"hostname":"pypi.org","port":443,"path":"/simple/p%d/"}},"dst_endpoint":{"hostname":"pypi.org","port":443}}`,
		1767225600000+i, 1+i%2, 100+i, i)
}

func idOf(t testing.TB, i int) string {
	t.Helper()
	return actionevent.ID(agent, []byte(ocsfLine(i)))
}

func appendLines(t testing.TB, path string, from, to int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	for i := from; i < to; i++ {
		w.WriteString(ocsfLine(i) + "\n")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

type env struct {
	t     *testing.T
	dir   string
	spool string
	srv   *hubtest.Server
	hc    *hub.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	srv := hubtest.Start(t)
	tf, err := srv.TokenFile(dir, agent)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := hub.New(hub.Config{URL: srv.URL, AgentID: agent, TokenFile: tf, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, dir: dir, spool: filepath.Join(dir, "spool"), srv: srv, hc: hc}
}

func (e *env) cfg(inputs ...string) Config {
	return Config{
		Inputs: inputs, SpoolDir: e.spool, AgentID: agent, Hub: e.hc,
		BatchSize: 100, FlushInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond,
		BaseBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, CloseInactive: 200 * time.Millisecond,
		Logger: testLogger(e.t),
	}
}

// testLogger logs to the test log (shown on failure).
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// start runs the collector in the background; stop cancels it and waits.
func start(t *testing.T, cfg Config) (stop func() (Summary, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		s   Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := Run(ctx, cfg)
		done <- result{s, err}
	}()
	var once sync.Once
	var res result
	stop = func() (Summary, error) {
		once.Do(func() {
			cancel()
			select {
			case res = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("collector did not stop within 30s of cancellation")
			}
		})
		return res.s, res.err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) assertExactly(from, to int) {
	e.t.Helper()
	st := e.srv.Stats()
	if st.Distinct != to-from {
		e.t.Errorf("hub holds %d distinct events, want %d", st.Distinct, to-from)
	}
	missing := 0
	for i := from; i < to; i++ {
		if e.srv.Deliveries(idOf(e.t, i)) == 0 {
			missing++
		}
	}
	if missing > 0 {
		e.t.Errorf("%d of events %d..%d never reached the hub", missing, from, to-1)
	}
}

func TestOnceToHubStdoutAndDeadLetters(t *testing.T) {
	e := newEnv(t)
	in := filepath.Join(e.dir, "events.log")
	appendLines(t, in, 0, 1000)
	f, _ := os.OpenFile(in, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("this is not json\n\n   \n{\"class_uid\":4001}\n[1,2,3]\n")
	f.Close()
	appendLines(t, in, 1000, 1010)

	var out bytes.Buffer
	cfg := e.cfg(in)
	cfg.Stdout = &out
	cfg.Once = true
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.assertExactly(0, 1010)
	if sum.Records != 1010 || sum.DeadLetters != 3 || sum.Shipped["hub"] != 1010 || sum.Pending != 0 {
		t.Errorf("summary %+v", sum)
	}
	if st := e.srv.Stats(); st.Received != 1010 {
		t.Errorf("hub received %d deliveries, want 1010 (no duplicates)", st.Received)
	}
	// stdout: one valid record per event, the same ids the hub holds.
	sc := bufio.NewScanner(&out)
	n := 0
	for sc.Scan() {
		r, err := actionevent.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("stdout line %d: %v", n, err)
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("stdout line %d: %v", n, err)
		}
		if e.srv.Deliveries(r.EventID) != 1 || r.AgentID != agent || r.SandboxID != "sbx-test" {
			t.Fatalf("stdout record %d not at the hub once: %+v", n, r)
		}
		n++
	}
	if n != 1010 {
		t.Errorf("stdout has %d records, want 1010", n)
	}
	// Dead letters: the three malformed lines, with their offsets.
	dls := readDeadLetters(t, e.spool)
	if len(dls) != 3 {
		t.Fatalf("dead letters %+v, want 3", dls)
	}
	wantErr := []string{"not a JSON object", "time: missing", "not a JSON object"}
	for i, d := range dls {
		if !strings.Contains(d.Error, wantErr[i]) || d.Source != in || d.Offset <= 0 {
			t.Errorf("dead letter %d: %+v", i, d)
		}
	}
	if dls[0].Line != "this is not json" {
		t.Errorf("dead letter keeps %q", dls[0].Line)
	}
	if fi, err := os.Stat(filepath.Join(e.spool, DeadLetterName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("dead-letter file mode: %v %v", fi.Mode(), err)
	}
}

func readDeadLetters(t *testing.T, dir string) []DeadLetter {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, DeadLetterName))
	if err != nil {
		t.Fatal(err)
	}
	var out []DeadLetter
	for _, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var d DeadLetter
		if err := json.Unmarshal(l, &d); err != nil {
			t.Fatalf("dead letter %q: %v", l, err)
		}
		out = append(out, d)
	}
	return out
}

func TestOverlongLineIsDeadLettered(t *testing.T) {
	e := newEnv(t)
	in := filepath.Join(e.dir, "events.log")
	appendLines(t, in, 0, 5)
	f, _ := os.OpenFile(in, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"class_uid":4001,"time":1,"message":"` + strings.Repeat("x", 300<<10) + "\"}\n")
	f.Close()
	appendLines(t, in, 5, 10)
	cfg := e.cfg(in)
	cfg.Once = true
	cfg.MaxLineBytes = 64 << 10
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.assertExactly(0, 10)
	dls := readDeadLetters(t, e.spool)
	if sum.DeadLetters != 1 || len(dls) != 1 || !strings.Contains(dls[0].Error, "longer than") || len(dls[0].Line) > 4096 {
		t.Errorf("summary %+v, dead letters %+v", sum, dls)
	}
}

func TestCheckpointsResume(t *testing.T) {
	e := newEnv(t)
	in := filepath.Join(e.dir, "events.log")
	appendLines(t, in, 0, 500)
	cfg := e.cfg(in)
	cfg.Once = true
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	appendLines(t, in, 500, 800)
	// A partial line (the writer is mid-write) is not consumed yet.
	f, _ := os.OpenFile(in, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(ocsfLine(800)[:40])
	f.Close()
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.LinesRead != 300 {
		t.Errorf("second run read %d lines, want the 300 new ones", sum.LinesRead)
	}
	e.assertExactly(0, 800)
	if st := e.srv.Stats(); st.Received != 800 {
		t.Errorf("hub received %d, want 800 (nothing re-read)", st.Received)
	}
	// The writer completes the line; the next run picks it up whole.
	f, _ = os.OpenFile(in, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(ocsfLine(800)[40:] + "\n")
	f.Close()
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	e.assertExactly(0, 801)
	if dls, err := os.ReadFile(filepath.Join(e.spool, DeadLetterName)); err == nil {
		t.Errorf("unexpected dead letters: %s", dls)
	}
}

func TestRotationRenameCreate(t *testing.T) {
	for _, c := range []struct{ name, glob string }{
		{"rotated name not matched", "events.log"},
		{"rotated name matched too", "events.log*"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			live := filepath.Join(e.dir, "events.log")
			stop := start(t, e.cfg(filepath.Join(e.dir, c.glob)))
			// The writer keeps its fd across the rename, as loggers do
			// until they reopen.
			w, err := os.OpenFile(live, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 300; i++ {
				w.WriteString(ocsfLine(i) + "\n")
			}
			waitFor(t, "first 300 events at the hub", 20*time.Second, func() bool { return e.srv.Stats().Distinct == 300 })
			if err := os.Rename(live, live+".1"); err != nil {
				t.Fatal(err)
			}
			for i := 300; i < 400; i++ { // late writes to the renamed file
				w.WriteString(ocsfLine(i) + "\n")
			}
			w.Close()
			appendLines(t, live, 400, 600) // the new file
			waitFor(t, "all 600 events at the hub", 20*time.Second, func() bool { return e.srv.Stats().Distinct == 600 })
			sum, err := stop()
			if err != nil {
				t.Fatal(err)
			}
			e.assertExactly(0, 600)
			if st := e.srv.Stats(); st.Received != 600 {
				t.Errorf("hub received %d deliveries, want 600: a rotated file was read twice", st.Received)
			}
			if sum.LinesRead != 600 {
				t.Errorf("read %d lines, want 600", sum.LinesRead)
			}
		})
	}
}

func TestRotationCopyTruncate(t *testing.T) {
	e := newEnv(t)
	live := filepath.Join(e.dir, "events.log")
	cfg := e.cfg(live)
	m := NewMetrics()
	cfg.Metrics = m
	stop := start(t, cfg)
	appendLines(t, live, 0, 300)
	waitFor(t, "first 300 events", 20*time.Second, func() bool { return e.srv.Stats().Distinct == 300 })
	// copytruncate: copy the content aside, truncate in place.
	data, _ := os.ReadFile(live)
	os.WriteFile(live+".1", data, 0o644)
	if err := os.Truncate(live, 0); err != nil {
		t.Fatal(err)
	}
	appendLines(t, live, 300, 350)
	waitFor(t, "events written after the truncation", 20*time.Second, func() bool { return e.srv.Stats().Distinct == 350 })
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	e.assertExactly(0, 350)
	if st := e.srv.Stats(); st.Received != 350 {
		t.Errorf("hub received %d deliveries, want 350", st.Received)
	}
	if m.RotationsTruncate.Load() != 1 {
		t.Errorf("truncations seen: %d, want 1", m.RotationsTruncate.Load())
	}
}

// Truncated and rewritten past the old offset between two looks: only
// the first-line fingerprint can tell.
func TestFollowerDetectsRewriteByFingerprint(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "events.log")
	appendLines(t, live, 0, 10)
	fo, err := newFollower([]string{live}, dir, time.Second, 1<<20, slog.New(slog.DiscardHandler), NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	defer fo.close()
	var got []string
	sink := &collectSink{lines: &got}
	now := time.Now()
	fo.scan(now)
	fo.read(1<<20, sink, now)
	if len(got) != 10 {
		t.Fatalf("read %d lines, want 10", len(got))
	}
	// Rewrite in place with more data than before (same inode).
	f, _ := os.OpenFile(live, os.O_WRONLY|os.O_TRUNC, 0)
	for i := 100; i < 130; i++ {
		f.WriteString(ocsfLine(i) + "\n")
	}
	f.Close()
	got = got[:0]
	fo.scan(now)
	fo.read(1<<20, sink, now)
	if len(got) != 30 || got[0] != ocsfLine(100) {
		t.Fatalf("after rewrite read %d lines (first %.40q), want the 30 new ones from the start", len(got), first(got))
	}
	if fo.m.RotationsTruncate.Load() != 1 {
		t.Errorf("rewrite not counted as a truncation")
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

type collectSink struct{ lines *[]string }

func (c *collectSink) line(_ string, _ int64, l []byte) { *c.lines = append(*c.lines, string(l)) }
func (c *collectSink) overlong(string, int64, []byte)   {}

// A file rotated away while the collector was stopped is found beside its
// old name through its checkpointed identity and drained.
func TestRotatedWhileStopped(t *testing.T) {
	e := newEnv(t)
	live := filepath.Join(e.dir, "events.log")
	appendLines(t, live, 0, 100)
	cfg := e.cfg(live)
	cfg.Once = true
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	appendLines(t, live, 100, 150)
	os.Rename(live, live+".1")
	appendLines(t, live, 150, 180)
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	e.assertExactly(0, 180)
	if st := e.srv.Stats(); st.Received != 180 {
		t.Errorf("hub received %d deliveries, want 180", st.Received)
	}
}

func TestStdin(t *testing.T) {
	e := newEnv(t)
	var in strings.Builder
	for i := 0; i < 100; i++ {
		in.WriteString(ocsfLine(i) + "\n")
	}
	in.WriteString(ocsfLine(100)) // last line without a newline
	var out bytes.Buffer
	cfg := e.cfg("-")
	cfg.Stdin = strings.NewReader(in.String())
	cfg.Stdout = &out
	done := make(chan struct{})
	var sum Summary
	var err error
	go func() { sum, err = Run(context.Background(), cfg); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("stdin mode did not exit after EOF")
	}
	if err != nil {
		t.Fatal(err)
	}
	e.assertExactly(0, 101)
	if n := bytes.Count(out.Bytes(), []byte("\n")); n != 101 || sum.Records != 101 {
		t.Errorf("stdout %d lines, summary %+v", n, sum)
	}
	if _, err := os.Stat(filepath.Join(e.spool, checkpointName)); err == nil {
		t.Error("stdin mode wrote checkpoints")
	}
}

func TestStdoutOnlyNeedsNoHub(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	sum, err := Run(context.Background(), Config{
		Inputs: []string{"-"}, Stdin: strings.NewReader(ocsfLine(1) + "\nnope\n"), Stdout: &out,
		SpoolDir: filepath.Join(dir, "spool"),
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := actionevent.Parse(bytes.TrimSpace(out.Bytes()))
	if err != nil || r.EventID != actionevent.ID("", []byte(ocsfLine(1))) || sum.DeadLetters != 1 {
		t.Errorf("stdout %q, err %v, summary %+v", out.String(), err, sum)
	}
	if _, err := os.Stat(filepath.Join(dir, "spool", "lock")); err == nil {
		t.Error("stdout-only stdin run took the spool lock")
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	e := newEnv(t)
	in := filepath.Join(e.dir, "events.log")
	appendLines(t, in, 0, 20)
	e.srv.Fail(hubtest.Failure{Route: hubtest.RouteActionEvents, Code: 429, RetryAfter: "1", Count: 1})
	cfg := e.cfg(in)
	cfg.Once = true
	m := NewMetrics()
	cfg.Metrics = m
	begin := time.Now()
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(begin)
	e.assertExactly(0, 20)
	reqs := e.srv.Requests()
	if len(reqs) < 2 || reqs[0].Status != 429 || reqs[1].Status != 200 {
		t.Fatalf("requests %+v", reqs)
	}
	if gap := reqs[1].Time.Sub(reqs[0].Time); gap < 950*time.Millisecond {
		t.Errorf("retried after %v, Retry-After asked for 1s (backoff alone is ~10ms)", gap)
	}
	if elapsed > 5*time.Second {
		t.Errorf("took %v; Retry-After 1s should not cost more than a few seconds", elapsed)
	}
	if m.Sink("hub").Retries.Load() != 1 {
		t.Errorf("retries %d, want 1", m.Sink("hub").Retries.Load())
	}
}

func TestHubDownThenUp(t *testing.T) {
	e := newEnv(t)
	in := filepath.Join(e.dir, "events.log")
	if err := e.srv.SetDown(true); err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg(in)
	m := NewMetrics()
	cfg.Metrics = m
	stop := start(t, cfg)
	appendLines(t, in, 0, 400)
	waitFor(t, "events spooled", 10*time.Second, func() bool { return m.Records.Load() == 400 })
	waitFor(t, "some failed deliveries", 10*time.Second, func() bool { return m.Sink("hub").Retries.Load() >= 2 })
	if m.SpoolBytes() == 0 {
		t.Error("spool empty while the hub is down")
	}
	if err := e.srv.SetDown(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "delivery after the hub came back", 10*time.Second, func() bool { return e.srv.Stats().Distinct == 400 })
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	e.assertExactly(0, 400)
	if m.SpoolBytes() != 0 {
		t.Errorf("spool still holds %d bytes", m.SpoolBytes())
	}
}

// A record the hub refuses is isolated by splitting the batch and set aside;
// the rest of the batch is delivered.
func TestRefusedRecordIsolated(t *testing.T) {
	e := newEnv(t)
	// Pre-seed the spool with 9 good records and one the hub refuses
	// (another layer), as a damaged spool would hold.
	os.MkdirAll(e.spool, 0o700)
	var seg bytes.Buffer
	for i := 0; i < 10; i++ {
		r, _ := actionevent.FromOCSF([]byte(ocsfLine(i)), agent)
		if i == 6 {
			r.Layer = "host"
		}
		seg.Write(r.AppendJSON(nil))
		seg.WriteByte('\n')
	}
	os.WriteFile(filepath.Join(e.spool, segName(1)), seg.Bytes(), 0o600)
	cfg := e.cfg("-")
	cfg.Stdin = strings.NewReader("")
	m := NewMetrics()
	cfg.Metrics = m
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if st := e.srv.Stats(); st.Distinct != 9 || e.srv.Deliveries(idOf(t, 6)) != 0 {
		t.Errorf("hub holds %d, want the 9 valid records", st.Distinct)
	}
	dls := readDeadLetters(t, e.spool)
	if len(dls) != 1 || dls[0].Source != "sink:hub" || !strings.Contains(dls[0].Error, "422") || !strings.Contains(dls[0].Line, idOf(t, 6)) {
		t.Errorf("dead letters %+v", dls)
	}
	if m.Sink("hub").Rejected.Load() != 1 {
		t.Errorf("rejected %d", m.Sink("hub").Rejected.Load())
	}
}

func TestBackpressure(t *testing.T) {
	e := newEnv(t)
	in := filepath.Join(e.dir, "events.log")
	appendLines(t, in, 0, 2000)
	e.srv.SetDown(true)
	cfg := e.cfg(in)
	cfg.SpoolMaxBytes = 64 << 10 // about 150 records
	m := NewMetrics()
	cfg.Metrics = m
	stop := start(t, cfg)
	time.Sleep(500 * time.Millisecond)
	if n := m.LinesRead.Load(); n >= 2000 {
		t.Errorf("read all %d lines while the hub was down and the spool full", n)
	}
	e.srv.SetDown(false)
	waitFor(t, "all events after the hub came back", 20*time.Second, func() bool { return e.srv.Stats().Distinct == 2000 })
	stop()
	e.assertExactly(0, 2000)
}

func TestSpoolRepairAndSegments(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpool(dir, []string{"a", "b"}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(i int) []byte { return []byte(fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("p", 100))) }
	for i := 0; i < 50; i++ {
		sp.Append(rec(i))
		if i%5 == 4 {
			if err := sp.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(sp.order) < 4 {
		t.Fatalf("only %d segments for 50 records of 1 KiB segments", len(sp.order))
	}
	// Sink a reads everything; b reads nothing yet.
	ra := sp.reader("a")
	var got [][]byte
	for {
		recs, err := ra.Next(7, 300)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		got = append(got, recs...)
	}
	if len(got) != 50 || !bytes.Equal(got[49], rec(49)) {
		t.Fatalf("reader a got %d records", len(got))
	}
	sp.Ack("a", ra.Pos())
	if err := sp.Persist("a"); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "seg-*"))
	if len(segs) != len(sp.order) || len(segs) < 4 {
		t.Errorf("segments deleted while sink b has not read them: %d files", len(segs))
	}
	rb := sp.reader("b")
	recs, _ := rb.Next(1000, 1<<20)
	for len(recs) < 50 {
		more, _ := rb.Next(1000, 1<<20)
		if len(more) == 0 {
			break
		}
		recs = append(recs, more...)
	}
	sp.Ack("b", rb.Pos())
	sp.Persist("b")
	segs, _ = filepath.Glob(filepath.Join(dir, "seg-*"))
	if len(recs) != 50 || len(segs) != 1 {
		t.Errorf("after both sinks: %d records read by b, %d segment files left (want 1, the active one)", len(recs), len(segs))
	}
	// A torn write (crash mid-record) is cut off at reopen.
	sp.Append(rec(50))
	sp.Commit()
	sp.Close()
	segs, _ = filepath.Glob(filepath.Join(dir, "seg-*"))
	active := segs[len(segs)-1]
	f, _ := os.OpenFile(active, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"n":51,"pa`)
	f.Close()
	sp2, err := openSpool(dir, []string{"a", "b"}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.Close()
	r2 := sp2.reader("a")
	recs, err = r2.Next(10, 1<<20)
	for len(recs) == 0 && err == nil {
		recs, err = r2.Next(10, 1<<20) // skip past an empty sealed segment
		if len(recs) == 0 {
			break
		}
	}
	if err != nil || len(recs) != 1 || !bytes.Equal(recs[0], rec(50)) {
		t.Errorf("after repair: %q %v", recs, err)
	}
	data, _ := os.ReadFile(active)
	if !bytes.HasSuffix(data, []byte("}\n")) {
		t.Errorf("torn tail not removed: %q", data[max(0, len(data)-20):])
	}
}

func TestMetricsText(t *testing.T) {
	m := NewMetrics()
	m.LinesRead.Add(7)
	m.DeadLetters.Add(2)
	m.Sink("hub").Shipped.Add(5)
	m.Sink("hub").Retries.Add(3)
	m.setSpoolGauge(func() int64 { return 42 })
	var b bytes.Buffer
	m.WriteText(&b)
	for _, want := range []string{
		"ocsf_collector_lines_read_total 7\n",
		"ocsf_collector_dead_letters_total 2\n",
		`ocsf_collector_records_shipped_total{sink="hub"} 5` + "\n",
		`ocsf_collector_ship_retries_total{sink="hub"} 3` + "\n",
		"ocsf_collector_spool_bytes 42\n",
		"# TYPE ocsf_collector_spool_bytes gauge\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
}

func TestConfigValidate(t *testing.T) {
	e := newEnv(t)
	good := e.cfg("x.log")
	cases := []struct {
		mut  func(c *Config)
		want string
	}{
		{func(c *Config) { c.Inputs = nil }, "inputs"},
		{func(c *Config) { c.Inputs = []string{"a[.log"} }, "inputs"},
		{func(c *Config) { c.Inputs = []string{"-", "-"}; c.Stdin = strings.NewReader("") }, "more than once"},
		{func(c *Config) { c.Inputs = []string{"-"} }, "stdin"},
		{func(c *Config) { c.SpoolDir = "" }, "spool"},
		{func(c *Config) { c.Hub = nil }, "destination"},
		{func(c *Config) { c.AgentID = "other" }, "agent id"},
		{func(c *Config) { c.OTLPEndpoint = "ftp://x" }, "otlp"},
	}
	for _, c := range cases {
		cfg := good
		c.mut(&cfg)
		_, err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), c.want) {
			t.Errorf("want error about %q, have %v", c.want, err)
		}
	}
}

func TestSpoolLock(t *testing.T) {
	e := newEnv(t)
	in := filepath.Join(e.dir, "events.log")
	appendLines(t, in, 0, 1)
	stop := start(t, e.cfg(in))
	waitFor(t, "first collector running", 10*time.Second, func() bool { return e.srv.Stats().Distinct == 1 })
	cfg := e.cfg(in)
	cfg.Once = true
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second collector on the same spool: %v", err)
	}
	stop()
}
