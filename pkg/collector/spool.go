package collector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// The spool is a directory of append-only segment files, seg-<n>.jsonl,
// holding one normalised record per line. The ingest side appends records
// and commits them (write + fsync) before it advances any input
// checkpoint; each sink reads from its own cursor, and its cursor
// (cursor-<sink>.json) only moves past records the sink acknowledged.
// Segments behind every sink's persisted cursor are deleted.
//
// A crash can leave (a) records in a segment whose input checkpoint did not
// advance, which are read and spooled again, and (b) acknowledged records
// behind a cursor that was not yet persisted, which are sent again. Both
// are duplicates with the same event_id, which the hub drops; nothing is
// ever lost.

// Pos is a position in the spool.
type Pos struct {
	Seg uint64 `json:"segment"`
	Off int64  `json:"offset"`
}

func (p Pos) less(q Pos) bool { return p.Seg < q.Seg || p.Seg == q.Seg && p.Off < q.Off }

const (
	segPrefix    = "seg-"
	segSuffix    = ".jsonl"
	cursorPrefix = "cursor-"
)

func segName(n uint64) string { return fmt.Sprintf("%s%020d%s", segPrefix, n, segSuffix) }

// spool is safe for one writer and any number of readers.
type spool struct {
	dir    string
	maxSeg int64

	mu       sync.Mutex
	notify   chan struct{} // closed and replaced after each commit and ack
	segs     map[uint64]int64
	order    []uint64 // segment numbers, ascending
	active   *os.File
	activeN  uint64
	buf      []byte
	sinks    map[string]Pos // persisted cursor per configured sink
	acked    map[string]Pos // in-memory acknowledged position per sink
	writeErr error
}

// openSpool opens (creating) the spool in dir for the named sinks,
// repairing a torn tail left by a crash.
func openSpool(dir string, sinks []string, maxSeg int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	s := &spool{dir: dir, maxSeg: maxSeg, notify: make(chan struct{}), segs: map[uint64]int64{}, sinks: map[string]Pos{}, acked: map[string]Pos{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, segPrefix) || !strings.HasSuffix(name, segSuffix) {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), segSuffix), 10, 64)
		if err != nil || n == 0 {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("spool %s: %w", dir, err)
		}
		s.segs[n] = info.Size()
		s.order = append(s.order, n)
	}
	sort.Slice(s.order, func(i, j int) bool { return s.order[i] < s.order[j] })
	if len(s.order) == 0 {
		s.order = []uint64{1}
		s.segs[1] = 0
	}
	s.activeN = s.order[len(s.order)-1]
	p := filepath.Join(dir, segName(s.activeN))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: open segment: %w", err)
	}
	size, err := repairTail(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("spool: repair %s: %w", p, err)
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("spool: %w", err)
	}
	s.active = f
	s.segs[s.activeN] = size
	if err := fsutil.SyncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	for _, name := range sinks {
		c, err := s.loadCursor(name)
		if err != nil {
			f.Close()
			return nil, err
		}
		s.sinks[name] = c
		s.acked[name] = c
	}
	return s, nil
}

// repairTail truncates a segment after its last newline: a crash in the
// middle of a write leaves at most one partial record, which was never
// committed and will be spooled again from its input.
func repairTail(f *os.File) (int64, error) {
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := info.Size()
	end := size
	buf := make([]byte, 64<<10)
	for end > 0 {
		n := int64(len(buf))
		if n > end {
			n = end
		}
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			end = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	if end != size {
		if err := f.Truncate(end); err != nil {
			return 0, err
		}
		if err := fsutil.Sync(f); err != nil {
			return 0, err
		}
	}
	return end, nil
}

func (s *spool) cursorPath(sink string) string {
	return filepath.Join(s.dir, cursorPrefix+sink+".json")
}

// loadCursor reads a sink's cursor and clamps it to what exists: before
// the first segment means the first segment's start.
func (s *spool) loadCursor(sink string) (Pos, error) {
	first := Pos{Seg: s.order[0]}
	data, err := os.ReadFile(s.cursorPath(sink))
	if errors.Is(err, os.ErrNotExist) {
		return first, nil
	}
	if err != nil {
		return Pos{}, fmt.Errorf("spool: cursor for %s: %w", sink, err)
	}
	var c Pos
	if err := json.Unmarshal(data, &c); err != nil {
		return Pos{}, fmt.Errorf("spool: cursor %s is corrupt (%v); remove it to resend the whole spool to %s", s.cursorPath(sink), err, sink)
	}
	if c.less(first) {
		return first, nil
	}
	if size, ok := s.segs[c.Seg]; ok && c.Off > size {
		c.Off = size
	}
	return c, nil
}

// Append buffers one record (without its newline) for the next Commit.
func (s *spool) Append(rec []byte) {
	s.mu.Lock()
	s.buf = append(s.buf, rec...)
	s.buf = append(s.buf, '\n')
	s.mu.Unlock()
}

// Commit writes and fsyncs the buffered records, making them visible to
// readers, and starts a new segment when the active one is full.
func (s *spool) Commit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	if len(s.buf) == 0 {
		return nil
	}
	fail := func(err error) error {
		s.writeErr = fmt.Errorf("spool: %w", err)
		return s.writeErr
	}
	if _, err := s.active.Write(s.buf); err != nil {
		return fail(err)
	}
	if err := fsutil.Sync(s.active); err != nil {
		return fail(err)
	}
	s.segs[s.activeN] += int64(len(s.buf))
	if cap(s.buf) > 8<<20 {
		s.buf = nil
	} else {
		s.buf = s.buf[:0]
	}
	if s.segs[s.activeN] >= s.maxSeg {
		n := s.activeN + 1
		f, err := os.OpenFile(filepath.Join(s.dir, segName(n)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fail(err)
		}
		if err := fsutil.SyncDir(s.dir); err != nil {
			f.Close()
			return fail(err)
		}
		s.active.Close()
		s.active, s.activeN = f, n
		s.segs[n] = 0
		s.order = append(s.order, n)
	}
	s.broadcastLocked()
	return nil
}

func (s *spool) broadcastLocked() {
	close(s.notify)
	s.notify = make(chan struct{})
}

// Changed returns a channel closed at the next commit or acknowledgement.
func (s *spool) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notify
}

