package ssrf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// DefaultDialTimeout bounds resolution plus connection when Dialer.Timeout
// is zero.
const DefaultDialTimeout = 10 * time.Second

// minAttempt is the least time a connection attempt gets when several
// addresses share the timeout (as in package net).
const minAttempt = 2 * time.Second

// Dialer resolves a host once, checks every address with its Guard and
// connects to the checked addresses in order — the net.Conn is always to an
// address that passed the Guard; nothing is re-resolved between check and
// dial. A Dialer must not be modified while in use.
type Dialer struct {
	// Resolver looks up names; required (IP literals need none).
	Resolver Resolver
	// Guard checks every address; nil means the zero Guard.
	Guard *Guard
	// Timeout bounds resolution and connection together; 0 means
	// DefaultDialTimeout. The context's deadline, if earlier, wins.
	Timeout time.Duration
	// Control, if set, is called on each socket before it connects (as
	// net.Dialer.Control), e.g. to set a firewall mark.
	Control func(network, address string, c syscall.RawConn) error
	// KeepAlive is net.Dialer.KeepAlive: 0 enables Go's default TCP
	// keep-alive on every connection, negative leaves it off (for a
	// caller that enables it itself on connections that last).
	KeepAlive time.Duration
}

// DialContext connects to host:port for an endpoint whose host is exact
// (exactHost) or a wildcard, with the endpoint's allowed_ips (see
// Guard.Check). It returns the connection and the address it reached.
// A host that is an IP literal in any spelling (see ParseHostLiteral) is
// used without DNS. If the Guard denies every address the error is the
// *DenyError of the first one.
func (d *Dialer) DialContext(ctx context.Context, host string, port int, exactHost bool, allowed []netip.Prefix) (net.Conn, netip.AddrPort, error) {
	return d.DialScope(ctx, host, port, Scope{ExactHost: exactHost, AllowedIPs: allowed})
}

// DialScope is DialContext with the endpoint's full Scope.
func (d *Dialer) DialScope(ctx context.Context, host string, port int, s Scope) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	addrs, err := d.resolve(ctx, host, port, s)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	return d.dial(ctx, host, port, addrs)
}

// DialResolved connects to the first of addrs that answers, in order,
// sharing the Dialer's timeout among them as DialScope does; host and
// port only label the error. addrs must be what Resolve returned for
// the destination (or a subset of it), or an address the Guard does not
// govern because the operator named it (an upstream proxy's): this
// method checks nothing itself.
func (d *Dialer) DialResolved(ctx context.Context, host string, port int, addrs []netip.AddrPort) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	if len(addrs) == 0 {
		return nil, netip.AddrPort{}, fmt.Errorf("ssrf: connect %s port %d: no address", host, port)
	}
	return d.dial(ctx, host, port, addrs)
}

func (d *Dialer) dial(ctx context.Context, host string, port int, addrs []netip.AddrPort) (net.Conn, netip.AddrPort, error) {
	var errs []error
	for i, ap := range addrs {
		actx, acancel := attemptContext(ctx, len(addrs)-i)
		nd := net.Dialer{Control: d.control(ap), KeepAlive: d.KeepAlive}
		c, err := nd.DialContext(actx, "tcp", ap.String())
		acancel()
		if err == nil {
			return c, ap, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.AddrPort{}, fmt.Errorf("ssrf: connect %s port %d: %w", host, port, errors.Join(errs...))
}

// control is the net.Dialer Control for a connection to ap: the
// Dialer's own Control, then eagerConnect.
func (d *Dialer) control(ap netip.AddrPort) func(network, address string, c syscall.RawConn) error {
	eager := eagerConnect(ap)
	if eager == nil {
		return d.Control
	}
	return func(network, address string, c syscall.RawConn) error {
		if d.Control != nil {
			if err := d.Control(network, address, c); err != nil {
				return err
			}
		}
		return eager(network, address, c)
	}
}

// Resolve returns the addresses of host:port that the Guard admits for the
// scope, in resolver order without duplicates, or the *DenyError of the
// first address if none is admitted. Callers that connect themselves must
// connect only to these addresses.
func (d *Dialer) Resolve(ctx context.Context, host string, port int, s Scope) ([]netip.AddrPort, error) {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	return d.resolve(ctx, host, port, s)
}

// withTimeout bounds ctx by the Dialer's timeout. A ctx that already
// ends no later is returned as it is (with a no-op cancel): the bound is
// the same, without a timer and a context per connection.
func (d *Dialer) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	t := d.Timeout
	if t <= 0 {
		t = DefaultDialTimeout
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= t {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, t)
}

func (d *Dialer) resolve(ctx context.Context, host string, port int, s Scope) ([]netip.AddrPort, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("ssrf: port %d is out of range 1-65535", port)
	}
	if host == "" {
		return nil, errors.New("ssrf: empty host")
	}
	var addrs []netip.Addr
	if a, ok := ParseHostLiteral(host); ok {
		addrs = []netip.Addr{a}
	} else {
		if d.Resolver == nil {
			return nil, errors.New("ssrf: Dialer has no Resolver")
		}
		var err error
		addrs, err = d.Resolver.LookupNetIP(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("ssrf: resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("ssrf: resolve %s: no addresses", host)
		}
	}
	return d.Admit(addrs, port, s)
}

// Admit returns the addresses of addrs (already resolved: a policy DNS
// mapping's) that the Guard admits on port for the scope, in order
// without duplicates, or the *DenyError of the first one if none is
// admitted. Resolve is this after the lookup.
func (d *Dialer) Admit(addrs []netip.Addr, port int, s Scope) ([]netip.AddrPort, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("ssrf: port %d is out of range 1-65535", port)
	}
	if len(addrs) == 0 {
		return nil, errors.New("ssrf: no address")
	}
	var firstDeny error
	out := make([]netip.AddrPort, 0, len(addrs))
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(port))
		if err := d.Guard.CheckScope(ap, s); err != nil {
			if firstDeny == nil {
				firstDeny = err
			}
			continue
		}
		if !containsAddrPort(out, ap) {
			out = append(out, ap)
		}
	}
	if len(out) == 0 {
		return nil, firstDeny
	}
	return out, nil
}

func containsAddrPort(list []netip.AddrPort, ap netip.AddrPort) bool {
	for _, x := range list {
		if x == ap {
			return true
		}
	}
	return false
}

// attemptContext gives one of left remaining attempts its share of the
// time left, at least minAttempt when that much remains. The last
// attempt (the only one, for a name with one address) gets ctx itself,
// with a no-op cancel: its whole time, without another context to make
// and cancel per connection.
func attemptContext(ctx context.Context, left int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if left <= 1 {
		return ctx, func() {}
	}
	if !ok {
		return context.WithCancel(ctx)
	}
	remaining := time.Until(deadline)
	share := remaining / time.Duration(left)
	if share < minAttempt {
		share = min(minAttempt, remaining)
	}
	return context.WithTimeout(ctx, share)
}
