package collector

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/actionevent"
	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// DeadLetterName is the dead-letter file in the spool directory: one JSON
// object per line for each input line that could not be normalised and
// each record a sink refused permanently.
const DeadLetterName = "dead-letter.jsonl"

// maxDeadLetterExcerpt bounds the copy of the offending line.
const maxDeadLetterExcerpt = 16 << 10

// DeadLetter is one entry of the dead-letter file.
type DeadLetter struct {
	Time   time.Time `json:"time"`
	Source string    `json:"source"`              // input path, "-" for stdin, or "sink:<name>"
	Offset int64     `json:"offset"`              // byte offset of the line in the input (-1 for sink refusals)
	Error  string    `json:"error"`               // why it was set aside
	Line   string    `json:"line"`                // the line or record, URL secrets scrubbed, at most 16 KiB
	Cut    bool      `json:"truncated,omitempty"` // Line was cut
}

// deadLetters appends entries to the dead-letter file; writes are made
// durable by commit. Without a path (no spool: stdout only) they are
// counted and dropped. Safe for concurrent use.
type deadLetters struct {
	path string
	m    *Metrics

	mu  sync.Mutex
	f   *os.File
	buf []byte
}

func (d *deadLetters) add(source string, off int64, reason string, line []byte) {
	d.m.DeadLetters.Add(1)
	e := DeadLetter{Time: time.Now().UTC(), Source: source, Offset: off, Error: reason}
	if len(line) > maxDeadLetterExcerpt {
		line, e.Cut = line[:maxDeadLetterExcerpt], true
	}
	e.Line = actionevent.ScrubText(strings.ToValidUTF8(string(line), "\ufffd"))
	b, _ := json.Marshal(e)
	d.mu.Lock()
	d.buf = append(d.buf, b...)
	d.buf = append(d.buf, '\n')
	d.mu.Unlock()
}

// commit appends the buffered entries and fsyncs the file.
func (d *deadLetters) commit() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.buf) == 0 {
		return nil
	}
	if d.path == "" {
		d.buf = d.buf[:0]
		return nil
	}
	if d.f == nil {
		if err := os.MkdirAll(filepath.Dir(d.path), 0o700); err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		f, err := os.OpenFile(d.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		d.f = f
	}
	if _, err := d.f.Write(d.buf); err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	if err := fsutil.Sync(d.f); err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	d.buf = d.buf[:0]
	return nil
}

func (d *deadLetters) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
}

// ingester normalises lines and hands the records to the spool and to
// stdout. It is used by one goroutine.
type ingester struct {
	agentID string
	spool   *spool        // nil without spool-backed sinks
	stdout  *bufio.Writer // nil without --stdout
	dl      *deadLetters
	m       *Metrics
	maxLine int
	scratch []byte
	dirty   bool
}

func (in *ingester) line(source string, off int64, line []byte) {
	in.m.LinesRead.Add(1)
	in.m.BytesRead.Add(int64(len(line)) + 1)
	in.dirty = true
	rec, err := actionevent.FromOCSF(line, in.agentID)
	if err != nil {
		if errors.Is(err, actionevent.ErrEmpty) {
			return
		}
		in.dl.add(source, off, err.Error(), line)
		return
	}
	in.m.Records.Add(1)
	in.scratch = rec.AppendJSON(in.scratch[:0])
	if in.spool != nil {
		in.spool.Append(in.scratch)
	}
	if in.stdout != nil {
		in.scratch = append(in.scratch, '\n')
		in.stdout.Write(in.scratch)
	}
}

func (in *ingester) overlong(source string, off int64, head []byte) {
	in.dirty = true
	in.dl.add(source, off, fmt.Sprintf("line longer than %d bytes", in.maxLine), head)
}

// commit makes everything handled so far durable: stdout flushed, records
// fsynced in the spool, dead letters fsynced. Only then may input
// checkpoints advance.
func (in *ingester) commit() error {
	if !in.dirty {
		return nil
	}
	if in.stdout != nil {
		if err := in.stdout.Flush(); err != nil {
			return fmt.Errorf("stdout: %w", err)
		}
	}
	if in.spool != nil {
		if err := in.spool.Commit(); err != nil {
			return err
		}
	}
	if err := in.dl.commit(); err != nil {
		return err
	}
	in.m.Commits.Add(1)
	in.dirty = false
	return nil
}

// stdinReader splits a stream into lines across reads. The last line may
// lack its newline; it is handled at EOF.
type stdinReader struct {
	ch      chan []byte
	carry   []byte
	off     int64 // stream offset of carry[0]
	skip    bool
	done    bool
	maxLine int
}

const stdinSource = "-"

func startStdin(r io.Reader, maxLine int) *stdinReader {
	s := &stdinReader{ch: make(chan []byte, 16), maxLine: maxLine}
	go func() {
		defer close(s.ch)
		for {
			b := make([]byte, 256<<10)
			n, err := r.Read(b)
			if n > 0 {
				s.ch <- b[:n]
			}
			if err != nil {
				return // EOF or a read error both end the stream
			}
		}
	}()
	return s
}

// feed handles one chunk (or EOF when ok is false).
func (s *stdinReader) feed(chunk []byte, ok bool, sink lineSink) {
	if !ok {
		s.done = true
		if len(s.carry) > 0 && !s.skip {
			sink.line(stdinSource, s.off, s.carry)
		}
		s.carry = nil
		return
	}
	data := chunk
	if len(s.carry) > 0 {
		data = append(s.carry, chunk...)
	}
	pos := 0
	for {
		i := bytes.IndexByte(data[pos:], '\n')
		if i < 0 {
			break
		}
		if s.skip {
			s.skip = false
		} else {
			sink.line(stdinSource, s.off+int64(pos), data[pos:pos+i])
		}
		pos += i + 1
	}
	s.off += int64(pos)
	rest := data[pos:]
	if len(rest) >= s.maxLine && !s.skip {
		sink.overlong(stdinSource, s.off, rest[:4096])
		s.skip = true
	}
	if s.skip {
		s.off += int64(len(rest))
		s.carry = s.carry[:0]
		return
	}
	s.carry = append(s.carry[:0], rest...)
}
