package proxy

import (
	"net"
	"sync"
)

// connGuard is a connection's binding to its decided process (the send
// guard): released when the connection ends; a violation, once the
// kernel refused a send, closes the connection and is reported with the
// record that finishes next.
type connGuard struct {
	release func()
	conn    *net.TCPConn

	mu       sync.Mutex
	violated *SendViolation
	reported bool
}

// guard holds the connection to the identity it was attributed to. It
// returns false (reason set) when the connection cannot be held.
func (p *Proxy) guard(c *net.TCPConn, rec *Record) bool {
	if p.cfg.Guard == nil || c == nil {
		return true
	}
	g := &connGuard{conn: c}
	release, err := p.cfg.Guard.Guard(rec.Identity, g.violation)
	if err != nil {
		rec.Reason, rec.Cause = ReasonAttributionIncomplete, err.Error()
		return false
	}
	g.release = release
	rec.guard = g
	return true
}

// violation records the refused sender and closes the connection: the
// kernel refuses every later send on it, and nothing the sender sent
// reached the proxy.
func (g *connGuard) violation(v SendViolation) {
	g.mu.Lock()
	if g.violated == nil {
		g.violated = &v
	}
	g.mu.Unlock()
	g.conn.Close()
}

// done releases the binding.
func (g *connGuard) done() {
	if g != nil && g.release != nil {
		g.release()
	}
}

// take returns the violation not yet reported, marking it reported.
func (g *connGuard) take() *SendViolation {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.violated == nil || g.reported {
		return nil
	}
	g.reported = true
	return g.violated
}
