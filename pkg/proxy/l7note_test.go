package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// A policy whose entries carry L7 constraints loads without the old
// "not enforced on CONNECT" warning: tunnels to them are inspected.
func TestL7RulesLoadWithoutWarning(t *testing.T) {
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
	if d != "" {
		t.Fatalf("status_detail %q", d)
	}
	// A policy without L7 constraints says nothing of the kind.
	e2 := newEnv(t, policyYAML(8080, ""))
	if d, _ := e2.rec.ByClass(ocsf.ClassDeviceConfigStateChange)[0]["status_detail"].(string); d != "" {
		t.Fatalf("status_detail %q for a policy without L7 rules", d)
	}
}

// Forwarded http:// requests are held to the endpoint's L7 rules before
// anything reaches upstream; a CONNECT tunnel to the same endpoint is
// allowed at L4 and says its requests were not inspected.
func TestForwardHTTPEnforcesL7Rules(t *testing.T) {
	spy := newHeaderSpy(t)
	yaml := fmt.Sprintf(`version: 1
network_policies:
  router:
    name: router
    endpoints:
      - host: allowed.test
        port: %d
        protocol: rest
        rules:
          - allow:
              method: POST
              path: /v1/chat/completions
    binaries:
      - path: /usr/bin/curl
`, spy.port)
	env := newEnv(t, yaml)
	send := func(method, path string) (int, map[string]any) {
		c := env.dial()
		fmt.Fprintf(c, "%s http://allowed.test:%d%s HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\n\r\n", method, spy.port, path)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		if resp.StatusCode == 403 {
			json.NewDecoder(resp.Body).Decode(&body)
		}
		resp.Body.Close()
		return resp.StatusCode, body
	}
	if code, _ := send("POST", "/v1/chat/completions"); code != 200 {
		t.Fatalf("allowed route: %d", code)
	}
	// Both readings of an encoded "/" are the allowed route.
	if code, _ := send("POST", "/v1/chat%2Fcompletions"); code != 200 {
		t.Fatalf("allowed route with an encoded slash: %d", code)
	}
	spy.mu.Lock()
	uri := spy.uri
	spy.mu.Unlock()
	if uri != "/v1/chat%2Fcompletions" {
		t.Errorf("upstream got %q, want the encoded slash kept", uri)
	}
	for _, c := range []struct{ method, path, reason string }{
		{"GET", "/v1/chat/completions", policy.L7NoRuleMatched},
		{"POST", "/v1/admin", policy.L7NoRuleMatched},
		{"POST", "/v1/chat/completions/../../admin", policy.L7NoRuleMatched}, // normalised to /v1/admin
		{"POST", "/v1/chat/completions;x", policy.L7AmbiguousPath},           // Tomcat reads /v1/chat/completions
		{"POST", "/v1/chat/completions/..;/x", policy.L7NoRuleMatched},       // no reading is allowed
		{"POST", "/v1/chat/x%2F..%2Fcompletions", policy.L7AmbiguousPath},    // data, or /v1/chat/completions
		{"POST", "/v1/chat%00/completions", policy.L7AmbiguousPath},
	} {
		code, body := send(c.method, c.path)
		if code != 403 || body["error"] != "policy_denied" || body["reason"] != c.reason || body["policy"] != "router" {
			t.Errorf("%s %s: %d %v, want 403 policy_denied %s", c.method, c.path, code, body, c.reason)
		}
	}
	spy.mu.Lock()
	n := spy.count
	spy.mu.Unlock()
	if n != 2 {
		t.Errorf("upstream saw %d requests, want only the two allowed ones", n)
	}
	// CONNECT: allowed at L4, then inspected (the client sent nothing).
	c, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", spy.port))
	c.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
	if b, _ := json.Marshal(evs[len(evs)-1]); !strings.Contains(string(b), `"l7":"enforced"`) {
		t.Errorf("CONNECT event does not say L7 is enforced: %s", b)
	}
	for _, e := range env.rec.ByClass(ocsf.ClassHTTPActivity) {
		if b, _ := json.Marshal(e); !strings.Contains(string(b), `"l7":"enforced"`) {
			t.Errorf("forwarded request event does not say L7 was enforced: %s", b)
		}
	}
}
