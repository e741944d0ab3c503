//go:build linux

package sandboxnet

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/policydns"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The acceptance of issue 28 in a real sandbox: clients that ignore the
// proxy variables — Node's built-in fetch (/usr/bin/node), a Go program
// whose Transport.Proxy is nil, curl --noproxy '*' — reach an inspected
// HTTPS endpoint by name through policy DNS and the transparent listener,
// with its L7 rules enforced; a name outside the policy is NXDOMAIN with a
// dns_denied event naming the client (each asks for a name of its own:
// the limiter reports the first refusal of a name in a window, and only
// that one is attributed); a direct connection to the real address is fenced;
// domain fronting (SNI) and a name resolving to loopback are refused as
// on CONNECT.

// transparentNetwork is the inspect lab's registry entry (read-only) with
// node and the Go helper among its binaries.
const transparentNetwork = `  registry:
    endpoints:
      - host: allowed.test
        port: 8443
        protocol: rest
        access: read-only
    binaries:
      - path: /usr/bin/curl
      - path: /usr/bin/node
      - path: %s
`

const transparentScript = `
B=https://allowed.test:8443
c() { n=$1; shift; printf '%s=' "$n"; curl --noproxy '*' -s -o /tmp/b -w '%{http_code}' --max-time 20 "$@"; printf ' %s\n' "$(tr -d '\n' < /tmp/b)"; }
c curl_get "$B/echo/curl"
c curl_post -X POST -d x "$B/echo/curl"
printf 'curl_denied=%s\n' "$(curl --noproxy '*' -sS --max-time 10 -o /dev/null https://denied-curl.test/ 2>&1)"
node -e '
const B = process.argv[1];
const why = (e) => (e.cause && (e.cause.code || e.cause.message)) || e.message;
(async () => {
  try { const r = await fetch(B + "/echo/node"); console.log("node_get=" + r.status + " " + (await r.json()).path); }
  catch (e) { console.log("node_get=error " + why(e)); }
  try { const r = await fetch(B + "/echo/node", { method: "POST", body: "x" }); const j = await r.json();
        console.log("node_post=" + r.status + " " + j.error + " " + j.reason); }
  catch (e) { console.log("node_post=error " + why(e)); }
  try { await fetch("https://denied-node.test/"); console.log("node_denied=reached"); }
  catch (e) { console.log("node_denied=" + why(e)); }
  try { await fetch("https://allowed.test/"); console.log("node_refused=reached"); }
  catch (e) { console.log("node_refused=" + why(e)); }
})();' "$B"
GODIRECT=$B @HELPER@ -test.run='^TestHelperGoDirect$' 2>&1 | grep '^go_'
printf 'getent=%s\n' "$(getent ahostsv4 allowed.test | head -1 | cut -d' ' -f1)"
printf 'hosts=%s\n' "$(grep -v '^#' /etc/hosts | tr '\t\n' ' ')"
printf 'resolv=%s\n' "$(grep -v '^#' /etc/resolv.conf | tr '\n' ' ')"
s=$(date +%s%N); curl --noproxy '*' -sk -o /dev/null --max-time 10 https://REAL:8443/echo/direct; rc=$?; e=$(date +%s%N)
printf 'direct=%s %s\n' "$rc" "$(( (e-s)/1000000 ))"
curl --noproxy '*' -sk -o /dev/null --max-time 10 --connect-to fronted.test:443:allowed.test:443 https://fronted.test/sni; printf 'fronted=%s\n' "$?"
curl --noproxy '*' -sk -o /dev/null --max-time 10 --connect-to fronted.test:8443:allowed.test:8443 https://fronted.test:8443/echo/sni; printf 'fronted_inspected=%s\n' "$?"
curl --noproxy '*' -s -o /dev/null --max-time 10 http://loopy.test/; printf 'loopy=%s\n' "$?"
`

