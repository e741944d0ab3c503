package upstreamproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"
)

// MaxResponseHeadBytes bounds the proxy's answer to a CONNECT.
const MaxResponseHeadBytes = 16 << 10

// Route decides how a checked destination is dialled (see NoProxy.Route):
// direct is nil when it goes through the proxy.
func (c *Chain) Route(host string, addrs []netip.AddrPort) (direct []netip.AddrPort, entry string) {
	return c.NoProxy.Route(host, addrs)
}

// Target is the CONNECT target for host at the checked address ap: the
// address itself, so the proxy resolves nothing and the tunnel stays
// bound to what the SSRF guard checked; the host name (with ap's port)
// instead when ConnectByHostname is set and host is a name.
func (c *Chain) Target(host string, ap netip.AddrPort) string {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if c.ConnectByHostname {
		if _, err := netip.ParseAddr(host); err != nil && host != "" {
			return net.JoinHostPort(host, strconv.Itoa(int(ap.Port())))
		}
	}
	return ap.String()
}

// ErrorKind classifies a failed chained dial.
type ErrorKind uint8

// Error kinds.
const (
	KindTLS      ErrorKind = iota + 1 // the TLS handshake with an https:// proxy failed
	KindRefused                       // the proxy answered the CONNECT with a non-2xx status
	KindProtocol                      // the answer was not an HTTP response
	KindTimeout                       // no answer in time
)

// Error is a failed CONNECT through the upstream proxy. Its text names
// the proxy (its URL never holds a credential) and the target, and for a
// refusal the status with its standard text, never the proxy's own words.
type Error struct {
	Kind   ErrorKind
	Proxy  string // the proxy's URL
	Target string
	Status int // KindRefused: the proxy's status code
	Err    error
}

func (e *Error) Error() string {
	switch e.Kind {
	case KindRefused:
		return fmt.Sprintf("upstream proxy %s answered %d %s to CONNECT %s", e.Proxy, e.Status, http.StatusText(e.Status), e.Target)
	case KindTLS:
		return fmt.Sprintf("upstream proxy %s: TLS handshake: %v", e.Proxy, e.Err)
	case KindTimeout:
		return fmt.Sprintf("upstream proxy %s: no answer to CONNECT %s in time", e.Proxy, e.Target)
	}
	return fmt.Sprintf("upstream proxy %s: CONNECT %s: %v", e.Proxy, e.Target, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Connect turns conn, a new TCP connection to the proxy, into a tunnel to
// target: TLS with the proxy first for an https:// proxy (verified
// against the system roots plus the CA bundle), then CONNECT target with
// the credential, and a 2xx answer. The returned connection is conn
// itself when nothing else is in the way (an http:// proxy whose answer
// came alone), so a relay keeps the kernel's splice path. On any error
// conn is closed. ctx bounds the whole handshake.
func (c *Chain) Connect(ctx context.Context, conn net.Conn, target string) (net.Conn, error) {
	fail := func(kind ErrorKind, status int, err error) (net.Conn, error) {
		conn.Close()
		if kind != KindRefused && (errors.Is(err, context.DeadlineExceeded) || isTimeout(err)) {
			kind = KindTimeout
		}
		return nil, &Error{Kind: kind, Proxy: c.String(), Target: target, Status: status, Err: err}
	}
	raw := conn
	if d, ok := ctx.Deadline(); ok {
		raw.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if c.tls != nil {
		tc := tls.Client(conn, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fail(KindTLS, 0, err)
		}
		conn = tc
	}
	req := &http.Request{
		Method: http.MethodConnect,
		URL:    &url.URL{Opaque: target},
		Host:   target,
		Header: http.Header{},
	}
	if c.auth != nil {
		req.Header.Set("Proxy-Authorization", c.auth.header)
	}
	if err := req.Write(conn); err != nil {
		return fail(KindProtocol, 0, err)
	}
	br := bufio.NewReaderSize(io.LimitReader(conn, MaxResponseHeadBytes), 4096)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return fail(KindProtocol, 0, err)
	}
	if resp.StatusCode/100 != 2 {
		return fail(KindRefused, resp.StatusCode, nil)
	}
	if !stop() {
		// The deadline passed as the answer came: the connection's
		// deadline is in the past.
		return fail(KindTimeout, 0, context.DeadlineExceeded)
	}
	raw.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		// Bytes of the tunnel that came with the answer (a server that
		// speaks first): they are read before the connection's own.
		early, _ := br.Peek(n)
		return &prefixed{Conn: conn, early: bytes.Clone(early)}, nil
	}
	return conn, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// prefixed is a tunnel whose first bytes came with the proxy's answer.
type prefixed struct {
	net.Conn
	early []byte
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.early) > 0 {
		n := copy(b, p.early)
		p.early = p.early[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// CloseWrite half-closes the connection underneath when it can.
func (p *prefixed) CloseWrite() error {
	if cw, ok := p.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// NetConn is the connection underneath (as tls.Conn's).
func (p *prefixed) NetConn() net.Conn { return p.Conn }
