package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// Issue 29 item 5: a client that closed its connection before it could
// be attributed (its process exited mid-request) is client_gone, not a
// policy_denied/attribution_failed denial: a Close event without action
// or rule, the client_gone counter, no denial counted. Nothing is
// dialled either way. A client still connected when attribution fails
// is denied as before (TestDenialsAreStructuredAndNothingIsTunnelled).
func TestClientGoneBeforeAttribution(t *testing.T) {
	echo := newEchoServer(t)
	called, release := make(chan struct{}, 1), make(chan struct{})
	attr := &fakeAttributor{fn: func(_, _ netip.AddrPort) (*Identity, error) {
		called <- struct{}{}
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return nil, errors.New("no sandbox process holds the connection")
	}}
	env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Attributor = attr })
	before := echo.accepted.Load()
	c := env.dial()
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", echo.port)
	select {
	case <-called:
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy never tried to attribute the connection")
	}
	c.Close()
	time.Sleep(100 * time.Millisecond) // the FIN reaches the proxy's socket
	close(release)

	evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
	if len(evs) != 1 {
		t.Fatalf("network events: %d, want 1", len(evs))
	}
	ev := evs[0]
	if get(ev, "status_code") != OutcomeClientGone || get(ev, "activity_name") != "Close" ||
		get(ev, "action_id") != nil || get(ev, "firewall_rule") != nil {
		t.Errorf("event: status_code %v, activity %v, action_id %v, firewall_rule %v; want client_gone, Close, no action, no rule",
			get(ev, "status_code"), get(ev, "activity_name"), get(ev, "action_id"), get(ev, "firewall_rule"))
	}
	cs := env.p.Counters()
	if cs.ClientGone != 1 || cs.Denied != 0 {
		t.Errorf("counters: client_gone %d, denied %d; want 1 and 0", cs.ClientGone, cs.Denied)
	}
	if n := echo.accepted.Load() - before; n != 0 {
		t.Errorf("upstream saw %d connections from a client that was never attributed", n)
	}
}

// blockingGuard fails every binding, after the test lets it: the client
// closes (or not) between the attribution and the binding, as a client
// whose socket closed took the kernel's placeholder with it.
type blockingGuard struct {
	called  chan struct{}
	release chan struct{}
}

func (g *blockingGuard) Guard(*Identity, func(SendViolation)) (func(), error) {
	g.called <- struct{}{}
	select {
	case <-g.release:
	case <-time.After(5 * time.Second):
	}
	return nil, errors.New("attribution: the send guard does not hold this connection: socket 7 is not under it")
}

// A client that closes after it was attributed but before the send
// guard binds its socket is client_gone, as one that closed before the
// attribution is (TestClientGoneBeforeAttribution), on the transparent
// listener and the explicit proxy alike: the binding fails because the
// socket closed, and a second lookup finds no process holding it. It was
// attribution_incomplete, a refusal. A client whose socket a process
// still holds stays refused (attribution_incomplete) though it
// half-closed: the guard's refusal of a socket it will not hold (one
// reconnected after a disconnect) must not read as a client gone.
// Nothing is dialled either way. Fails with identify's gone check
// removed (the gone cases), or with gone not asking the attributor again
// (the half-closed, still held cases).
func TestClientGoneBeforeGuardBinds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		transparent bool
		held        bool // a process still holds the socket after the client's FIN
	}{
		{"transparent, gone", true, false},
		{"transparent, half-closed and held", true, true},
		{"explicit, gone", false, false},
		{"explicit, half-closed and held", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo := newEchoServer(t)
			var lookups atomic.Int32
			attr := &fakeAttributor{fn: func(_, _ netip.AddrPort) (*Identity, error) {
				if lookups.Add(1) > 1 && !tc.held {
					return nil, errors.New("attribution: no sandbox process holds the connection: no socket")
				}
				return identityOf(curlExe, curlSHA, shellExe), nil
			}}
			g := &blockingGuard{called: make(chan struct{}, 1), release: make(chan struct{})}
			te := newTransparentEnv(t, func(int) string { return policyYAML(echo.port, "") }, "127.0.0.1",
				func(c *Config) { c.Attributor, c.Guard = attr, g })
			te.setOrig(netip.AddrPortFrom(te.m.Synthetic, uint16(echo.port)))
			te.dialer.hosts["allowed.test"] = netip.MustParseAddr("127.0.0.1")
			before := echo.accepted.Load()
			var c net.Conn
			var err error
			if tc.transparent {
				c, err = te.dialT()
			} else {
				c, err = net.Dial("tcp", te.addr)
				if err == nil {
					fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", echo.port)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			select {
			case <-g.called:
			case <-time.After(5 * time.Second):
				t.Fatal("the proxy never tried to hold the connection")
			}
			if tc.held {
				c.(*net.TCPConn).CloseWrite()
			} else {
				c.Close()
			}
			time.Sleep(100 * time.Millisecond) // the FIN reaches the proxy's socket
			close(g.release)

			evs := te.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(evs) != 1 {
				t.Fatalf("network events: %d, want 1", len(evs))
			}
			ev := evs[0]
			cs := te.p.Counters()
			if tc.held {
				if get(ev, "status_code") != OutcomePolicyDenied || get(ev, "unmapped", "egress_proxy", "reason") != ReasonAttributionIncomplete {
					t.Errorf("event: %v %v, want policy_denied attribution_incomplete", get(ev, "status_code"), get(ev, "unmapped", "egress_proxy", "reason"))
				}
				if cs.ClientGone != 0 || cs.Denied != 1 {
					t.Errorf("counters: client_gone %d, denied %d; want 0 and 1", cs.ClientGone, cs.Denied)
				}
			} else {
				if get(ev, "status_code") != OutcomeClientGone || get(ev, "activity_name") != "Close" ||
					get(ev, "action_id") != nil || get(ev, "firewall_rule") != nil {
					t.Errorf("event: status_code %v, activity %v, action_id %v, firewall_rule %v; want client_gone, Close, no action, no rule",
						get(ev, "status_code"), get(ev, "activity_name"), get(ev, "action_id"), get(ev, "firewall_rule"))
				}
				if cs.ClientGone != 1 || cs.Denied != 0 {
					t.Errorf("counters: client_gone %d, denied %d; want 1 and 0", cs.ClientGone, cs.Denied)
				}
			}
			if n := echo.accepted.Load() - before; n != 0 {
				t.Errorf("upstream saw %d connections from a client that was never held", n)
			}
		})
	}
}
