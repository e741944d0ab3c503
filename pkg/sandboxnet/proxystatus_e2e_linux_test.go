//go:build linux

package sandboxnet

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// proxyStatusScript makes, from inside the sandbox, a CONNECT the policy
// refuses (denied.test is in no entry) and an inspected request its L7
// rule refuses (a POST under read-only), and prints what each client
// shows of the refusal.
const proxyStatusScript = `
B=https://allowed.test:8443
field() { grep -i "^$1" "$2" | head -1 | tr -d '\r'; }
curl -sS -v --max-time 20 -o /dev/null https://denied.test/ 2>/tmp/v
printf 'connect_line=%s\n' "$(field '< HTTP/1.1 403' /tmp/v)"
printf 'connect_status=%s\n' "$(field '< Proxy-Status:' /tmp/v)"
printf 'connect_curl=%s\n' "$(field 'curl:' /tmp/v)"
curl -sS --http1.1 -D /tmp/h1 -o /dev/null --max-time 20 -X POST -d x $B/echo/a
printf 'inspected_h1=%s\n' "$(field 'Proxy-Status:' /tmp/h1)"
curl -sS --http2 -D /tmp/h2 -o /dev/null --max-time 20 -X POST -d x $B/echo/b
printf 'inspected_h2=%s\n' "$(field 'Proxy-Status:' /tmp/h2)"
printf 'python_connect=%s\n' "$(python3 -c '
import urllib.request
try:
    urllib.request.urlopen("https://denied.test/", timeout=20)
except Exception as e:
    print(e)' 2>&1 | tail -1)"
printf 'python_inspected=%s\n' "$(python3 -c '
import urllib.request
try:
    urllib.request.urlopen(urllib.request.Request("https://allowed.test:8443/echo/py", data=b"x", method="POST"), timeout=20)
except Exception as e:
    print(e)' 2>&1 | tail -1)"
printf 'go_connect=%s\n' "$(GOCLIENT=https://denied.test/ @HELPER@ -test.run='^TestHelperGoClient$' 2>&1 | grep '^go=' | cut -c4-)"
`

// TestHelperGoClient is a Go net/http client run inside the sandbox (a
// copy of this test binary): it prints the error of a GET of $GOCLIENT
// through the proxy. It does nothing unless GOCLIENT is set.
func TestHelperGoClient(t *testing.T) {
	u := os.Getenv("GOCLIENT")
	if u == "" {
		return
	}
	cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}, Timeout: 20 * time.Second}
	resp, err := cl.Get(u)
	if err != nil {
		fmt.Printf("go=%v\n", err)
		return
	}
	resp.Body.Close()
	fmt.Printf("go=%d\n", resp.StatusCode)
}

// Every 403 carries Proxy-Status (RFC 9209) with the reason and the
// policy entry, on a refused CONNECT (whose body clients drop) and on a
// refused inspected request over HTTP/1.1 and HTTP/2; Python's and Go's
// errors name the reason through the status line (HTTP/1.1 has one).
func TestProxyStatusOnDenialsInSandbox(t *testing.T) {
	l := newInspectLab(t)
	r, _ := l.run(strings.ReplaceAll(proxyStatusScript, "@HELPER@", l.helper))
	want := map[string]string{
		"connect_line":     `< HTTP/1.1 403 Forbidden (policy_denied: no_matching_endpoint)`,
		"connect_status":   `< Proxy-Status: palisade-egress-proxy; error=http_request_denied; details="policy_denied reason=no_matching_endpoint host=denied.test port=443 binary=/usr/bin/curl"`,
		"inspected_h1":     `Proxy-Status: palisade-egress-proxy; error=http_request_denied; details="policy_denied reason=l7_access_denied policy=registry host=allowed.test port=8443 binary=/usr/bin/curl method=POST path=/echo/a"`,
		"inspected_h2":     `proxy-status: palisade-egress-proxy; error=http_request_denied; details="policy_denied reason=l7_access_denied policy=registry host=allowed.test port=8443 binary=/usr/bin/curl method=POST path=/echo/b"`,
		"python_connect":   `<urlopen error Tunnel connection failed: 403 Forbidden (policy_denied: no_matching_endpoint)>`,
		"python_inspected": `HTTP Error 403: Forbidden (policy_denied: l7_access_denied)`,
		"go_connect":       `Get "https://denied.test/": Forbidden (policy_denied: no_matching_endpoint)`,
	}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("%s:\n got %q\nwant %q", k, r[k], v)
		}
	}
	t.Logf("curl's own message for the refused CONNECT: %q", r["connect_curl"])
}
