package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
)

// Component is the OCSF metadata.source of the proxy's events.
const Component = "egress-proxy"

// Proxy serves the listeners of one sandbox (or of one host in standalone
// mode). Create it with New, serve listeners with Serve and ServeFence,
// stop it with Close.
type Proxy struct {
	cfg    Config
	log    *slog.Logger
	src    *ocsf.Source
	events ocsf.Emitter
	// lines is events when it takes encoded lines (an events file): a
	// plain connection's event is then written from its record
	// (emitOpenLine).
	lines ocsf.LineEmitter
	now   func() time.Time

	gen           atomic.Pointer[Generation]
	endpoints     endpointBook // the inspected endpoints' last results
	reloadMu      sync.Mutex   // serialises reloads; genSeq is guarded by it
	genSeq        int64
	baseStatic    string
	baseTCP       bool // the first generation had a protocol: tcp endpoint
	lastReloadErr atomic.Pointer[string]
	notesSaid     map[string]bool // BinaryNotes already logged; guarded by reloadMu
	// policy is the policy of the generation in force (guarded by
	// reloadMu): reloaded credentials are checked against it.
	policy *policy.Policy

	// creds are the credentials in force (nil: none configured); credsGen
	// counts their loads and credsErr is the last failed load's error
	// (both guarded by reloadMu).
	creds       atomic.Pointer[credentials.Store]
	credsGen    int64
	credsErr    string
	credsStatus atomic.Pointer[CredentialsStatus]

	sem       chan struct{} // concurrent connection slots
	work      *workers      // goroutines that serve connections and relay directions
	rejectSem chan struct{} // slots for writing 503s when over the cap
	m         metrics
	limiter   *denyLimiter
	connSeq   atomic.Uint64
	transport *http.Transport
	// mappings is the policy DNS table the transparent listener reads
	// (nil: no transparent TCP). Set before serving (SetMappings).
	mappings *policydns.Table

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	servers   []*http.Server // control API servers
	conns     sync.Map       // net.Conn -> struct{}: client and upstream conns, for Close
	wg        sync.WaitGroup
	done      chan struct{}
	started   time.Time
}

// New loads and compiles the policy at cfg.PolicyPath (generation 1) and
// emits a 5019 Policy Load event. A policy that does not load is an
// error: the proxy never runs without one.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:       cfg,
		log:       cfg.Logger,
		src:       cfg.Source,
		events:    cfg.Events,
		now:       cfg.Now,
		sem:       make(chan struct{}, cfg.Limits.MaxConns),
		rejectSem: make(chan struct{}, 64),
		limiter:   newDenyLimiter(cfg.Limits.DenyWindow),
		listeners: map[net.Listener]struct{}{},
		done:      make(chan struct{}),
	}
	p.work = newWorkers(p.done)
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.src == nil {
		p.src = ocsf.NewSource("host", Component, "")
	}
	if p.events == nil {
		p.events = ocsf.Discard
	}
	p.lines, _ = p.events.(ocsf.LineEmitter)
	if p.now == nil {
		p.now = time.Now
	}
	p.started = p.now()
	p.transport = newForwardTransport()
	if _, err := p.Reload("startup"); err != nil {
		return nil, fmt.Errorf("policy does not load: %w", err)
	}
	if cfg.Limits.DenyWindow > 0 {
		go p.flushLoop()
	}
	return p, nil
}

// emitEvent sends one event, counting failures (an event that cannot be
// written never stops the proxy; the counter and the log show it).
func (p *Proxy) emitEvent(ev ocsf.Event) {
	if err := p.events.Emit(ev); err != nil {
		p.m.eventErrors.Add(1)
		p.log.Error("emit event", "err", err)
		return
	}
	p.m.eventsEmitted.Add(1)
}

// Serve accepts explicit-proxy connections on ln until Close. It returns
// nil after Close and the accept error otherwise.
func (p *Proxy) Serve(ln net.Listener) error { return p.acceptLoop(ln, ListenerProxy) }

// ServeFence accepts fence-captured connections on ln until Close. It
// needs Config.OriginalDst.
func (p *Proxy) ServeFence(ln net.Listener) error {
	if p.cfg.OriginalDst == nil {
		return errors.New("proxy: fence listener needs Config.OriginalDst")
	}
	return p.acceptLoop(ln, ListenerFence)
}

func (p *Proxy) addListener(ln net.Listener) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.listeners[ln] = struct{}{}
	return true
}

