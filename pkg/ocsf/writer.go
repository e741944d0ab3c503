package ocsf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Emitter takes events. Producers (supervisor, proxy) depend on this
// interface only. Emit never panics; an error means the event was lost and
// the caller should count or log it, not stop confining.
type Emitter interface {
	Emit(Event) error
}

// EmitterFunc adapts a function to Emitter.
type EmitterFunc func(Event) error

// Emit implements Emitter.
func (f EmitterFunc) Emit(ev Event) error { return f(ev) }

// Discard is an Emitter that drops every event (after checking that it
// marshals, so a malformed event is still an error).
var Discard Emitter = discard{}

type discard struct{}

func (discard) Emit(ev Event) error {
	_, err := Marshal(ev)
	return err
}

// Nowhere is an Emitter that drops every event without looking at it: for
// callers whose events are switched off, where Discard's marshalling check
// would only cost time.
var Nowhere Emitter = nowhere{}

type nowhere struct{}

func (nowhere) Emit(Event) error { return nil }

// ErrClosed is returned by Emit after Close.
var ErrClosed = errors.New("ocsf: writer closed")

// Writer writes events as JSON Lines: one object per line, each line in a
// single Write call under a mutex. On a file opened by OpenFile (O_APPEND)
// lines from concurrent goroutines and from other processes appending to
// the same file never interleave. On a pipe the same holds for lines up to
// PIPE_BUF (4096 bytes). A Writer is safe for concurrent use.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	closer  io.Closer
	closed  bool
	lastErr error
	errs    atomic.Uint64
	written atomic.Uint64
}

// NewWriter returns a Writer on w. Close does not close w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// OpenFile opens path for appending events: created with mode 0600 if
// missing, O_APPEND so every line lands at the end even with several
// writers, O_NOFOLLOW so a symlink planted at path is refused, and it must
// be a regular file, FIFO or character device.
func OpenFile(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|openFlags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ocsf: open events file %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ocsf: stat events file %s: %w", path, err)
	}
	if m := fi.Mode(); !m.IsRegular() && m&(os.ModeNamedPipe|os.ModeCharDevice) == 0 {
		f.Close()
		return nil, fmt.Errorf("ocsf: events file %s is a %s, not a regular file", path, m.Type())
	}
	return &Writer{w: f, closer: f}, nil
}

// OpenDest opens an events destination given on the command line: "-" is
// stdout (not closed by Close), /dev/fd/N a descriptor the caller opened
// (OpenFD), anything else a file for OpenFile. An empty spec is an error;
// callers that make events optional use Discard.
func OpenDest(spec string, stdout io.Writer) (*Writer, error) {
	switch spec {
	case "":
		return nil, errors.New("ocsf: events destination is empty (use - for stdout, /dev/fd/N or a file path)")
	case "-":
		if stdout == nil {
			return nil, errors.New("ocsf: events destination - (stdout) but no stdout given")
		}
		return NewWriter(stdout), nil
	}
	if fd, ok := FDDest(spec); ok {
		return OpenFD(spec, fd)
	}
	return OpenFile(spec)
}

// FDDest reports whether spec names an inherited descriptor, /dev/fd/N
// or /proc/self/fd/N, and returns N.
func FDDest(spec string) (int, bool) {
	for _, prefix := range []string{"/dev/fd/", "/proc/self/fd/"} {
		rest, ok := strings.CutPrefix(spec, prefix)
		if !ok || rest == "" || len(rest) > 9 {
			continue
		}
		n := 0
		for _, c := range rest {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	return 0, false
}

// Emit marshals ev and writes it as one line. Errors (a malformed event, a
// failed write, a closed writer) are returned and counted, never panicked.
func (w *Writer) Emit(ev Event) error {
	bp := lineBufs.Get().(*[]byte)
	line, err := appendMarshal((*bp)[:0], ev)
	if err == nil {
		err = w.writeLine(append(line, '\n'))
	} else {
		w.fail(err)
	}
	if cap(line) <= maxPooledLine {
		*bp = line[:0]
		lineBufs.Put(bp)
	}
	return err
}

// LineEmitter is an Emitter that also takes lines its producer encoded
// itself: the egress proxy writes the summary event of a plain
// connection straight from its record (pkg/proxy, appendOpenEvent),
// byte for byte what Marshal writes for the event it would otherwise
// build (a test compares the two).
type LineEmitter interface {
	Emitter
	// EmitLine writes line, one JSON object and its final newline, in
	// one Write call. The caller may reuse line once it returns.
	EmitLine(line []byte) error
}

// EmitLine implements LineEmitter: line is written as Emit writes the
// line of an event, counted and refused the same way.
func (w *Writer) EmitLine(line []byte) error {
	if len(line) < 3 || line[0] != '{' || line[len(line)-1] != '\n' {
		return w.fail(errors.New("ocsf: event line is not a JSON object and a newline"))
	}
	return w.writeLine(line)
}

// lineBufs holds the buffers Emit encodes into: an event is encoded and
// written without allocating its line.
var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledLine bounds the buffers kept in lineBufs.
const maxPooledLine = 64 << 10

// WriteLine writes one already-encoded JSON object plus a newline in a
// single Write call. line must not contain a newline.
func (w *Writer) WriteLine(line []byte) error {
	buf := make([]byte, len(line)+1)
	copy(buf, line)
	buf[len(line)] = '\n'
	return w.writeLine(buf)
}

// writeLine writes buf, one JSON object and its final newline, in one
// Write call.
func (w *Writer) writeLine(buf []byte) error {
	if bytes.IndexByte(buf[:len(buf)-1], '\n') >= 0 {
		return w.fail(errors.New("ocsf: event line contains a newline"))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.failLocked(ErrClosed)
	}
	n, err := w.w.Write(buf)
	if err == nil && n != len(buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return w.failLocked(fmt.Errorf("ocsf: write event: %w", err))
	}
	w.written.Add(1)
	return nil
}

func (w *Writer) fail(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failLocked(err)
}

func (w *Writer) failLocked(err error) error {
	w.errs.Add(1)
	w.lastErr = err
	return err
}

// Errors is the number of events that could not be written.
func (w *Writer) Errors() uint64 { return w.errs.Load() }

// Written is the number of events written.
func (w *Writer) Written() uint64 { return w.written.Load() }

// Err returns the most recent error, or nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// Close closes the file OpenFile opened (not a writer given to NewWriter
// or stdout). Later Emits fail with ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.closer != nil {
		return w.closer.Close()
	}
	return nil
}
