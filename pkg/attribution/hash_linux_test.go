//go:build linux

package attribution

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func writeRandom(t *testing.T, path string, size int) string {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestHashCacheHitsAndInvalidation(t *testing.T) {
	c, _ := NewHashCache(0, 0)
	path := filepath.Join(t.TempDir(), "bin")
	want := writeRandom(t, path, 100<<10)
	for i := 0; i < 3; i++ {
		got, err := c.Sum(context.Background(), path)
		if err != nil || got != want {
			t.Fatalf("sum %d: %s, %v; want %s", i, got, err, want)
		}
	}
	if s := c.Stats(); s.Hashed != 1 || s.Hits != 2 {
		t.Fatalf("after 3 sums of one file: %+v, want 1 hashed 2 hits", s)
	}
	// Rewrite in place, same size, and put the old mtime back: the ctime
	// still changes, so the cache must not serve the old sum.
	st, _ := os.Stat(path)
	time.Sleep(10 * time.Millisecond)
	b := make([]byte, 100<<10)
	rand.Read(b)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(b)
	f.Close()
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	got, err := c.Sum(context.Background(), path)
	if err != nil || got != hex.EncodeToString(h[:]) {
		t.Fatalf("after in-place rewrite with mtime reset: %s, %v; want the new sum", got, err)
	}
	if s := c.Stats(); s.Hashed != 2 {
		t.Errorf("rewritten file not rehashed: %+v", s)
	}
}

// Many concurrent first requests for one file read it once.
func TestHashCacheSingleflight(t *testing.T) {
	c, _ := NewHashCache(0, 0)
	path := filepath.Join(t.TempDir(), "big")
	want := writeRandom(t, path, 32<<20)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.Sum(context.Background(), path)
			if err == nil && got != want {
				err = fmt.Errorf("sum %s, want %s", got, want)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if s := c.Stats(); s.Hashed != 1 || s.Hits != 15 {
		t.Errorf("16 concurrent sums: %+v, want 1 hashed 15 hits", s)
	}
}

// A file being hashed does not hold up sums of other files, and a caller
// whose context ends stops waiting while the hash completes for others.
func TestHashCacheSlowFileBlocksNoOne(t *testing.T) {
	c, _ := NewHashCache(0, 0)
	dir := t.TempDir()
	slow, fast := filepath.Join(dir, "slow"), filepath.Join(dir, "fast")
	slowSum := writeRandom(t, slow, 4096)
	fastSum := writeRandom(t, fast, 4096)
	release := make(chan struct{})
	c.hashHook = func(p string) {
		if p == slow {
			<-release
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	slowDone := make(chan error, 1)
	go func() {
		_, err := c.Sum(ctx, slow)
		slowDone <- err
	}()
	fastCtx, fastCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer fastCancel()
	if got, err := c.Sum(fastCtx, fast); err != nil || got != fastSum {
		t.Fatalf("fast file while slow one hashes: %s, %v", got, err)
	}
	if err := <-slowDone; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow sum with expired context: %v, want DeadlineExceeded", err)
	}
	close(release)
	got, err := c.Sum(context.Background(), slow)
	if err != nil || got != slowSum {
		t.Fatalf("slow file after release: %s, %v", got, err)
	}
	if s := c.Stats(); s.Hashed != 2 {
		t.Errorf("%+v: the abandoned computation should have been reused (2 hashed)", s)
	}
}

func TestHashCacheErrors(t *testing.T) {
	c, _ := NewHashCache(0, 10)
	dir := t.TempDir()
	if _, err := c.Sum(context.Background(), dir); err == nil {
		t.Error("directory hashed")
	}
	big := filepath.Join(dir, "big")
	writeRandom(t, big, 11)
	if _, err := c.Sum(context.Background(), big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("11-byte file with a 10-byte limit: %v, want ErrTooLarge", err)
	}
	if _, err := c.Sum(context.Background(), filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if s := c.Stats(); s.Entries != 0 {
		t.Errorf("errors were cached: %+v", s)
	}
	if _, err := NewHashCache(-1, 0); err == nil {
		t.Error("negative maxEntries accepted")
	}
}

func TestHashCacheBounded(t *testing.T) {
	c, _ := NewHashCache(4, 0)
	dir := t.TempDir()
	for i := 0; i < 20; i++ {
		p := filepath.Join(dir, fmt.Sprint(i))
		want := writeRandom(t, p, 64)
		if got, err := c.Sum(context.Background(), p); err != nil || got != want {
			t.Fatalf("file %d: %s %v", i, got, err)
		}
	}
	if s := c.Stats(); s.Entries > 4 || s.Hashed != 20 {
		t.Errorf("%+v: want at most 4 entries and 20 hashed", s)
	}
}
