//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/state"
)

// exec --expect-id reads the labels and reaches the exec socket through
// the state directory it opened: a directory that took the name since
// (delete, then run --name) is never the one read or dialled, and a
// removed one has nothing left to read.
func TestBoundLabelsStayWithTheOpenedDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "sbx")
	write := func(d, id string) {
		t.Helper()
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, state.LabelsFile), []byte(`{"name":"sbx","id":"`+id+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, ExecSocketFile), []byte(id), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(dir, "old")
	held, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// The name passes to another sandbox: the old directory moved away
	// (as if in the middle of its removal), a new one in its place.
	if err := os.Rename(dir, filepath.Join(root, "gone")); err != nil {
		t.Fatal(err)
	}
	write(dir, "new")
	via, l, err := boundLabels(held, "sbx")
	if err != nil {
		t.Fatal(err)
	}
	if l.ID != "old" {
		t.Errorf("labels read through the held directory carry id %q, want the opened sandbox's (old)", l.ID)
	}
	if b, err := os.ReadFile(filepath.Join(via, ExecSocketFile)); err != nil || string(b) != "old" {
		t.Errorf("the exec socket path through %s reaches %q (%v), want the opened sandbox's", via, b, err)
	}
	// Removed: nothing to read, so nothing runs.
	if err := os.RemoveAll(filepath.Join(root, "gone")); err != nil {
		t.Fatal(err)
	}
	if _, l, err := boundLabels(held, "sbx"); err == nil {
		t.Errorf("labels of a removed state directory read as %+v", l)
	}
}
