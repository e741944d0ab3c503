package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/actionevent"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// TestZeroLossDrill is the acceptance drill of issue 5: 100,000 events are
// written while the reference hub is down for part of the run and the
// collector (the real binary) is SIGKILLed once mid-stream. After recovery
// the hub must hold exactly the 100,000 distinct event ids, none missing;
// the ledger stores each once. Redeliveries (at-least-once shipping) are
// counted and reported, not failed.
func TestZeroLossDrill(t *testing.T) {
	const (
		total   = 100000
		chunk   = 1000
		agentID = "agent-drill"
	)
	bin := testutil.Binary(t, "ocsf-collector")
	srv := hubtest.Start(t)
	dir := t.TempDir()
	tf, err := srv.TokenFile(dir, agentID)
	if err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(dir, "events.log")
	spool := filepath.Join(dir, "spool")

	startCollector := func(name string) *exec.Cmd {
		cmd := exec.Command(bin, "--input", events, "--hub", srv.URL, "--agent-id", agentID, "--token-file", tf,
			"--spool", spool, "--batch-size", "500", "--flush-interval", "50ms", "--poll-interval", "20ms",
			"--max-backoff", "300ms", "--log-format", "json", "--log-level", "warn")
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
			logf.Close()
		})
		return cmd
	}

	f, err := os.OpenFile(events, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 64<<10)
	want := make([]string, total)
	// ends[i] is the input's size after line i (for the filled lines
	// written so far): a checkpoint offset says how many lines the
	// collector had read (and spooled).
	ends := make([]int64, total)
	var size int64
	filled := 0
	linesRead := func(ckpt []byte) int {
		var ck struct {
			Files []struct {
				Offset int64 `json:"offset"`
			} `json:"files"`
		}
		if json.Unmarshal(ckpt, &ck) != nil || len(ck.Files) != 1 {
			return 0
		}
		return sort.Search(filled, func(i int) bool { return ends[i] > ck.Files[0].Offset })
	}
	// The phases follow the collector, not the writer: on a loaded host
	// the collector may not have delivered anything when 20,000 lines
	// are written, nor read anything at 50,000.
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 2 min, still not: %s (hub holds %d)", what, srv.Stats().Distinct)
			}
		}
	}

	first := startCollector("collector-1")
	var second *exec.Cmd
	var atKill hubtest.Stats
	var ckptAtKill []byte
	for written := 0; written < total; {
		for i := written; i < written+chunk; i++ {
			line := ocsfLine(i)
			want[i] = actionevent.ID(agentID, []byte(line))
			size += int64(len(line)) + 1
			ends[i] = size
			filled = i + 1
			w.WriteString(line)
			w.WriteByte('\n')
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		written += chunk
		switch written {
		case 20000:
			// The hub goes down once it has some of the events.
			waitUntil("the hub holds an event", func() bool { return srv.Stats().Distinct > 0 })
			if err := srv.SetDown(true); err != nil {
				t.Fatal(err)
			}
			t.Logf("hub down at %d written (hub holds %d)", written, srv.Stats().Distinct)
		case 50000:
			// Mid-stream, with the hub down: the spool holds what the
			// hub has not acknowledged, and the input checkpoint is past
			// it (only the spool has it now).
			waitUntil("the collector read lines the hub does not have", func() bool {
				b, _ := os.ReadFile(filepath.Join(spool, "checkpoints.json"))
				return linesRead(b) > srv.Stats().Distinct
			})
			ckptAtKill, _ = os.ReadFile(filepath.Join(spool, "checkpoints.json"))
			if err := first.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err := first.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("first collector did not die of SIGKILL: %v", err)
			}
			atKill = srv.Stats()
			t.Logf("collector SIGKILLed at %d written, %d read (hub holds %d)", written, linesRead(ckptAtKill), atKill.Distinct)
			second = startCollector("collector-2")
		case 70000:
			if err := srv.SetDown(false); err != nil {
				t.Fatal(err)
			}
			t.Logf("hub up at %d written (hub holds %d)", written, srv.Stats().Distinct)
		}
		time.Sleep(10 * time.Millisecond)
	}

	deadline := time.Now().Add(5 * time.Minute)
	for srv.Stats().Distinct < total && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	// Let any in-flight redelivery land, then stop gracefully.
	time.Sleep(300 * time.Millisecond)
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("collector after SIGTERM: %v (want exit 0)", err)
	}

	st := srv.Stats()
	missing := 0
	for _, id := range want {
		if srv.Deliveries(id) == 0 {
			missing++
		}
	}
	t.Logf("hub: %d distinct ids, %d deliveries, %d duplicate deliveries (absorbed by event_id idempotency), %d batches",
		st.Distinct, st.Received, st.Duplicates(), st.Batches)
	if missing > 0 {
		t.Errorf("%d of %d events never reached the hub", missing, total)
	}
	if st.Distinct != total {
		t.Errorf("hub holds %d distinct ids, want exactly %d", st.Distinct, total)
	}
	// The ledger stores each id once: its stored-id list has no repeats.
	seen := make(map[string]bool, total)
	for _, id := range srv.EventIDs() {
		if seen[id] {
			t.Fatalf("hub stored %s twice", id)
		}
		seen[id] = true
	}
	// The kill really was mid-stream: the first collector had read input
	// the hub did not have yet.
	if read := linesRead(ckptAtKill); atKill.Distinct == 0 || read <= atKill.Distinct {
		t.Errorf("hub held %d events at the kill, the collector's checkpoint was past %d lines (%s); the drill wants a kill mid-stream with undelivered events",
			atKill.Distinct, read, ckptAtKill)
	}
}
