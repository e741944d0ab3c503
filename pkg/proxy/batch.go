package proxy

import (
	"crypto/tls"
	"net"
	"sync"
)

// Socket I/O of an inspected tunnel's TLS legs is batched: crypto/tls
// reads and writes one record (16 KiB at most) per system call, which
// for a bulk download costs more CPU than the decryption and encryption
// themselves. The buffers involved are pooled and held only while bytes
// are in flight, so an idle connection holds none of them; a tunnel
// moving a bulk response holds at most upReadSize (upstream reads) +
// bulkCopySize (the relay's copy) + maxBatch (client-leg writes), about
// 1.8 MiB.

// maxBatch bounds the TLS records gathered into one socket write: a
// bulkCopySize application write and its records' overhead fit.
const maxBatch = 512 << 10

var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxBatch); return &b }}

// batchConn sits under the client leg's tls.Conn of an inspected tunnel.
// While a batch is open (one application write, see tlsBatchWriter) the
// records crypto/tls writes are gathered and go out in one write when it
// closes, so a bulk response costs a few large socket writes instead of
// one per record. Outside a batch (handshake, alerts, key updates)
// writes go straight through.
type batchConn struct {
	net.Conn
	mu    sync.Mutex
	batch bool
	bp    *[]byte // pooled, only while a batch holds bytes
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.batch {
		return b.Conn.Write(p)
	}
	if b.bp == nil {
		b.bp = batchBufs.Get().(*[]byte)
	}
	if len(*b.bp)+len(p) > maxBatch {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) > maxBatch {
			return b.Conn.Write(p)
		}
	}
	*b.bp = append(*b.bp, p...)
	return len(p), nil
}

func (b *batchConn) flushLocked() error {
	if b.bp == nil || len(*b.bp) == 0 {
		return nil
	}
	_, err := b.Conn.Write(*b.bp)
	*b.bp = (*b.bp)[:0]
	return err
}

func (b *batchConn) begin() {
	b.mu.Lock()
	b.batch = true
	b.mu.Unlock()
}

func (b *batchConn) end() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batch = false
	err := b.flushLocked()
	if b.bp != nil {
		batchBufs.Put(b.bp)
		b.bp = nil
	}
	return err
}

// tlsBatchWriter writes application data through a tls.Conn whose
// records are gathered by its batchConn.
type tlsBatchWriter struct {
	tc *tls.Conn
	bc *batchConn
}

func (w tlsBatchWriter) Write(p []byte) (int, error) {
	w.bc.begin()
	n, err := w.tc.Write(p)
	if ferr := w.bc.end(); err == nil {
		err = ferr
	}
	return n, err
}

// upReadSize is the largest read on an inspected tunnel's upstream TLS
// connection during a bulk response: up to 64 records in one read(2).
const upReadSize = 1 << 20

var upReadBufs = sync.Pool{New: func() any { b := make([]byte, upReadSize); return &b }}

// bigReadConn sits under the upstream leg's tls.Conn. A read that filled
// what crypto/tls asked for means more is probably queued, so the next
// one takes up to upReadSize at once into a pooled buffer, which
// crypto/tls is then served from. Any other read goes straight to the
// socket: a buffer is held only while bulk data is flowing, never by a
// connection waiting for its upstream. Fewer, larger reads also mean
// fewer window updates, so the upstream's sender is woken less often.
type bigReadConn struct {
	net.Conn
	bp   *[]byte
	r, w int
	more bool // the last socket read filled what it was given
}

func (c *bigReadConn) Read(p []byte) (int, error) {
	if c.r == c.w {
		if !c.more || len(p) >= upReadSize {
			n, err := c.Conn.Read(p)
			c.more = n == len(p)
			return n, err
		}
		c.bp = upReadBufs.Get().(*[]byte)
		n, err := c.Conn.Read(*c.bp)
		c.r, c.w, c.more = 0, n, n == len(*c.bp)
		if n == 0 {
			c.release()
			return 0, err
		}
	}
	n := copy(p, (*c.bp)[c.r:c.w])
	c.r += n
	if c.r == c.w {
		c.release()
	}
	return n, nil
}

func (c *bigReadConn) release() {
	upReadBufs.Put(c.bp)
	c.bp, c.r, c.w = nil, 0, 0
}

// pending reports whether bytes already read from the socket wait in
// the buffer: reading them does not block.
func (c *bigReadConn) pending() bool { return c.r < c.w }
