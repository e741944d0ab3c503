package proxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// closeWriter is a connection that can half-close (*net.TCPConn).
type closeWriter interface{ CloseWrite() error }

// relay copies client→up and up→client until both directions are done
// and returns the byte counts. Between two *net.TCPConn the kernel's
// splice path does the copying. A clean EOF on one side half-closes the
// other side's write direction and the other direction carries on; an
// error on either side, or no data either way for the idle timeout,
// closes both. The caller closes the connections afterwards.
//
// pre, when set, runs first in the client-to-upstream direction (the
// other direction already flows); false closes both.
func (p *Proxy) relay(client, up net.Conn, pre func() bool) (upN, downN int64) {
	w := p.watchIdle(client, up)
	defer w.stop()
	done := make(chan struct{})
	p.work.run(func() {
		defer close(done)
		if pre != nil && !pre() {
			client.Close()
			up.Close()
			return
		}
		var err error
		upN, err = io.Copy(up, client)
		finishDirection(err, up, client)
	})
	var err error
	downN, err = io.Copy(client, up)
	finishDirection(err, client, up)
	<-done
	return upN, downN
}

// finishDirection ends one copy direction: on clean EOF it passes the
// half-close on to dst; on error it closes both so the other direction
// stops too.
func finishDirection(err error, dst, src net.Conn) {
	if err == nil {
		if cw, ok := dst.(closeWriter); ok {
			if cw.CloseWrite() == nil {
				return
			}
		}
	}
	dst.Close()
	src.Close()
}

// idleWatch closes a pair of connections when no data moved either way
// for the idle timeout. It reads the kernel's per-socket "time since last
// data sent/received" (TCP_INFO), so the relay can stay on the splice
// path with no per-read bookkeeping. Connections whose activity cannot be
// read (not TCP) are never closed by it.
type idleWatch struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	fired   atomic.Bool
}

// minIdleRecheck stops a near-expired watch from spinning.
const minIdleRecheck = 10 * time.Millisecond

func (p *Proxy) watchIdle(a, b net.Conn) *idleWatch {
	w := &idleWatch{}
	idle := p.cfg.Limits.IdleTimeout
	if idle <= 0 {
		return w
	}
	var check func()
	check = func() {
		da, oka := tcpIdle(a)
		db, okb := tcpIdle(b)
		if !oka || !okb {
			return
		}
		d := min(da, db)
		if d >= idle {
			w.fired.Store(true)
			a.Close()
			b.Close()
			return
		}
		w.mu.Lock()
		if !w.stopped {
			w.t.Reset(max(idle-d, minIdleRecheck))
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.t = time.AfterFunc(idle, check)
	w.mu.Unlock()
	return w
}

func (w *idleWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
	w.mu.Unlock()
}