// TestHelperGoDirect is a Go net/http client with Transport.Proxy nil run
// inside the sandbox (a copy of this test binary): a GET and a POST of
// $GODIRECT/echo/go and a GET of https://denied-go.test/. It does nothing
// unless GODIRECT is set.
func TestHelperGoDirect(t *testing.T) {
	base := os.Getenv("GODIRECT")
	if base == "" {
		return
	}
	cl := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 20 * time.Second}
	do := func(name, method, url string) {
		req, _ := http.NewRequest(method, url, strings.NewReader("x"))
		resp, err := cl.Do(req)
		if err != nil {
			fmt.Printf("%s=error %v\n", name, err)
			return
		}
		var body map[string]any
		json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body)
		resp.Body.Close()
		fmt.Printf("%s=%d %v %v\n", name, resp.StatusCode, body["error"], body["reason"])
	}
	do("go_get", "GET", base+"/echo/go")
	do("go_post", "POST", base+"/echo/go")
	do("go_denied", "GET", "https://denied-go.test/")
}

func TestTransparentHTTPSInSandbox(t *testing.T) {
	testutil.RequireCommand(t, "/usr/bin/node")
	l := newInspectLab(t)
	head := labPolicy[:strings.Index(labPolicy, "%s")]
	head = strings.Replace(head, "/etc]", "/etc, "+l.helperDir+"]", 1)
	l.write(head + fmt.Sprintf(transparentNetwork, l.helper))
	real := l.inet.V4[0].String()
	script := strings.NewReplacer("@HELPER@", l.helper, "REAL", real).Replace(transparentScript)
	r, _ := l.run(script)

	check := func(name, want string) {
		t.Helper()
		if !strings.HasPrefix(r[name], want) {
			t.Errorf("%s = %q, want prefix %q", name, r[name], want)
		}
	}
	check("curl_get", `200 {"method":"GET","path":"/echo/curl"`)
	check("curl_post", `403 {"error":"policy_denied","host":"allowed.test","port":8443,"binary":"/usr/bin/curl"`)
	check("curl_denied", "curl: (6) Could not resolve host: denied-curl.test")
	check("node_get", "200 /echo/node")
	check("node_post", "403 policy_denied l7_access_denied")
	check("node_denied", "ENOTFOUND")
	// allowed.test:443 is curl's only: node is refused, and sees a reset.
	if r["node_refused"] == "" || strings.HasPrefix(r["node_refused"], "reached") {
		t.Errorf("node_refused = %q, want a failure", r["node_refused"])
	}
	check("go_get", "200 ")
	check("go_post", "403 policy_denied l7_access_denied")
	check("go_denied", `error Get "https://denied-go.test/": dial tcp: lookup denied-go.test`)
	if a, err := netip.ParseAddr(r["getent"]); err != nil || !policydns.SyntheticRange.Contains(a) {
		t.Errorf("getent: allowed.test is %q, want a synthetic address", r["getent"])
	}
	if !strings.Contains(r["hosts"], "127.0.0.1 localhost") || strings.Contains(r["hosts"], ".test") {
		t.Errorf("/etc/hosts in the sandbox: %q, want loopback names only", r["hosts"])
	}
	if !strings.HasPrefix(r["resolv"], "nameserver 10.") || strings.Count(r["resolv"], "nameserver") != 1 {
		t.Errorf("/etc/resolv.conf in the sandbox: %q, want the policy DNS only", r["resolv"])
	}
	var rc, ms int
	fmt.Sscan(r["direct"], &rc, &ms)
	if rc == 0 || ms > 5000 {
		t.Errorf("direct connection to %s: curl exit %d after %d ms, want an immediate failure", real, rc, ms)
	}
	for _, k := range []string{"fronted", "fronted_inspected", "loopy"} {
		if r[k] == "0" || r[k] == "" {
			t.Errorf("%s: curl exit %q, want a failure", k, r[k])
		}
	}

	// Upstream: the GETs only. No POST, nothing fronted, nothing direct.
	seen := map[string]bool{}
	for len(l.seen) > 0 {
		seen[<-l.seen] = true
	}
	for _, want := range []string{"GET /echo/curl", "GET /echo/node", "GET /echo/go"} {
		if !seen[want] {
			t.Errorf("upstream did not see %s (saw %v)", want, seen)
		}
	}
	for s := range seen {
		if !strings.HasPrefix(s, "GET /echo/") || strings.HasSuffix(s, "/direct") || strings.HasSuffix(s, "/sni") {
			t.Errorf("upstream saw %q", s)
		}
	}
	for _, h := range l.inet.Hits() {
		if h.SNI == "fronted.test" || h.Server == "dns" {
			t.Errorf("reached the internet: %+v", h)
		}
	}
	checkTransparentEvents(t, l.eventLines(), l.helper)
}

