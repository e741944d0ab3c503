package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// A socket handed on from the process that connected it is allowed only
// when both the holder and the recorded connector are; a connector that
// can no longer be named (it exec'd or exited) denies. The event names
// the attribution backend and the connector.
func TestHandedOnSocketNeedsAnAllowedConnector(t *testing.T) {
	echo := newEchoServer(t)
	for _, tc := range []struct {
		name      string
		connector *Ancestor
		allowed   bool
	}{
		{"no connector recorded", nil, true},
		{"allowed connector", &Ancestor{PID: 17, Exe: curlExe}, true},
		{"unlisted connector", &Ancestor{PID: 17, Exe: "/usr/bin/nc"}, false},
		{"connector no longer nameable", &Ancestor{PID: 17}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := identityOf(curlExe, curlSHA, shellExe)
			id.Backend, id.Connector = "bpf", tc.connector
			env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Attributor = fixedIdentity(id) })
			c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
			defer c.Close()
			if got := resp.StatusCode == 200; got != tc.allowed {
				t.Fatalf("status %d, want allowed=%v", resp.StatusCode, tc.allowed)
			}
			if !tc.allowed {
				body, _ := io.ReadAll(br)
				var d DenialBody
				if err := json.Unmarshal(body, &d); err != nil || d.Reason != ReasonConnectorDenied || d.Binary != curlExe {
					t.Errorf("denial %s: want reason %s for holder %s", body, ReasonConnectorDenied, curlExe)
				}
			}
			c.Close()
			evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(evs) != 1 {
				t.Fatalf("%d network events, want 1", len(evs))
			}
			um, _ := evs[0]["unmapped"].(map[string]any)
			ep, _ := um["egress_proxy"].(map[string]any)
			if ep["attribution"] != "bpf" {
				t.Errorf("event names attribution %v, want bpf", ep["attribution"])
			}
			if conn, ok := ep["connector"].(map[string]any); (tc.connector != nil) != ok || (ok && conn["pid"] != float64(17)) {
				t.Errorf("event connector %v, want %+v", ep["connector"], tc.connector)
			}
		})
	}
}
