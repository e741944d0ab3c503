package proxy

import (
	"errors"
	"fmt"
	"net/netip"
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
