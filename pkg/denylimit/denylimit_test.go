package denylimit

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestFoldsRepeats(t *testing.T) {
	l := New[string, int](10*time.Second, 64, "overflow")
	t0 := time.Unix(1000, 0)
	if c, _, ok := l.Admit("a", 1, t0, t0); !ok || c != 1 {
		t.Fatalf("first: %d %v", c, ok)
	}
	for i := 2; i <= 5; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		if _, _, ok := l.Admit("a", i, at, at); ok {
			t.Fatalf("repeat %d reported within the window", i)
		}
	}
	// The next one after the window carries the four suppressed ones.
	at := t0.Add(11 * time.Second)
	c, first, ok := l.Admit("a", 6, at, at)
	if !ok || c != 5 || !first.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("after the window: count %d first %v ok %v", c, first, ok)
	}
	// Suppressed with no later denial: Flush reports them once due.
	l.Admit("a", 7, at.Add(time.Second), at.Add(time.Second))
	if f := l.Flush(at.Add(5*time.Second), false); len(f) != 0 {
		t.Fatalf("flushed before the window: %v", f)
	}
	f := l.Flush(at.Add(10*time.Second), false)
	if len(f) != 1 || f[0].Value != 7 || f[0].Count != 1 {
		t.Fatalf("flush %+v", f)
	}
	// Idle keys are forgotten after two windows: the next one is new.
	l.Flush(at.Add(40*time.Second), false)
	if c, _, ok := l.Admit("a", 8, at.Add(41*time.Second), at.Add(41*time.Second)); !ok || c != 1 {
		t.Fatalf("after idling: %d %v", c, ok)
	}
}

func TestBoundedKeys(t *testing.T) {
	l := New[string, int](10*time.Second, 32, "overflow")
	now := time.Unix(1000, 0)
	reported, total := 0, 0
	for i := range 10000 {
		if c, _, ok := l.Admit(fmt.Sprint("k", i), i, now, now); ok {
			reported++
			total += c
		}
	}
	for _, f := range l.Flush(now, true) {
		reported++
		total += f.Count
	}
	if total != 10000 {
		t.Fatalf("counts add up to %d, want 10000", total)
	}
	if reported > 32+2*shards {
		t.Fatalf("%d reports for 10000 distinct keys with 32 keys", reported)
	}
}

func TestNoWindowReportsAll(t *testing.T) {
	l := New[string, int](0, 8, "o")
	now := time.Now()
	for range 3 {
		if c, _, ok := l.Admit("a", 1, now, now); !ok || c != 1 {
			t.Fatal("a denial was folded with window 0")
		}
	}
}

func TestConcurrent(t *testing.T) {
	l := New[int, int](time.Hour, 1024, -1)
	now := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := range 1000 {
				if c, _, ok := l.Admit(i%50, g, now, now); ok {
					n += c
				}
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, f := range l.Flush(now, true) {
		total += f.Count
	}
	if total != 8000 {
		t.Fatalf("counts add up to %d, want 8000", total)
	}
}