func (p *Proxy) isClosed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *Proxy) acceptLoop(ln net.Listener, listener string) error {
	if !p.addListener(ln) {
		ln.Close()
		return nil
	}
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if p.isClosed() {
				return nil
			}
			if isTemporaryAccept(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				p.log.Warn("accept failed; backing off", "listener", listener, "err", err, "backoff", backoff)
				select {
				case <-time.After(backoff):
				case <-p.done:
					return nil
				}
				continue
			}
			return fmt.Errorf("proxy: accept on %s listener: %w", listener, err)
		}
		backoff = 0
		tc, ok := c.(*net.TCPConn)
		if !ok {
			c.Close()
			continue
		}
		select {
		case p.sem <- struct{}{}:
		default:
			p.overCapacity(tc, listener)
			continue
		}
		p.wg.Add(1)
		p.work.run(func() { p.serveConn(tc, listener) })
	}
}

func isTemporaryAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// overCapacity refuses a connection beyond the cap: a fence connection is
// reset; an explicit one gets 503 from a small separate pool of writers
// (reset when that is full too), so the accept loop never blocks.
func (p *Proxy) overCapacity(c *net.TCPConn, listener string) {
	p.m.overCap.Add(1)
	if listener == ListenerFence || listener == ListenerTransparent {
		c.SetLinger(0)
		c.Close()
		return
	}
	select {
	case p.rejectSem <- struct{}{}:
	default:
		c.SetLinger(0)
		c.Close()
		return
	}
	p.wg.Add(1)
	go func() {
		defer func() { <-p.rejectSem; p.wg.Done() }()
		p.track(c)
		defer p.untrack(c)
		writeJSONResponse(c, http.StatusServiceUnavailable, errorBody{Error: "proxy_overloaded", Reason: "too many concurrent connections"})
		lingerClose(c, 200*time.Millisecond)
	}()
}

func (p *Proxy) track(c net.Conn)   { p.conns.Store(c, struct{}{}) }
func (p *Proxy) untrack(c net.Conn) { p.conns.Delete(c) }

// upstreamKeepAlive is the TCP keep-alive of upstream connections: Go's
// default (probes after 15 s idle, every 15 s, 9 of them).
var upstreamKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}

// upstreamKeepAliveAfter is how long an upstream connection lives before
// its keep-alive is turned on. A probe cannot go out before 15 s without
// data anyway, so turning it on later changes nothing but the first
// probe of a connection idle from its start (at most this much later),
// and the many short connections (a package manager's) skip the four
// setsockopt calls. A variable for tests.
var upstreamKeepAliveAfter = 2 * time.Second

// trackUpstream tracks an upstream connection (closed by Close) and turns
// its keep-alive on once it has lived upstreamKeepAliveAfter; done stops
// both.
func (p *Proxy) trackUpstream(up net.Conn) (done func()) {
	p.track(up)
	tc, ok := underlying(up).(*net.TCPConn)
	if !ok {
		return func() { p.untrack(up) }
	}
	t := time.AfterFunc(upstreamKeepAliveAfter, func() { tc.SetKeepAliveConfig(upstreamKeepAlive) })
	return func() {
		t.Stop()
		p.untrack(up)
	}
}

