package proxy

import (
	"sync"
	"testing"
	"time"
)

// waitIdle waits until n workers wait for work.
func waitIdle(t *testing.T, w *workers, n int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.nIdle.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers after 5s; want %d", w.nIdle.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A worker whose function returned takes the next one; no more than
// maxIdleWorkers wait; all of them leave when done is closed.
func TestWorkersReuseBoundAndStop(t *testing.T) {
	done := make(chan struct{})
	w := newWorkers(done)
	ran := make(chan int, 1)
	w.run(func() { ran <- 1 })
	<-ran
	waitIdle(t, w, 1)
	w.run(func() { ran <- 2 }) // taken by the idle worker
	if got := <-ran; got != 2 {
		t.Fatalf("ran %d", got)
	}
	waitIdle(t, w, 1)

	// Many at once: all run, and only maxIdleWorkers stay.
	const n = 3 * maxIdleWorkers
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Add(n)
	for range n {
		w.run(func() { defer wg.Done(); <-release })
	}
	close(release)
	wg.Wait()
	waitIdle(t, w, maxIdleWorkers)

	close(done)
	waitIdle(t, w, 0)
	// After done a function still runs (on a new goroutine).
	w.run(func() { ran <- 3 })
	if got := <-ran; got != 3 {
		t.Fatalf("ran %d", got)
	}
}
