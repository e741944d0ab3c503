package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/eventlog"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

func statusPolicy(u *credUpstream) string {
	return fmt.Sprintf(`version: 1
network_policies:
  tools:
    endpoints:
      - host: allowed.test
        port: %d
        protocol: rest
        rules:
          - allow: {method: GET, path: /ok}
          - allow: {method: GET, path: /missing}
          - allow: {method: GET, path: /drop}
          - allow: {method: POST, path: /v1/**}
      - host: allowed.test
        port: %d
    binaries:
      - path: /usr/bin/curl
`, u.tlsPort, u.plainPort)
}

// readEndpoints is GET /endpoints on the control socket's handler.
func readEndpoints(t *testing.T, p *Proxy) []EndpointStatus {
	t.Helper()
	w := httptest.NewRecorder()
	p.ControlHandler().ServeHTTP(w, httptest.NewRequest("GET", "/endpoints", nil))
	var out struct{ Endpoints []EndpointStatus }
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != 200 {
		t.Fatalf("GET /endpoints: %d %s %v", w.Code, w.Body, err)
	}
	return out.Endpoints
}

// Each result class of an inspected endpoint, driven in turn, is what
// the control socket reports for it next, and each change is an
// Endpoint Status event whose line (as sandbox-supervisor logs prints
// it) names the endpoint and the result — never the credential, the
// body or the upstream's error. The uninspected endpoint has no
// status. Mutation-checked: with observeEndpoint's call in finish
// removed, the first check fails.
func TestEndpointStatusResultClasses(t *testing.T) {
	e := newCredEnv(t)
	up := e.up
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/missing":
			http.Error(w, "no such tool", http.StatusNotFound)
		case "/drop":
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close() // the exchange breaks off: a network failure
		default:
			w.Write([]byte("ok"))
		}
	}
	e.writePolicy(statusPolicy(up))
	if _, err := e.p.Reload("test"); err != nil {
		t.Fatal(err)
	}
	st := readEndpoints(t, e.p)
	// IDs index the normalised policy's endpoints (policy-sync check
	// prints it): the engine names them so.
	pol, err := policy.Parse([]byte(statusPolicy(up)))
	if err != nil {
		t.Fatal(err)
	}
	id := "tools.endpoints[0]"
	if pol.NetworkPolicies["tools"].Endpoints[1].Protocol == policy.ProtocolREST {
		id = "tools.endpoints[1]"
	}
	if len(st) != 1 || st[0].ID != id || st[0].Result != ResultNone || st[0].Address != fmt.Sprintf("allowed.test:%d", up.tlsPort) {
		t.Fatalf("inventory %+v, want only the inspected endpoint, not observed", st)
	}
	cl := e.client(false)
	base := fmt.Sprintf("https://allowed.test:%d", up.tlsPort)
	steps := []struct {
		name   string
		send   func() int
		status int
		want   string
	}{
		{"200", func() int { return getStatus(t, cl, base+"/ok") }, 200, ResultHTTPResponse},
		{"404", func() int { return getStatus(t, cl, base+"/missing") }, 404, ResultUpstreamRejected},
		{"rules", func() int { return getStatus(t, cl, base+"/admin") }, 403, ResultPolicyDenied},
		{"unknown credential", func() int { c, _ := e.do(t, cl, base+"/v1/chat", "NO_SUCH_KEY"); return c }, 403, ResultCredentialUnavailable},
		{"broken exchange", func() int { return getStatus(t, cl, base+"/drop") }, 502, ResultTLSOrNetwork},
		{"200 again", func() int { return getStatus(t, cl, base+"/ok") }, 200, ResultHTTPResponse},
	}
	for _, s := range steps {
		if code := s.send(); code != s.status {
			t.Fatalf("%s: status %d, want %d", s.name, code, s.status)
		}
		waitFor(t, s.name+"'s endpoint status", func() bool {
			st := readEndpoints(t, e.p)
			return len(st) == 1 && st[0].Result == s.want && !st[0].ObservedAt.IsZero()
		})
	}
	// The event follows the status in the same goroutine.
	waitFor(t, "the last Endpoint Status event", func() bool {
		n := 0
		for _, line := range e.rec.Lines() {
			if ev, ok := eventlog.Parse(line); ok && ev.ActivityName == ocsf.ActivityEndpointStatus {
				n++
			}
		}
		return n >= len(steps)
	})
	var results []string
	for _, line := range e.rec.Lines() {
		ev, ok := eventlog.Parse(line)
		if !ok || ev.ActivityName != ocsf.ActivityEndpointStatus {
			continue
		}
		results = append(results, ev.StatusCode)
		l := eventlog.Line(ev)
		if !strings.Contains(l, id) || !strings.HasSuffix(l, ": "+ev.StatusCode) {
			t.Errorf("logs line %q names neither the endpoint nor the result", l)
		}
		for _, secret := range []string{credSecret, "NO_SUCH_KEY", "no such tool", "EOF", "connection reset"} {
			if strings.Contains(string(line), secret) {
				t.Errorf("endpoint status event holds %q: %s", secret, line)
			}
		}
	}
	var want []string
	for _, s := range steps {
		want = append(want, s.want)
	}
	if strings.Join(results, " ") != strings.Join(want, " ") {
		t.Errorf("endpoint status events %v, want one per change %v", results, want)
	}
	// A reload that keeps the endpoint keeps its status; one that
	// changes it starts over.
	e.writePolicy(strings.Replace(statusPolicy(up), "path: /ok}", "path: /ok2}", 1))
	e.p.Reload("test")
	if st := readEndpoints(t, e.p); st[0].Result != ResultHTTPResponse {
		t.Errorf("after a reload that keeps the endpoint: %+v", st)
	}
	e.writePolicy(strings.Replace(statusPolicy(up), "protocol: rest", "protocol: websocket\n        websocket: {text: [{exact: x}]}", 1))
	e.p.Reload("test")
	if st := readEndpoints(t, e.p); st[0].Result != ResultNone || st[0].Protocol != "websocket" {
		t.Errorf("after a reload that changes the endpoint: %+v", st)
	}
}

