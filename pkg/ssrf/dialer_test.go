package ssrf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// spyResolver answers from a script: the i-th lookup of a name gets
// answers[name][min(i, last)], and every lookup is counted.
type spyResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   map[string]int
	err     error
}

func (s *spyResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	n := s.calls[host]
	s.calls[host]++
	if s.err != nil {
		return nil, s.err
	}
	script, ok := s.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "not found", Name: host, IsNotFound: true}
	}
	return slices.Clone(script[min(n, len(script)-1)]), nil
}

func (s *spyResolver) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		n += c
	}
	return n
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestDialerResolve(t *testing.T) {
	spy := &spyResolver{answers: map[string][][]netip.Addr{
		"mixed.test":   {addrs("127.0.0.1", "198.51.100.10", "10.0.0.5", "198.51.100.10", "2001:db8::10", "::ffff:198.51.100.10")},
		"evil.test":    {addrs("169.254.169.254", "127.0.0.1")},
		"empty.test":   {{}},
		"private.test": {addrs("10.0.0.5")},
	}}
	d := &Dialer{Resolver: spy}
	ctx := context.Background()

	got, err := d.Resolve(ctx, "mixed.test", 443, Scope{})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("198.51.100.10:443"), netip.MustParseAddrPort("[2001:db8::10]:443")}
	if !slices.Equal(got, want) {
		t.Errorf("Resolve(mixed, wildcard) = %v; want %v (denied dropped, duplicates removed, order kept)", got, want)
	}
	got, err = d.Resolve(ctx, "mixed.test", 443, Scope{ExactHost: true})
	if err != nil || len(got) != 3 || got[1] != netip.MustParseAddrPort("10.0.0.5:443") {
		t.Errorf("Resolve(mixed, exact) = %v, %v; want the private address kept", got, err)
	}

	// All denied: the first address's DenyError.
	_, err = d.Resolve(ctx, "evil.test", 80, Scope{ExactHost: true})
	var de *DenyError
	if !errors.As(err, &de) || de.Reason != ReasonMetadata || de.Addr.String() != "169.254.169.254:80" {
		t.Errorf("Resolve(evil) = %v; want metadata DenyError for the first address", err)
	}
	_, err = d.Resolve(ctx, "private.test", 80, Scope{})
	if !errors.As(err, &de) || de.Reason != ReasonPrivateNotAllowed {
		t.Errorf("Resolve(private, wildcard) = %v; want private_not_allowed", err)
	}
	if _, err := d.Resolve(ctx, "private.test", 80, Scope{AllowedIPs: pfx("10.0.0.0/24")}); err != nil {
		t.Errorf("Resolve(private, allowed_ips) = %v", err)
	}
	_, err = d.Resolve(ctx, "mixed.test", 443, Scope{OnlyAllowedIPs: true, AllowedIPs: pfx("2001:db8::/32")})
	if err != nil {
		t.Errorf("Resolve(mixed, only 2001:db8::/32) = %v", err)
	}

	// IP literals in any spelling skip the resolver.
	before := spy.total()
	for _, lit := range []string{"0x7f.1", "2130706433", "[::1]", "0177.0.0.1"} {
		_, err := d.Resolve(ctx, lit, 80, Scope{ExactHost: true})
		if !errors.As(err, &de) || de.Reason != ReasonLoopback {
			t.Errorf("Resolve(%s) = %v; want loopback", lit, err)
		}
	}
	if got, err := d.Resolve(ctx, "3325256714", 80, Scope{}); err != nil || got[0].String() != "198.51.100.10:80" {
		t.Errorf("Resolve(3325256714) = %v, %v", got, err)
	}
	if spy.total() != before {
		t.Errorf("IP literals were looked up: %v", spy.calls)
	}

	// Errors that are not denials.
	for _, tc := range []struct {
		d    *Dialer
		host string
		port int
		want string
	}{
		{d, "mixed.test", 0, "port 0 is out of range"},
		{d, "mixed.test", 65536, "port 65536 is out of range"},
		{d, "", 80, "empty host"},
		{&Dialer{}, "mixed.test", 80, "no Resolver"},
		{d, "empty.test", 80, "resolve empty.test: no addresses"},
		{d, "nx.test", 80, "resolve nx.test: lookup nx.test: not found"},
		{&Dialer{Resolver: &spyResolver{err: errors.New("boom")}}, "x.test", 80, "resolve x.test: boom"},
	} {
		_, err := tc.d.Resolve(ctx, tc.host, tc.port, Scope{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &de) {
			t.Errorf("Resolve(%q, %d) = %v; want error containing %q (not a DenyError)", tc.host, tc.port, err, tc.want)
		}
	}
}

