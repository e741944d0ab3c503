package proxy

import (
	"bufio"
	"fmt"
	"net/http"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// A forwarded http:// request refused by the endpoint's L7 rules is one
// HTTP Activity naming the method and path it asked for (and no Network
// Activity): the denial is a request the proxy read.
func TestForwardL7DenialIsHTTPActivity(t *testing.T) {
	spy := newHeaderSpy(t)
	env := newEnv(t, fmt.Sprintf(`version: 1
network_policies:
  router:
    endpoints:
      - host: allowed.test
        port: %d
        protocol: rest
        rules: [{allow: {method: GET, path: /v1/**}}]
    binaries: [{path: /usr/bin/curl}]
`, spy.port))
	c := env.dial()
	fmt.Fprintf(c, "POST http://allowed.test:%d/v1/items?secret=x HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\n\r\n", spy.port)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("%v %v", resp, err)
	}
	evs := env.waitEvents(ocsf.ClassHTTPActivity, 1)
	if len(evs) != 1 || len(env.rec.ByClass(ocsf.ClassNetworkActivity)) != 0 {
		t.Fatalf("events: %d HTTP, %d network", len(evs), len(env.rec.ByClass(ocsf.ClassNetworkActivity)))
	}
	e := evs[0]
	if get(e, "http_request", "http_method") != "POST" || get(e, "http_request", "url", "path") != "/v1/items" ||
		get(e, "status_code") != OutcomePolicyDenied || get(e, "status_detail") != policy.L7NoRuleMatched ||
		get(e, "http_response", "code") != float64(403) || get(e, "action") != "Denied" {
		t.Errorf("event: %v", e)
	}
}