// limit returns how far a reader may read in segment n, and the next
// segment after n (0 if none).
func (s *spool) limit(n uint64) (size int64, exists bool, next uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	size, exists = s.segs[n]
	i := sort.Search(len(s.order), func(i int) bool { return s.order[i] > n })
	if i < len(s.order) {
		next = s.order[i]
	}
	return size, exists, next
}

// Ack records that sink has acknowledged everything before p (in memory).
func (s *spool) Ack(sink string, p Pos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked[sink] = p
	s.broadcastLocked()
}

// Persist writes sink's acknowledged position to its cursor file and
// deletes segments every sink has persisted past.
func (s *spool) Persist(sink string) error {
	s.mu.Lock()
	p := s.acked[sink]
	same := s.sinks[sink] == p
	s.mu.Unlock()
	if same {
		return nil
	}
	data, _ := json.Marshal(p)
	if err := fsutil.WriteFileAtomic(s.cursorPath(sink), data, 0o600); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.mu.Lock()
	s.sinks[sink] = p
	var dead []uint64
	minSeg := uint64(1<<64 - 1)
	for _, c := range s.sinks {
		if c.Seg < minSeg {
			minSeg = c.Seg
		}
	}
	keep := s.order[:0]
	for _, n := range s.order {
		if n < minSeg && n != s.activeN {
			dead = append(dead, n)
			delete(s.segs, n)
			continue
		}
		keep = append(keep, n)
	}
	s.order = keep
	s.mu.Unlock()
	for _, n := range dead {
		if err := os.Remove(filepath.Join(s.dir, segName(n))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("spool: %w", err)
		}
	}
	return nil
}

// Pending returns the spooled bytes not yet acknowledged by the slowest
// sink (in memory), committed or not.
func (s *spool) Pending() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var total int64
	for _, p := range s.acked {
		var n int64
		for _, seg := range s.order {
			if seg > p.Seg {
				n += s.segs[seg]
			} else if seg == p.Seg {
				n += s.segs[seg] - p.Off
			}
		}
		if n > total {
			total = n
		}
	}
	return total + int64(len(s.buf))
}

// Close closes the active segment.
func (s *spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		return nil
	}
	err := s.active.Close()
	s.active = nil
	return err
}

// spoolReader reads committed records for one sink from its cursor on.
type spoolReader struct {
	s    *spool
	sink string
	pos  Pos // next record to read
	f    *os.File
	fSeg uint64
}

func (s *spool) reader(sink string) *spoolReader {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &spoolReader{s: s, sink: sink, pos: s.acked[sink]}
}

// Next returns up to max committed records (copied) following the
// reader's position, reading at most about maxBytes, and advances the
// position past them. It returns no records when it has caught up.
func (r *spoolReader) Next(max int, maxBytes int) ([][]byte, error) {
	for {
		size, exists, next := r.s.limit(r.pos.Seg)
		if !exists {
			// The segment was removed (or never existed): continue at
			// the next one.
			if next == 0 {
				return nil, nil
			}
			r.pos = Pos{Seg: next}
			continue
		}
		if r.pos.Off >= size {
			if next == 0 {
				return nil, nil // caught up with the active segment
			}
			// A sealed segment is complete; move on.
			r.pos = Pos{Seg: next}
			continue
		}
		if r.f == nil || r.fSeg != r.pos.Seg {
			if r.f != nil {
				r.f.Close()
			}
			f, err := os.Open(filepath.Join(r.s.dir, segName(r.pos.Seg)))
			if errors.Is(err, os.ErrNotExist) {
				r.f = nil
				r.pos = Pos{Seg: next}
				if next == 0 {
					return nil, nil
				}
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("spool: %w", err)
			}
			r.f, r.fSeg = f, r.pos.Seg
		}
		want := size - r.pos.Off
		if want > int64(maxBytes) {
			want = int64(maxBytes)
		}
		for {
			buf := make([]byte, want)
			n, err := r.f.ReadAt(buf, r.pos.Off)
			if err != nil && !(errors.Is(err, io.EOF) && int64(n) == want) {
				return nil, fmt.Errorf("spool: read %s: %w", segName(r.pos.Seg), err)
			}
			buf = buf[:n]
			var recs [][]byte
			consumed := 0
			for len(recs) < max {
				i := bytes.IndexByte(buf[consumed:], '\n')
				if i < 0 {
					break
				}
				if i > 0 {
					recs = append(recs, buf[consumed:consumed+i:consumed+i])
				}
				consumed += i + 1
			}
			if consumed == 0 && len(recs) == 0 {
				if want < size-r.pos.Off {
					want *= 2 // a record longer than maxBytes
					continue
				}
				// Committed data always ends in a newline; a segment
				// that does not is damaged: skip its tail.
				r.pos.Off = size
				break
			}
			r.pos.Off += int64(consumed)
			if r.pos.Off >= size && next != 0 {
				// A sealed segment is done: point at the next one so a
				// persisted cursor lets the old segment be deleted.
				r.pos = Pos{Seg: next}
			}
			return recs, nil
		}
	}
}

// Pos returns the position after the last record returned.
func (r *spoolReader) Pos() Pos { return r.pos }

func (r *spoolReader) Close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}
