package collector

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// fileID is a file's identity: device and inode. A followed file keeps its
// identity across a rename, so rename+create rotation is recognised by the
// name pointing at a new identity while the old one is drained.
type fileID struct{ Dev, Ino uint64 }

// checkpoint records how far a file has been read and spooled. FP is the
// sha256 (first 16 bytes, hex) of the file's first FPLen bytes, its first
// line: if the inode is reused for another file, or the file is truncated
// and rewritten past the old offset between two looks (copytruncate), the
// fingerprint no longer matches and the file is read from the start.
type checkpoint struct {
	Path   string `json:"path"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Offset int64  `json:"offset"`
	FPLen  int64  `json:"fp_len,omitempty"`
	FP     string `json:"fp,omitempty"`
}

type checkpointFile struct {
	Version int          `json:"version"`
	Files   []checkpoint `json:"files"`
}

const checkpointName = "checkpoints.json"

func loadCheckpoints(dir string) (map[fileID]checkpoint, error) {
	if dir == "" {
		return map[fileID]checkpoint{}, nil // no spool: nothing is checkpointed
	}
	p := filepath.Join(dir, checkpointName)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return map[fileID]checkpoint{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	var cf checkpointFile
	if err := json.Unmarshal(data, &cf); err != nil {
		return nil, fmt.Errorf("checkpoints %s are corrupt (%v); remove the file to re-read every input from the start (the hub drops the duplicates)", p, err)
	}
	if cf.Version != 1 {
		return nil, fmt.Errorf("checkpoints %s: unknown version %d", p, cf.Version)
	}
	out := make(map[fileID]checkpoint, len(cf.Files))
	for _, c := range cf.Files {
		out[fileID{c.Dev, c.Ino}] = c
	}
	return out, nil
}

// tailed is one followed file.
type tailed struct {
	id       fileID
	path     string
	f        *os.File
	off      int64 // every line before off has been handled
	fpLen    int64
	fp       string
	gone     time.Time // when the file stopped matching the inputs
	lastData time.Time
	atEOF    bool
	skipping bool // inside an over-long line
}

// lineSink receives the lines a follower reads.
type lineSink interface {
	line(source string, off int64, line []byte)
	overlong(source string, off int64, head []byte)
}

// follower follows the files matching a set of globs.
type follower struct {
	globs         []string
	dir           string // checkpoint directory
	files         map[fileID]*tailed
	saved         map[fileID]checkpoint // as loaded at start
	orphans       map[fileID]checkpoint // saved ones not yet matched to a file
	closeInactive time.Duration
	maxLine       int
	buf           []byte
	lastSaved     []byte
	log           *slog.Logger
	m             *Metrics
}

func newFollower(globs []string, dir string, closeInactive time.Duration, maxLine int, log *slog.Logger, m *Metrics) (*follower, error) {
	ck, err := loadCheckpoints(dir)
	if err != nil {
		return nil, err
	}
	abs := make([]string, len(globs))
	for i, g := range globs {
		if abs[i], err = filepath.Abs(g); err != nil {
			return nil, fmt.Errorf("input %q: %w", g, err)
		}
	}
	globs = abs
	orphans := make(map[fileID]checkpoint, len(ck))
	for id, c := range ck {
		orphans[id] = c
	}
	return &follower{
		globs: globs, dir: dir, files: map[fileID]*tailed{}, saved: ck, orphans: orphans,
		closeInactive: closeInactive, maxLine: maxLine, buf: make([]byte, 256<<10), log: log, m: m,
	}, nil
}

// scan matches the globs, starts following new files, notices renamed and
// removed ones, and (the first time) resumes checkpointed files that were
// rotated away while the collector was not running.
func (fo *follower) scan(now time.Time) {
	seen := map[fileID]bool{}
	for _, g := range fo.globs {
		matches, _ := filepath.Glob(g) // patterns were checked up front
		for _, m := range matches {
			fi, err := os.Stat(m)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			id, ok := fileIdentity(fi)
			if !ok || seen[id] {
				continue
			}
			seen[id] = true
			if t := fo.files[id]; t != nil {
				if t.path != m {
					fo.log.Info("followed file renamed", "from", t.path, "to", m)
					fo.m.RotationsRename.Add(1)
					t.path = m
				}
				t.gone = time.Time{}
				continue
			}
			fo.open(m, id, now, false)
		}
	}
	for id, t := range fo.files {
		if !seen[id] && t.gone.IsZero() {
			t.gone = now
			fo.m.RotationsRename.Add(1)
			fo.log.Info("followed file renamed away or removed; draining it", "path", t.path)
		}
	}
	// Checkpointed files not matched now were rotated away while the
	// collector was down: look for them beside their old name.
	for id, ck := range fo.orphans {
		delete(fo.orphans, id)
		if p := findByID(filepath.Dir(ck.Path), id); p != "" {
			if t := fo.open(p, id, now, true); t != nil {
				fo.log.Info("resuming rotated file from its checkpoint", "path", p, "offset", t.off)
				continue
			}
		}
		fo.log.Warn("checkpointed file is gone; lines it held past the checkpoint were not read", "path", ck.Path, "offset", ck.Offset)
	}
	// Checkpoints describe the files present at start only: a file that
	// appears later with a recycled inode must not inherit one.
	fo.saved = nil
}

func findByID(dir string, id fileID) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if got, ok := fileIdentity(fi); ok && got == id {
			return p
		}
	}
	return ""
}

// open starts following path (identity id), resuming from a matching
// checkpoint.
func (fo *follower) open(path string, id fileID, now time.Time, gone bool) *tailed {
	f, err := os.Open(path)
	if err != nil {
		fo.log.Warn("cannot open input", "path", path, "err", err)
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil
	}
	if got, ok := fileIdentity(fi); !ok || got != id {
		f.Close() // replaced between stat and open; the next scan sees it
		return nil
	}
	t := &tailed{id: id, path: path, f: f, lastData: now}
	if gone {
		t.gone = now
	}
	delete(fo.orphans, id)
	fo.files[id] = t
	if ck, ok := fo.saved[id]; ok {
		if fpMatches(f, ck) && ck.Offset <= fi.Size() {
			t.off, t.fpLen, t.fp = ck.Offset, ck.FPLen, ck.FP
		} else {
			fo.log.Info("checkpoint does not match the file (inode reused or file rewritten); reading from the start", "path", path)
		}
	}
	if !gone {
		fo.log.Info("following", "path", path, "offset", t.off)
	}
	return t
}

func fpMatches(f *os.File, ck checkpoint) bool {
	if ck.FPLen == 0 {
		return true
	}
	head := make([]byte, ck.FPLen)
	if _, err := f.ReadAt(head, 0); err != nil {
		return false
	}
	return fingerprint(head) == ck.FP
}

func fingerprint(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// read reads new complete lines from every followed file, up to about
// budget bytes, and reports how many bytes it consumed.
func (fo *follower) read(budget int64, sink lineSink, now time.Time) int64 {
	var total int64
	for _, t := range fo.sorted() {
		if total >= budget {
			t.atEOF = false
			continue
		}
		total += fo.readFile(t, budget-total, sink, now)
	}
	return total
}

func (fo *follower) sorted() []*tailed {
	out := make([]*tailed, 0, len(fo.files))
	for _, t := range fo.files {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

func (fo *follower) readFile(t *tailed, budget int64, sink lineSink, now time.Time) int64 {
	fi, err := t.f.Stat()
	if err != nil {
		fo.log.Warn("cannot stat input", "path", t.path, "err", err)
		return 0
	}
	size := fi.Size()
	truncated := size < t.off
	if !truncated && t.fpLen > 0 && size >= t.fpLen {
		head := make([]byte, t.fpLen)
		if _, err := t.f.ReadAt(head, 0); err == nil && fingerprint(head) != t.fp {
			truncated = true
		}
	}
	if truncated {
		fo.m.RotationsTruncate.Add(1)
		fo.log.Info("followed file truncated (copytruncate); reading it from the start", "path", t.path, "old_offset", t.off, "size", size)
		t.off, t.fpLen, t.fp, t.skipping = 0, 0, "", false
	}
	var consumed int64
	t.atEOF = false
	for {
		if t.off >= size {
			t.atEOF = true
			break
		}
		if consumed >= budget {
			break
		}
		n := int64(len(fo.buf))
		if rem := size - t.off; rem < n {
			n = rem
		}
		got, err := t.f.ReadAt(fo.buf[:n], t.off)
		if err != nil && !errors.Is(err, io.EOF) {
			fo.log.Warn("cannot read input", "path", t.path, "err", err)
			break
		}
		chunk := fo.buf[:got]
		if got == 0 {
			t.atEOF = true
			break
		}
		pos := 0
		for {
			i := bytes.IndexByte(chunk[pos:], '\n')
			if i < 0 {
				break
			}
			line := chunk[pos : pos+i]
			start := t.off + int64(pos)
			if t.skipping {
				t.skipping = false
			} else {
				if start == 0 && t.fpLen == 0 {
					t.fpLen = int64(i + 1)
					t.fp = fingerprint(chunk[:i+1])
				}
				sink.line(t.path, start, line)
			}
			pos += i + 1
		}
		if pos == 0 {
			switch {
			case t.skipping:
				t.off += int64(got)
				consumed += int64(got)
				continue
			case int64(got) == size-t.off && got < fo.maxLine:
				// An incomplete last line: the writer is mid-line.
				t.atEOF = true
			case len(fo.buf) < fo.maxLine:
				fo.buf = make([]byte, min(2*len(fo.buf), fo.maxLine))
				continue
			default:
				sink.overlong(t.path, t.off, chunk[:min(len(chunk), 4096)])
				t.skipping = true
				t.off += int64(got)
				consumed += int64(got)
				continue
			}
			break
		}
		t.off += int64(pos)
		consumed += int64(pos)
		t.lastData = now
	}
	return consumed
}

// closeIdle stops following files that were rotated away, are fully read
// and have been quiet for closeInactive. It reports whether any closed.
func (fo *follower) closeIdle(now time.Time) bool {
	closed := false
	for id, t := range fo.files {
		if t.gone.IsZero() || !t.atEOF {
			continue
		}
		last := t.gone
		if t.lastData.After(last) {
			last = t.lastData
		}
		if now.Sub(last) < fo.closeInactive {
			continue
		}
		fo.log.Info("done with rotated file", "path", t.path, "offset", t.off)
		t.f.Close()
		delete(fo.files, id)
		closed = true
	}
	return closed
}

// allAtEOF reports whether every followed file has been read to its end.
func (fo *follower) allAtEOF() bool {
	for _, t := range fo.files {
		if !t.atEOF {
			return false
		}
	}
	return true
}

// save writes the checkpoints of every followed file (atomically, fsynced)
// when they changed. Call it only after the lines read so far are
// durably spooled.
func (fo *follower) save() error {
	if fo.dir == "" {
		return nil
	}
	cf := checkpointFile{Version: 1, Files: []checkpoint{}}
	for _, t := range fo.sorted() {
		cf.Files = append(cf.Files, checkpoint{Path: t.path, Dev: t.id.Dev, Ino: t.id.Ino, Offset: t.off, FPLen: t.fpLen, FP: t.fp})
	}
	data, err := json.MarshalIndent(cf, "", "  ")
	if err != nil {
		return err
	}
	if bytes.Equal(data, fo.lastSaved) {
		return nil
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(fo.dir, checkpointName), data, 0o600); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	fo.lastSaved = data
	return nil
}

// close closes every followed file.
func (fo *follower) close() {
	for _, t := range fo.files {
		t.f.Close()
	}
}
