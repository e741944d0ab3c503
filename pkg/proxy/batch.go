package proxy

import (
	"crypto/tls"
	"net"
	"sync"
)

// maxBatch bounds the TLS records gathered into one socket write.
const maxBatch = 256 << 10

// batchConn sits under the client leg's tls.Conn of an inspected tunnel.
// crypto/tls writes every record (16 KiB at most) with its own write(2);
// while a batch is open (one application write, see tlsBatchWriter) the
// records are gathered and go out in one write when it closes, so a bulk
// response costs a few large socket writes instead of one per record.
// Outside a batch (handshake, alerts, key updates) writes go straight
// through.
type batchConn struct {
	net.Conn
	mu    sync.Mutex
	batch bool
	buf   []byte
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.batch {
		return b.Conn.Write(p)
	}
	if len(b.buf)+len(p) > maxBatch {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *batchConn) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = b.buf[:0]
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
	return b.flushLocked()
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
