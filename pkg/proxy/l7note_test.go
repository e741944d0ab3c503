package proxy

import (
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// A policy whose entries carry L7 constraints loads, but its load event
// says those constraints are not enforced and names the entries.
func TestL7RulesNotEnforcedIsAnnounced(t *testing.T) {
	yaml := policyYAML(8080, `  hub:
    name: hub
    endpoints:
      - host: hub.test
        port: 80
        protocol: rest
        rules:
          - allow:
              method: POST
              path: /v1/chat/completions
    binaries:
      - path: /usr/bin/curl
`)
	e := newEnv(t, yaml)
	evs := e.rec.ByClass(ocsf.ClassDeviceConfigStateChange)
	if len(evs) != 1 {
		t.Fatalf("%d load events", len(evs))
	}
	d, _ := evs[0]["status_detail"].(string)
	if !strings.Contains(d, "not enforced") || !strings.Contains(d, "hub") || strings.Contains(d, "web") {
		t.Fatalf("status_detail %q", d)
	}
	// A policy without L7 constraints says nothing of the kind.
	e2 := newEnv(t, policyYAML(8080, ""))
	if d, _ := e2.rec.ByClass(ocsf.ClassDeviceConfigStateChange)[0]["status_detail"].(string); d != "" {
		t.Fatalf("status_detail %q for a policy without L7 rules", d)
	}
}
