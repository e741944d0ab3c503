package fsutil

import (
	"os"
	"sync/atomic"
)

// Sync fsyncs f. Every fsync a durability promise rests on goes through
// Sync (and every rename that publishes a file through rename), so that a
// test can record their order with TraceForTest: a SIGKILL drill keeps the
// page cache and so cannot see a missing fsync, but the recording can.
func Sync(f *os.File) error {
	record(OpSync, f.Name())
	return f.Sync()
}

func rename(oldpath, newpath string) error {
	record(OpRename, newpath)
	return os.Rename(oldpath, newpath)
}

// Operations TraceForTest reports.
const (
	OpSync   = "fsync"  // path is the file or directory fsynced
	OpRename = "rename" // path is the rename's target
)

var tracer atomic.Pointer[func(op, path string)]

func record(op, path string) {
	if fn := tracer.Load(); fn != nil {
		(*fn)(op, path)
	}
}

// TraceForTest makes every Sync and publishing rename call fn(op, path)
// first, until the returned function is called. fn may be called from
// several goroutines at once. It is for tests only; nil fn stops tracing.
func TraceForTest(fn func(op, path string)) (stop func()) {
	if fn == nil {
		tracer.Store(nil)
		return func() {}
	}
	tracer.Store(&fn)
	return func() { tracer.Store(nil) }
}
