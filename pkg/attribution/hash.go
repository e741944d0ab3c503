package attribution

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
)

// Defaults for NewHashCache.
const (
	DefaultHashEntries = 4096
	DefaultMaxExeSize  = 4 << 30 // 4 GiB
)

// ErrTooLarge: an executable is larger than the HashCache's limit.
var ErrTooLarge = errors.New("attribution: executable larger than the hashing limit")

// fileKey identifies one version of a file: a change of content changes
// the inode (new file), the size, the mtime or — even when the writer
// resets the mtime with utimensat — the ctime, which only the kernel sets.
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // ns since the epoch
}

type hashEntry struct {
	done chan struct{} // closed when sum/err are set
	sum  string
	err  error
}

// HashCache computes sha256 sums of executables and caches them by file
// identity (device, inode, size, mtime, ctime). Concurrent requests for the
// same file share one computation; a file being hashed never delays
// requests for other files (the cache lock is held only for map access).
// Files are hashed streaming, so memory stays constant whatever their
// size. Safe for concurrent use.
type HashCache struct {
	maxEntries int
	maxSize    int64

	mu      sync.Mutex
	entries map[fileKey]*hashEntry

	hashed atomic.Uint64
	hits   atomic.Uint64

	// hashHook, if set (tests), runs in the hashing goroutine before
	// reading the file.
	hashHook func(path string)
}

// HashStats counts a HashCache's work.
type HashStats struct {
	// Hashed is the number of files read and hashed.
	Hashed uint64 `json:"hashed"`
	// Hits is the number of sums answered from the cache or by joining a
	// computation already under way.
	Hits uint64 `json:"hits"`
	// Entries is the number of cached sums.
	Entries int `json:"entries"`
}

// NewHashCache returns a cache of at most maxEntries sums (0:
// DefaultHashEntries) that refuses files larger than maxSize bytes with
// ErrTooLarge (0: DefaultMaxExeSize).
func NewHashCache(maxEntries int, maxSize int64) (*HashCache, error) {
	if maxEntries < 0 {
		return nil, fmt.Errorf("attribution: hash cache maxEntries %d: must not be negative", maxEntries)
	}
	if maxSize < 0 {
		return nil, fmt.Errorf("attribution: hash cache maxSize %d: must not be negative", maxSize)
	}
	if maxEntries == 0 {
		maxEntries = DefaultHashEntries
	}
	if maxSize == 0 {
		maxSize = DefaultMaxExeSize
	}
	return &HashCache{maxEntries: maxEntries, maxSize: maxSize, entries: map[fileKey]*hashEntry{}}, nil
}

// Stats returns the cache's counters.
func (c *HashCache) Stats() HashStats {
	c.mu.Lock()
	n := len(c.entries)
	c.mu.Unlock()
	return HashStats{Hashed: c.hashed.Load(), Hits: c.hits.Load(), Entries: n}
}

// Sum returns the lowercase hex sha256 of the file at path, opening it
// (following links, so /proc/<pid>/exe names the running executable even
// if its path was replaced or deleted). If ctx ends first Sum returns
// ctx's error; the computation continues for later callers.
func (c *HashCache) Sum(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("attribution: hash %s: %w", path, err)
	}
	key, err := fileKeyOf(f)
	if err != nil {
		f.Close()
		return "", fmt.Errorf("attribution: hash %s: %w", path, err)
	}
	if key.size > c.maxSize {
		f.Close()
		return "", fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, path, key.size, c.maxSize)
	}

	c.mu.Lock()
	e, ok := c.entries[key]
	if !ok {
		c.evictLocked()
		e = &hashEntry{done: make(chan struct{})}
		c.entries[key] = e
	}
	c.mu.Unlock()
	if ok {
		f.Close()
		c.hits.Add(1)
	} else {
		go c.compute(e, key, f, path)
	}
	select {
	case <-e.done:
		return e.sum, e.err
	case <-ctx.Done():
		return "", fmt.Errorf("attribution: hash %s: %w", path, ctx.Err())
	}
}

// compute hashes f (and closes it), publishes the result in e, and drops
// e from the cache on error so that a later request tries again.
func (c *HashCache) compute(e *hashEntry, key fileKey, f *os.File, path string) {
	if c.hashHook != nil {
		c.hashHook(path)
	}
	c.hashed.Add(1)
	e.sum, e.err = c.hashFile(f, key, path)
	f.Close() // before waking waiters: they may count open fds
	if e.err != nil {
		c.mu.Lock()
		if c.entries[key] == e {
			delete(c.entries, key)
		}
		c.mu.Unlock()
	}
	close(e.done)
}

func (c *HashCache) hashFile(f *os.File, key fileKey, path string) (string, error) {
	h := sha256.New()
	buf := make([]byte, 256<<10)
	n, err := io.CopyBuffer(h, io.LimitReader(f, c.maxSize+1), buf)
	if err != nil {
		return "", fmt.Errorf("attribution: hash %s: %w", path, err)
	}
	if n > c.maxSize {
		return "", fmt.Errorf("%w: %s grew past %d bytes", ErrTooLarge, path, c.maxSize)
	}
	after, err := fileKeyOf(f)
	if err != nil {
		return "", fmt.Errorf("attribution: hash %s: %w", path, err)
	}
	if after != key || n != key.size {
		return "", fmt.Errorf("attribution: hash %s: file changed while it was read", path)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// evictLocked makes room for one entry by dropping finished entries
// (about an eighth of the cache, so eviction is amortised).
func (c *HashCache) evictLocked() {
	if len(c.entries) < c.maxEntries {
		return
	}
	drop := c.maxEntries/8 + 1
	for k, e := range c.entries {
		select {
		case <-e.done:
			delete(c.entries, k)
			drop--
		default:
		}
		if drop == 0 {
			return
		}
	}
}
