package collector

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// The spool segment and the dead-letter file are fsynced before the input
// checkpoint that moves past their lines is published (renamed into
// place). A SIGKILL drill cannot see a missing fsync (the page cache
// survives the process), so this test records the calls: removing the
// fsync from spool.Commit or deadLetters.commit fails it.
func TestSpoolAndDeadLettersSyncedBeforeCheckpoint(t *testing.T) {
	e := newEnv(t)
	in := filepath.Join(e.dir, "events.log")
	appendLines(t, in, 0, 50)
	f, err := os.OpenFile(in, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("not json\n")
	f.Close()

	var (
		mu  sync.Mutex
		ops []string
	)
	defer fsutil.TraceForTest(func(op, path string) {
		mu.Lock()
		ops = append(ops, op+" "+path)
		mu.Unlock()
	})()
	cfg := e.cfg(in)
	cfg.Once = true
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := slices.Clone(ops)
	mu.Unlock()

	ck := slices.Index(got, fsutil.OpRename+" "+filepath.Join(e.spool, checkpointName))
	if ck < 0 {
		t.Fatalf("no checkpoint was published; operations: %q", got)
	}
	before := got[:ck]
	segSynced := slices.ContainsFunc(before, func(s string) bool {
		p, ok := strings.CutPrefix(s, fsutil.OpSync+" ")
		base := filepath.Base(p)
		return ok && strings.HasPrefix(base, segPrefix) && strings.HasSuffix(base, segSuffix)
	})
	if !segSynced {
		t.Errorf("the checkpoint was published before any spool segment was fsynced: %q", got)
	}
	if !slices.Contains(before, fsutil.OpSync+" "+filepath.Join(e.spool, DeadLetterName)) {
		t.Errorf("the checkpoint was published before the dead-letter file was fsynced: %q", got)
	}
}