// checkTransparentEvents: each client's refused POST is an HTTP Activity
// marked transparent; denied-CLIENT.test is a dns_denied naming the
// client that asked (and no other); the fronted ClientHello an
// sni_mismatch; loopy.test an SSRF refusal of its name (loopback); the
// direct connection a bypass.
func checkTransparentEvents(t *testing.T, evs []map[string]any, helper string) {
	t.Helper()
	posts, askers := map[string]bool{}, map[string]string{}
	var dnsDenied, sni, ssrf, bypass int
	exe := func(e map[string]any) string {
		a, _ := e["actor"].(map[string]any)
		p, _ := a["process"].(map[string]any)
		f, _ := p["file"].(map[string]any)
		path, _ := f["path"].(string)
		return path
	}
	for _, e := range evs {
		u, _ := e["unmapped"].(map[string]any)
		ep, _ := u["egress_proxy"].(map[string]any)
		pd, _ := u["policy_dns"].(map[string]any)
		dst, _ := e["dst_endpoint"].(map[string]any)
		switch {
		case e["class_uid"] == float64(4002) && e["status_code"] == "policy_denied":
			req, _ := e["http_request"].(map[string]any)
			tr, _ := ep["transparent"].(map[string]any)
			if ep["listener"] != "transparent" || req["http_method"] != "POST" || tr["name"] != "allowed.test" {
				b, _ := json.Marshal(e)
				t.Errorf("refused request not marked transparent: %s", b)
				continue
			}
			posts[exe(e)] = true
		case pd != nil && e["status_code"] == policydns.StatusDenied && strings.HasPrefix(fmt.Sprint(dst["domain"]), "denied-"):
			dnsDenied++
			if pd["rcode"] != "NXDOMAIN" || e["action"] != "Denied" {
				t.Errorf("dns_denied event: %v", e)
			}
			if x := exe(e); x != "" {
				if prev := askers[dst["domain"].(string)]; prev != "" && prev != x {
					t.Errorf("dns_denied events for %s name %s and %s", dst["domain"], prev, x)
				}
				askers[dst["domain"].(string)] = x
			}
		case pd != nil && e["status_code"] == policydns.StatusSSRFDenied && dst["domain"] == "loopy.test":
			ssrf++
			if e["status_detail"] != "loopback" {
				t.Errorf("loopy.test refusal: %v", e["status_detail"])
			}
		case ep != nil && ep["listener"] == "transparent" && ep["reason"] == "sni_mismatch":
			sni++
		case ep != nil && ep["listener"] == "fence":
			bypass++
		}
	}
	for _, b := range []string{"/usr/bin/curl", "/usr/bin/node", helper} {
		if !posts[b] {
			t.Errorf("no transparent HTTP Activity for %s's refused POST (have %v)", b, posts)
		}
	}
	// The querying process is named (the proxy attributes the query's
	// UDP socket).
	for name, b := range map[string]string{"denied-curl.test": "/usr/bin/curl", "denied-node.test": "/usr/bin/node", "denied-go.test": helper} {
		if askers[name] != b {
			t.Errorf("dns_denied event for %s names %q, want %s (have %v)", name, askers[name], b, askers)
		}
	}
	if dnsDenied == 0 || ssrf == 0 || sni < 2 || bypass == 0 {
		t.Errorf("events: %d dns_denied for denied-*.test, %d ssrf refusals of loopy.test, %d sni_mismatch, %d bypass; want each (sni: 2)", dnsDenied, ssrf, sni, bypass)
	}
}
