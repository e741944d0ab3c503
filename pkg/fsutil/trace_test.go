package fsutil

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// opLog records Sync and rename calls through TraceForTest.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func traceOps(t *testing.T) *opLog {
	l := &opLog{}
	t.Cleanup(TraceForTest(func(op, path string) {
		l.mu.Lock()
		l.ops = append(l.ops, op+" "+path)
		l.mu.Unlock()
	}))
	return l
}

func (l *opLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// WriteFileAtomic fsyncs the temporary file before the rename publishes
// it, and the directory after: removing either fsync fails this test,
// which a crash drill (the page cache survives SIGKILL) could not show.
func TestWriteFileAtomicSyncsBeforeAndAfterRename(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pin.json")
	ops := traceOps(t)
	if err := WriteFileAtomic(p, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := ops.get()
	if len(got) != 3 {
		t.Fatalf("operations %q, want fsync of the temporary file, rename, fsync of the directory", got)
	}
	tmp, ok := strings.CutPrefix(got[0], OpSync+" ")
	if !ok || filepath.Dir(tmp) != dir || tmp == p {
		t.Errorf("first operation %q, want an fsync of the temporary file in %s", got[0], dir)
	}
	if got[1] != OpRename+" "+p {
		t.Errorf("second operation %q, want the rename onto %s", got[1], p)
	}
	if got[2] != OpSync+" "+dir {
		t.Errorf("third operation %q, want an fsync of %s", got[2], dir)
	}
}

// ReplaceFile promises no durability: it renames without fsyncs.
func TestReplaceFileDoesNotSync(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state")
	ops := traceOps(t)
	if err := ReplaceFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ops.get(); !slices.Equal(got, []string{OpRename + " " + p}) {
		t.Fatalf("operations %q, want only the rename", got)
	}
}