func getStatus(t *testing.T, cl *http.Client, u string) int {
	t.Helper()
	resp, err := cl.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// endpointResult's classes, record by record (the ones the proxy test
// above cannot reach with REST: an inspector's Invalid refusal, a
// client's malformed request, a tunnel's own record).
func TestEndpointResultClasses(t *testing.T) {
	for _, c := range []struct {
		r    Record
		want string
	}{
		{Record{Outcome: OutcomeBadRequest, Kind: KindHTTP, Status: 400, protocolRefused: true}, ResultPolicyDenied},
		{Record{Outcome: OutcomeBadRequest, Kind: KindHTTP, Status: 400}, ""},
		{Record{Outcome: OutcomeAllowed, Kind: KindConnect, Status: 200}, ""},
		{Record{Outcome: OutcomeAllowed, Kind: KindHTTP, Status: 101}, ResultHTTPResponse},
		{Record{Outcome: OutcomeAllowed, Kind: KindHTTP, Status: 399}, ResultHTTPResponse},
		{Record{Outcome: OutcomeAllowed, Kind: KindHTTP, Status: 400}, ResultUpstreamRejected},
		{Record{Outcome: OutcomeUpstreamFailed, Kind: KindConnect, Status: 502}, ResultTLSOrNetwork},
		{Record{Outcome: OutcomeSSRFDenied, Kind: KindConnect}, ResultPolicyDenied},
		{Record{Outcome: OutcomePolicyDenied, Kind: KindHTTP, CredentialRefused: true, CredentialMisuse: true, Reason: "credential_endpoint_mismatch"}, ResultPolicyDenied},
		{Record{Outcome: OutcomePolicyDenied, Kind: KindHTTP, CredentialRefused: true, Reason: "credentials_revoked"}, ResultCredentialUnavailable},
		{Record{Outcome: OutcomePolicyDenied, Kind: KindHTTP, CredentialRefused: true, Reason: "sigv4_credentials_unavailable"}, ResultCredentialUnavailable},
	} {
		if got := endpointResult(&c.r); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}

// TestEndpointChangesInOrder: a change's callback (the Endpoint Status
// event) runs under the book's lock, so a second request's change is
// not reported while the first one's is, and the last event reported
// is the status in force. Fails if the event is emitted after the lock
// is released (as it was: under load two events came out swapped).
func TestEndpointChangesInOrder(t *testing.T) {
	var b endpointBook
	b.install(1, []EndpointStatus{{ID: "e"}})
	inFirst, secondDone := make(chan struct{}), make(chan struct{})
	var reported []string
	go func() {
		<-inFirst
		b.observe(1, "e", ResultPolicyDenied, time.Now(), func(s EndpointStatus) { reported = append(reported, s.Result) })
		close(secondDone)
	}()
	b.observe(1, "e", ResultUpstreamRejected, time.Now(), func(s EndpointStatus) {
		close(inFirst)
		select {
		case <-secondDone:
			t.Errorf("a second change was reported while the first was being reported")
		case <-time.After(50 * time.Millisecond):
		}
		reported = append(reported, s.Result)
	})
	<-secondDone
	want := []string{ResultUpstreamRejected, ResultPolicyDenied}
	if strings.Join(reported, " ") != strings.Join(want, " ") {
		t.Errorf("reported %v, want %v", reported, want)
	}
	if st := b.snapshot(); st[0].Result != ResultPolicyDenied {
		t.Errorf("status %+v, want the last change in force", st)
	}
}
