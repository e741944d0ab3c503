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

// handoff gives fn to a waiting worker as run does, retrying until one
// waits.
func handoff(t *testing.T, w *workers, fn func()) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case w.idle <- fn:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no idle worker took the function in 5s")
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
	// Taken by the idle worker. It counts itself idle just before it
	// waits, so run's hand-off, which never blocks, could miss it and
	// start a second worker (a flake under load): hand it over as run
	// does, retried until the worker waits.
	handoff(t, w, func() { ran <- 2 })
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
