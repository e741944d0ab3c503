package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"testing"
)

// plainAttributor hides the fake's pid translation.
type plainAttributor struct{ Attributor }

// A denial names the caller by its pid in the sandbox's pid namespace,
// never by the host pid (which helped an agent aim pid reuse); the event
// keeps the host pid. An attributor that cannot translate gives 0.
func TestDenialNamesTheSandboxPID(t *testing.T) {
	echo := newEchoServer(t)
	for _, tc := range []struct {
		name string
		attr Attributor
		want int
	}{
		{"translated", fixedIdentity(identityOf(curlExe, curlSHA)), 242},
		{"untranslatable", plainAttributor{fixedIdentity(identityOf(curlExe, curlSHA))}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Attributor = tc.attr })
			c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", echo.port+1))
			defer c.Close()
			body, _ := io.ReadAll(br)
			var d DenialBody
			if resp.StatusCode != 403 || json.Unmarshal(body, &d) != nil || d.PID != tc.want {
				t.Fatalf("status %d body %s: want 403 naming pid %d", resp.StatusCode, body, tc.want)
			}
			c.Close()
			evs := env.waitEvents(4001, 1)
			if got := num(get(evs[0], "actor", "process", "pid")); got != 4242 {
				t.Errorf("event names pid %d, want the host pid 4242", got)
			}
		})
	}
}

// A socket whose connector the attribution backend has no record of is
// refused as attribution_incomplete, whatever its holder may be; the
// event names the holder.
func TestIncompleteAttributionDenies(t *testing.T) {
	echo := newEchoServer(t)
	attr := &fakeAttributor{fn: func(_, _ netip.AddrPort) (*Identity, error) {
		return nil, &IncompleteError{Holder: identityOf(curlExe, curlSHA), Err: errors.New("record evicted")}
	}}
	env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Attributor = attr })
	c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	defer c.Close()
	body, _ := io.ReadAll(br)
	var d DenialBody
	if resp.StatusCode != 403 || json.Unmarshal(body, &d) != nil || d.Reason != ReasonAttributionIncomplete {
		t.Fatalf("status %d body %s: want 403 %s", resp.StatusCode, body, ReasonAttributionIncomplete)
	}
	// The event names the holder the backend found, though the decision
	// never used it.
	c.Close()
	evs := env.waitEvents(4001, 1)
	if got := get(evs[0], "actor", "process", "file", "path"); got != curlExe {
		t.Errorf("event names %v, want the holder %s", got, curlExe)
	}
}