// Denied destinations are never connected to: a listener on loopback sees
// nothing when a name resolves there.
func TestDialerDeniedNeverConnects(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	spy := &spyResolver{answers: map[string][][]netip.Addr{"evil.test": {addrs("127.0.0.1")}}}
	d := &Dialer{Resolver: spy}
	for _, host := range []string{"evil.test", "127.0.0.1", "127.1", "0x7f000001", "[::ffff:127.0.0.1]"} {
		c, _, err := d.DialContext(context.Background(), host, port, true, pfx("0.0.0.0/0"))
		var de *DenyError
		if c != nil || !errors.As(err, &de) {
			if c != nil {
				c.Close()
			}
			t.Errorf("DialContext(%s) = %v; want DenyError", host, err)
		}
	}
	l.(*net.TCPListener).SetDeadline(time.Now().Add(50 * time.Millisecond))
	if c, err := l.Accept(); err == nil {
		c.Close()
		t.Fatal("a denied destination was connected to")
	}
}

// attemptContext shares the remaining time between attempts.
func TestAttemptContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, ac := attemptContext(ctx, 2)
	defer ac()
	dl, _ := a.Deadline()
	if left := time.Until(dl); left < 4*time.Second || left > 5*time.Second+100*time.Millisecond {
		t.Errorf("2 attempts of 10s: first gets %v; want about 5s", left)
	}
	b, bc := attemptContext(ctx, 100)
	defer bc()
	dl, _ = b.Deadline()
	if left := time.Until(dl); left < minAttempt-100*time.Millisecond || left > minAttempt {
		t.Errorf("100 attempts of 10s: first gets %v; want the %v minimum", left, minAttempt)
	}
	c, cc := attemptContext(ctx, 1)
	defer cc()
	if dl2, _ := c.Deadline(); !dl2.Equal(func() time.Time { d, _ := ctx.Deadline(); return d }()) {
		t.Errorf("last attempt gets %v; want the whole deadline", dl2)
	}
}

// withTimeout keeps the earlier of the caller's deadline and the
// Dialer's timeout.
func TestWithTimeoutKeepsEarlierDeadline(t *testing.T) {
	d := &Dialer{Timeout: 10 * time.Second}
	short, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ctx, c1 := d.withTimeout(short)
	defer c1()
	want, _ := short.Deadline()
	if got, _ := ctx.Deadline(); !got.Equal(want) {
		t.Errorf("caller's 1s under a 10s Dialer: deadline %v; want the caller's %v", got, want)
	}
	long, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	ctx, c2 := d.withTimeout(long)
	defer c2()
	if got, _ := ctx.Deadline(); time.Until(got) > 10*time.Second {
		t.Errorf("caller's minute under a 10s Dialer: %v left; want at most 10s", time.Until(got))
	}
	ctx, c3 := d.withTimeout(context.Background())
	defer c3()
	if got, ok := ctx.Deadline(); !ok || time.Until(got) > 10*time.Second {
		t.Errorf("no caller deadline under a 10s Dialer: %v %v; want at most 10s", got, ok)
	}
}

func ExampleDialer() {
	hosts, _ := ParseHosts(strings.NewReader("127.0.0.1 sneaky.example.test\n"))
	d := &Dialer{Resolver: hosts, Timeout: time.Second}
	_, _, err := d.DialContext(context.Background(), "sneaky.example.test", 443, true, nil)
	var deny *DenyError
	if errors.As(err, &deny) {
		fmt.Println(deny.Reason)
	}
	// Output: loopback
}
