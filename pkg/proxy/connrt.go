package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// connRT is the HTTP/1.1 client of an inspected tunnel's upstream leg:
// requests go over the one connection dialled (and checked) for the
// CONNECT, one at a time, written and read in the calling goroutine — no
// hand-off to transport goroutines, so a keep-alive request costs the
// proxy about what a spliced one does in scheduling. A request that
// finds the connection busy (an h2 client's concurrent streams) or gone
// goes to fallback, which dials the same checked address. WebSocket
// upgrades always go to fallback (it returns the upgraded connection).
type connRT struct {
	c        net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	idle     time.Duration
	busy     atomic.Bool
	dead     atomic.Bool
	fallback http.RoundTripper
	pend     func() bool // bytes read from the socket wait under c (nil: none can)
}

func newConnRT(c net.Conn, fallback http.RoundTripper, idle time.Duration) *connRT {
	return &connRT{c: c, br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriterSize(c, 16<<10), idle: idle, fallback: fallback}
}

// errConnLost is a failure before any response byte on a reused
// connection: the upstream closed it while idle.
var errConnLost = errors.New("upstream closed the connection")

func (t *connRT) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.dead.Load() || req.Header.Get("Upgrade") != "" || !t.busy.CompareAndSwap(false, true) {
		return t.fallback.RoundTrip(req)
	}
	resp, err := t.exchange(req)
	if err != nil {
		t.kill()
		t.busy.Store(false)
		if errors.Is(err, errConnLost) && (req.Body == nil || req.Body == http.NoBody) {
			return t.fallback.RoundTrip(req) // nothing was consumed: safe to send again
		}
		return nil, err
	}
	reuse := !resp.Close
	resp.Body = &connBody{rc: resp.Body, t: t, reuse: reuse}
	return resp, nil
}

func (t *connRT) exchange(req *http.Request) (*http.Response, error) {
	if t.idle > 0 {
		t.c.SetDeadline(time.Now().Add(t.idle))
	}
	if err := req.Write(t.bw); err != nil {
		return nil, err
	}
	if err := t.bw.Flush(); err != nil {
		return nil, errConnLost
	}
	for {
		if _, err := t.br.Peek(1); err != nil {
			return nil, errConnLost
		}
		resp, err := http.ReadResponse(t.br, req)
		if err != nil {
			return nil, err
		}
		// Interim responses (103 Early Hints) are not relayed.
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, errors.New("upstream switched protocols without an upgrade request")
		}
		return resp, nil
	}
}

func (t *connRT) kill() {
	t.dead.Store(true)
	t.c.Close()
}

// connBody returns the connection when the body was read to its end.
type connBody struct {
	rc    io.ReadCloser
	t     *connRT
	reuse bool
	eof   bool
	done  bool
}

func (b *connBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err == nil && b.t.idle > 0 {
		b.t.c.SetDeadline(time.Now().Add(b.t.idle))
	}
	return n, err
}

// pending reports whether the next read is served from bytes already
// received from the upstream (buffered here or under the TLS layer), so
// it does not block.
func (b *connBody) pending() bool {
	return b.t.br.Buffered() > 0 || b.t.pend != nil && b.t.pend()
}

func (b *connBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	err := b.rc.Close()
	if !b.eof || !b.reuse {
		b.t.kill()
	}
	b.t.busy.Store(false)
	return err
}
