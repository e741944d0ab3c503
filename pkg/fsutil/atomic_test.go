package fsutil

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

func TestWriteFileAtomicModeAndContent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(p, []byte("new content"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "new content" {
		t.Fatalf("content = %q, %v", got, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", st.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temporary file left behind: %v", ents)
	}
}

func TestWriteFileAtomicFailureLeavesTarget(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing-dir", "f")
	if err := WriteFileAtomic(p, []byte("x"), 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// A concurrent reader never sees a partial file.
func TestWriteFileAtomicConcurrentReader(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	a := bytes.Repeat([]byte("a"), 256<<10)
	b := bytes.Repeat([]byte("b"), 256<<10)
	if err := WriteFileAtomic(p, a, 0o600); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var bad atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			got, err := os.ReadFile(p)
			if err != nil || !(bytes.Equal(got, a) || bytes.Equal(got, b)) {
				bad.Add(1)
			}
		}
	}()
	for i := 0; i < 50; i++ {
		data := a
		if i%2 == 0 {
			data = b
		}
		if err := WriteFileAtomic(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("reader saw %d partial or missing files", bad.Load())
	}
}

func TestReplaceFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "labels.json")
	if err := ReplaceFile(p, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceFile(p, []byte("b"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(got) != "b" || st.Mode().Perm() != 0o600 {
		t.Fatalf("content %q mode %v", got, st.Mode().Perm())
	}
}
