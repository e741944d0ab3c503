package proxy

import "sync/atomic"

// maxIdleWorkers bounds the goroutines kept waiting for work: enough for
// the connections of a busy package manager at once, few enough that a
// burst leaves little behind (an idle worker's stack shrinks at each GC).
const maxIdleWorkers = 32

// workers runs functions on goroutines that are kept, up to
// maxIdleWorkers, once their function returns, instead of a new
// goroutine each time. A connection's goroutine grows its stack several
// times while it is served (copying it each time) and a new one starts
// small again: on sequential connections from a sandbox the stack growth
// and the goroutine starts were about 8 µs of the proxy's CPU per
// connection (perf, BenchmarkSandboxConnectRate). A worker serves one
// function at a time, from start to end, as its own goroutine would: no
// state is carried from one function to the next. The zero value starts
// a goroutine for every function.
type workers struct {
	idle  chan func() // unbuffered: a send succeeds only into a waiting worker
	done  <-chan struct{}
	nIdle atomic.Int32
}

func newWorkers(done <-chan struct{}) *workers {
	return &workers{idle: make(chan func()), done: done}
}

// run runs fn on an idle worker, or on a new one when none is waiting.
// It never blocks.
func (w *workers) run(fn func()) {
	select {
	case w.idle <- fn:
	default:
		go w.serve(fn)
	}
}

// serve runs fn, then waits for more while at most maxIdleWorkers wait,
// until done is closed.
func (w *workers) serve(fn func()) {
	for {
		fn()
		if w.idle == nil || w.nIdle.Add(1) > maxIdleWorkers {
			w.nIdle.Add(-1)
			return
		}
		select {
		case fn = <-w.idle:
			w.nIdle.Add(-1)
		case <-w.done:
			w.nIdle.Add(-1)
			return
		}
	}
}
