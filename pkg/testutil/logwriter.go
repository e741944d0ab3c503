package testutil

import (
	"bytes"
	"io"
	"sync"
	"testing"
)

// LogWriter returns a writer for a child process's stderr (or stdout)
// that passes each line to t.Log, prefixed with name: go test shows it
// when the test fails (or with -v), attributed to the test, instead of
// on the test binary's own stderr, where a supervisor's or proxy's WARN
// lines read like failures and, when tests run in parallel, cannot be
// told apart. Lines written after the test has ended are dropped (t.Log
// would panic), as is an unfinished last line then.
func LogWriter(t testing.TB, name string) io.Writer {
	w := &logWriter{t: t, name: name}
	t.Cleanup(w.close)
	return w
}

type logWriter struct {
	mu      sync.Mutex
	t       testing.TB
	name    string
	partial []byte
	done    bool
}

// maxLine bounds an unfinished line held back (a child writing without
// newlines): past it, the line is logged as it is.
const maxLine = 64 << 10

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			if len(w.partial) > maxLine {
				w.t.Logf("%s: %s", w.name, w.partial)
				w.partial = w.partial[:0]
			}
			return len(p), nil
		}
		w.t.Logf("%s: %s", w.name, w.partial[:i])
		w.partial = w.partial[i+1:]
	}
}

func (w *logWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.t.Logf("%s: %s", w.name, w.partial)
	}
	w.done = true
}