// underlying is the connection beneath wrappers that expose it (a TLS
// connection to an upstream proxy, a tunnel with early bytes): the TCP
// connection whose keep-alive and idle time matter.
func underlying(c net.Conn) net.Conn {
	for range 4 {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	return c
}

func (p *Proxy) serveConn(c *net.TCPConn, listener string) {
	p.m.activeConns.Add(1)
	p.track(c)
	defer func() {
		p.untrack(c)
		p.m.activeConns.Add(-1)
		<-p.sem
		p.wg.Done()
	}()
	rec := &Record{
		ConnID:   p.connSeq.Add(1),
		Listener: listener,
		Start:    p.now(),
		Client:   addrPort(c.RemoteAddr()),
		Local:    addrPort(c.LocalAddr()),
	}
	switch listener {
	case ListenerFence:
		p.m.connsFence.Add(1)
		p.handleFence(c, rec)
	case ListenerTransparent:
		p.handleTransparent(c, rec)
	default:
		p.m.connsProxy.Add(1)
		rec = p.handleExplicit(c, rec)
	}
	c.Close()
	rec.guard.done()
	p.finish(rec)
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// finish closes the books on one connection: metrics, the log line, and
// the summary event (rate-limited when it is a denial).
func (p *Proxy) finish(r *Record) {
	if v := r.guard.take(); v != nil {
		// The kernel refused a send by another process after the
		// guard bound the connection, and the connection was closed
		// for it.
		r.Violation, r.silent = v, false
		switch {
		case r.refused:
			// The decision refused the connection anyway (a socket
			// handed on while the proxy decided its connector, say): the
			// decision's reason stands, and the finding still names the
			// sender.
		case v.Code != nil:
			// The decided process itself, with code it mapped since.
			r.Reason = ReasonForeignCode
			r.Foreign = &ForeignProcess{PID: v.PID, Exe: v.Exe, Code: *v.Code}
		default:
			r.Reason = ReasonUndecidedSender
		}
		if r.Outcome == "" {
			r.Outcome = OutcomePolicyDenied // between two requests of a keep-alive connection
		}
		p.m.undecidedSenders.Add(1)
	}
	if r.silent {
		return
	}
	if r.scrub != nil {
		r.Cause = r.scrub(r.Cause)
	}
	r.End = p.now()
	p.observeEndpoint(r)
	switch r.Outcome {
	case OutcomeAllowed:
		p.m.allowed.Add(1)
	case OutcomeUpstreamFailed:
		p.m.allowed.Add(1)
		p.m.upstreamErrors.Add(1)
	case OutcomeBadRequest:
		p.m.badRequests.Add(1)
	case OutcomeBypassDenied:
		p.m.bypass.Add(1)
	case OutcomeClientGone:
		p.m.clientGone.Add(1)
	default:
		p.m.deny(r.Outcome, r.Reason)
	}
	if r.Mismatch != nil {
		p.m.identityMismat.Add(1)
	}
	p.m.bytesUp.Add(uint64(max(r.BytesUp, 0)))
	p.m.bytesDown.Add(uint64(max(r.BytesDown, 0)))
	p.logRecord(r)
	if r.Outcome != OutcomeAllowed && !p.limiter.admit(r, r.End) {
		p.m.eventsSupp.Add(1)
		return
	}
	if r.Count == 0 {
		r.Count = 1
	}
	p.emitRecord(r)
}

func (p *Proxy) emitRecord(r *Record) {
	if p.emitOpenLine(r) {
		return
	}
	for _, ev := range r.events(p.src) {
		p.emitEvent(ev)
	}
}

// logRecord writes one line per connection: at debug when it was allowed
// (a busy `npm install` would flood the journal; every connection is an
// OCSF event anyway), at info when it was denied or failed. A denial is
// the policy doing its work, not something for the operator to act on
// (a confinement probe's deliberate bypass attempts must not read as
// warnings); warnings are kept for the proxy's own trouble.
func (p *Proxy) logRecord(r *Record) {
	lvl := slog.LevelDebug
	if r.Outcome != OutcomeAllowed {
		lvl = slog.LevelInfo
	}
	if !p.log.Enabled(context.Background(), lvl) {
		return
	}
	p.log.LogAttrs(context.Background(), lvl, "connection",
		slog.Uint64("conn", r.ConnID),
		slog.String("listener", r.Listener),
		slog.String("kind", r.Kind),
		slog.String("outcome", r.Outcome),
		slog.String("reason", r.Reason),
		slog.String("cause", r.refusalCause()),
		slog.String("host", r.Host),
		slog.Int("port", r.Port),
		slog.String("binary", r.binary()),
		slog.Int("pid", r.pid()),
		slog.String("entry", r.Entry),
		slog.Int64("generation", r.Generation),
		slog.Int("status", r.Status),
		slog.Int64("bytes_up", r.BytesUp),
		slog.Int64("bytes_down", r.BytesDown),
		slog.Duration("duration", r.End.Sub(r.Start)),
	)
}

func (p *Proxy) flushLoop() {
	t := time.NewTicker(p.cfg.Limits.DenyWindow)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return // Close flushes after the last connection ended
		case <-t.C:
			p.flushDenials(p.now())
		}
	}
}

// flushDenials emits the suppressed denials that are due; a zero now
// (shutdown) emits all of them.
func (p *Proxy) flushDenials(now time.Time) {
	if now.IsZero() {
		now = p.now().Add(p.cfg.Limits.DenyWindow)
	}
	for _, r := range p.limiter.flush(now) {
		p.emitRecord(r)
	}
}

// Close stops every listener, closes every client and upstream
// connection, waits for their goroutines, and emits the denial counts
// still held by the rate limiter.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	for ln := range p.listeners {
		ln.Close()
	}
	servers := p.servers
	p.mu.Unlock()
	for _, s := range servers {
		s.Close()
	}
	p.conns.Range(func(k, _ any) bool {
		k.(net.Conn).Close()
		return true
	})
	p.wg.Wait()
	if p.cfg.Limits.DenyWindow > 0 {
		p.flushDenials(time.Time{})
	}
	p.transport.CloseIdleConnections()
	return nil
}

// lingerDrain bounds what lingerClose reads: above the largest body the
// proxy refuses for its size (MaxSignedBody), so a client still sending
// a refused body finishes sending it instead of meeting a reset.
const lingerDrain = MaxSignedBody + 1<<20

// lingerClose half-closes c (a TCP FIN, or TLS's close_notify on a
// terminated connection), drains what the client still sends for up to
// d (at most lingerDrain bytes), then closes, so a response written
// before the client finished sending is not destroyed by a reset (the
// kernel resets a connection closed with unread data).
func lingerClose(c net.Conn, d time.Duration) {
	c.SetWriteDeadline(time.Now().Add(d))
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(d))
	io.CopyN(io.Discard, c, lingerDrain)
	c.Close()
}
