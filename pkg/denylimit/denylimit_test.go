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

// A detailed limiter names the first denial of each distinct detail in
// full (up to maxDetail per window), and its count reports list the
// suppressed details with their counts; a burst of distinct details
// stays a bounded number of reports and no occurrence is lost.
func TestDetailed(t *testing.T) {
	l := NewDetailed[string, string, int](10*time.Second, 64, "overflow", 3)
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var reported []string
	for i, d := range []string{"GET /a", "GET /a", "DELETE /b", "PUT /c", "DELETE /b", "POST /d", "POST /d", "GET /a", "TRACE /e"} {
		if r := l.Admit("host", d, i, at(i), at(i)); r.Report {
			if r.Count != 1 {
				t.Fatalf("%s reported with count %d", d, r.Count)
			}
			reported = append(reported, d)
		}
	}
	if fmt.Sprint(reported) != "[GET /a DELETE /b PUT /c]" {
		t.Fatalf("named in full: %v, want the first of each of three details", reported)
	}
	// Suppressed: GET /a twice, DELETE /b, POST /d twice, TRACE /e (no room: counted only).
	r := l.Admit("host", "GET /a", 99, at(12), at(12))
	if !r.Report || r.Count != 7 || !r.First.Equal(at(1)) {
		t.Fatalf("report after the window: %+v", r)
	}
	if fmt.Sprint(r.Tallies) != "[{GET /a 3} {DELETE /b 1} {POST /d 2}]" {
		t.Fatalf("tallies %v", r.Tallies)
	}
	// A new window names afresh; Flush lists what it folded.
	if r := l.Admit("host", "DELETE /b", 1, at(13), at(13)); !r.Report || r.Count != 1 {
		t.Fatalf("a detail of the new window: %+v", r)
	}
	l.Admit("host", "DELETE /b", 2, at(14), at(14))
	f := l.Flush(at(30), false)
	if len(f) != 1 || f[0].Count != 1 || fmt.Sprint(f[0].Tallies) != "[{DELETE /b 1}]" {
		t.Fatalf("flush %+v", f)
	}
	// A burst of distinct details: bounded reports, every one counted.
	l = NewDetailed[string, string, int](10*time.Second, 64, "overflow", 16)
	reports, total := 0, 0
	for i := range 1500 {
		if r := l.Admit("sandbox", fmt.Sprint("name", i), i, t0, t0); r.Report {
			reports++
			total += r.Count
		}
	}
	for _, f := range l.Flush(t0, true) {
		reports++
		total += f.Count
		if len(f.Tallies) != 16 {
			t.Errorf("the count report lists %d details, want 16", len(f.Tallies))
		}
	}
	if reports != 17 || total != 1500 {
		t.Fatalf("%d reports counting %d denials, want 17 counting 1500", reports, total)
	}
}
