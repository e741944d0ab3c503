//go:build linux

package sandboxnet

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
)

// chainPolicy adds, for curl, the destinations of the chaining test:
// direct.test and internal.test (both NO_PROXY), refused.test (which
// squid refuses) and api.test (inspected: TLS terminated by the proxy).
const chainPolicy = `  chained:
    endpoints:
      - host: direct.test
        port: 443
      - host: internal.test
        port: 443
      - host: refused.test
        port: 443
      - host: api.test
        port: 443
        protocol: rest
        access: read-only
    binaries:
      - path: /usr/bin/curl
`

// chainScript runs the requests from inside the sandbox. curl is given
// no --cacert: the sandbox's trust bundle holds the nettest CA because
// it is the --upstream-proxy-ca-bundle (a TLS-intercepting corporate
// proxy's CA). refused.test is asked by a raw CONNECT (python3 is not
// allowed, but the refusal comes from squid before any byte flows, so
// curl makes it) to see the proxy's 502 body. Then it waits (at most 30
// s) for the test to write "stop".
const chainScript = `
code() { printf '%s=' "$1"; shift; "$@" -s -o /tmp/body -w '%{http_code} %{http_connect}' --max-time 15; printf ' %s\n' "$(head -c 300 /tmp/body 2>/dev/null | tr -d '\n')"; rm -f /tmp/body; }
code chained curl https://allowed.test/
code inspected curl https://api.test/get
code direct curl https://direct.test/
code cidr curl https://internal.test/
code refused curl https://refused.test/
code plain curl http://allowed.test/
printf 'refused_body=%s\n' "$(curl -s -p --max-time 15 -o /dev/null -w '%{http_connect}' https://refused.test/; printf ' '; curl -s --max-time 15 -x "$HTTPS_PROXY" -X CONNECT --request-target refused.test:443 http://refused.test:443/ | tr -d '\n')"
echo done
i=0; while [ ! -e stop ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
`

// chainLab is a lab with a real squid as the corporate proxy.
type chainLab struct {
	*lab
	squid   *nettest.Squid
	auth    string
	a, b, c netip.Addr
}

// newChainLab is the lab with its squid, an https:// one with secure.
func newChainLab(t *testing.T, secure bool) *chainLab {
	l := &chainLab{lab: newLab(t, chainPolicy)}
	l.a, l.b, l.c = l.inet.V4[0], l.inet.V4[1], l.inet.V4[2]
	l.hosts = l.inet.HostsFile(map[string]string{
		"allowed.test": l.a.String(), "api.test": l.a.String(),
		"direct.test": l.b.String(), "refused.test": l.b.String(),
		"internal.test": l.c.String(),
	})
	// squid refuses CONNECTs to b: direct.test reaches it only because
	// NO_PROXY names it (refused.test, the same address, is chained).
	o := nettest.SquidOptions{Deny: []netip.Prefix{netip.PrefixFrom(l.b, 32)}}
	if secure {
		var err error
		if o.TLSCert, o.TLSKey, err = l.inet.ServerPEM(netip.MustParseAddr("127.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	l.squid = nettest.StartSquid(t, o)
	l.auth = l.writeAuth("auth", l.squid.User+":"+l.squid.Password)
	return l
}

func (l *chainLab) writeAuth(name, cred string) string {
	p := filepath.Join(l.dir, name)
	if err := os.WriteFile(p, []byte(cred+"\n"), 0o600); err != nil {
		l.t.Fatal(err)
	}
	return p
}

// flags are the upstream proxy flags of the main run: squid with the
// credential in auth, the nettest CA as the corporate CA, and NO_PROXY.
func (l *chainLab) flags(auth string) []string {
	return []string{"--upstream-proxy", l.squid.URL(),
		"--upstream-proxy-auth-file", auth, "--upstream-proxy-allow-insecure",
		"--upstream-proxy-ca-bundle", l.inet.CAFile(),
		"--upstream-proxy-no-proxy", fmt.Sprintf("allowed.test:8443, direct.test, %s/32:443", l.c)}
}

// run starts the supervisor with the upstream proxy flags, reads the
// script's results up to "done", calls during(proxy pid) while the
// sandbox still runs, then lets it finish. It returns the results and
// everything the supervisor wrote to stderr and the proxy to its log.
func (l *chainLab) run(script string, flags []string, during func(proxyPID int)) (map[string]string, string) {
	t := l.t
	args := []string{"run", "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--workdir", l.wd, "--log-level", "debug"}
	args = append(append(append(args, flags...), "--", "/bin/sh", "-c"), script)
	cmd := exec.Command(l.sup, args...)
	// The supervisor's own proxy variables are nobody's business: the
	// proxy never reads them (and is started with an environment of PATH
	// alone).
	cmd.Env = append(os.Environ(), "HTTPS_PROXY=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9", "NO_PROXY=*", "no_proxy=*")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("supervisor and proxy stderr:\n%s", stderr.String())
		}
	})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The deferred stop of an earlier run (which lets its script end on
	// a failure path) leaves the file behind; a script that found it
	// would end right after "done", and its sandbox could be gone, log
	// and all, before the log is read below.
	if err := os.Remove(filepath.Join(l.wd, "stop")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	stop := func() { os.WriteFile(filepath.Join(l.wd, "stop"), nil, 0o644) }
	defer stop()
	r := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "done" {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			r[k] = v
		}
	}
	if during != nil {
		during(childByExe(t, cmd.Process.Pid, "egress-proxy"))
	}
	// The proxy's log, while the state directory still exists.
	logs, _ := filepath.Glob(filepath.Join(l.state, "*", ProxyLogName))
	var proxyLog []byte
	for _, p := range logs {
		b, _ := os.ReadFile(p)
		proxyLog = append(proxyLog, b...)
	}
	stop()
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(logs) != 1 {
		t.Errorf("proxy logs %v; want one", logs)
	}
	return r, stderr.String() + string(proxyLog)
}

// upstreamRoute is unmapped.egress_proxy.upstream_proxy of the last
// event of class for host ("" when there is none).
func (l *chainLab) upstreamRoute(class float64, host string) map[string]any {
	var out map[string]any
	for _, e := range l.eventLines() {
		dst, _ := e["dst_endpoint"].(map[string]any)
		if e["class_uid"] != class || dst["hostname"] != host {
			continue
		}
		u, _ := e["unmapped"].(map[string]any)
		ep, _ := u["egress_proxy"].(map[string]any)
		out, _ = ep["upstream_proxy"].(map[string]any)
		if out == nil {
			out = map[string]any{}
		}
	}
	return out
}

// TestChainedEgressThroughSquid is the acceptance run of upstream proxy
// chaining (issue 26 item 4) in a real sandbox through a real squid with
// Basic authentication:
//   - an allowed passthrough tunnel and an inspected one go through
//     squid, whose access log shows the checked address (never the name)
//     as the CONNECT target, authenticated;
//   - NO_PROXY destinations go direct and squid sees nothing of them: a
//     name entry, and an address entry matching a name through what it
//     resolved to; an entry for another port does not apply;
//   - plain HTTP always goes direct;
//   - squid's refusal (403) is a 502 with a JSON reason for the client
//     and an upstream failure event;
//   - the CA bundle is trusted for the inspected tunnel's upstream and is
//     in the sandbox's trust bundle (curl runs without --cacert);
//   - the credential is in no event, no log line and not in the proxy's
//     argv; the supervisor's own HTTPS_PROXY and NO_PROXY change nothing.
//
// A wrong credential is then squid's 407: a 502 naming it.
func TestChainedEgressThroughSquid(t *testing.T) {
	l := newChainLab(t, false)
	var argv string
	r, stderr := l.run(chainScript, l.flags(l.auth), func(pid int) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			t.Fatal(err)
		}
		argv = strings.ReplaceAll(string(b), "\x00", " ")
	})
	t.Logf("results: %v", r)
	for _, k := range []string{"chained", "direct", "cidr"} {
		if !strings.HasPrefix(r[k], "200 ") || !strings.Contains(r[k], `"server":"https"`) {
			t.Errorf("%s: %q; want 200 from the https server", k, r[k])
		}
	}
	if !strings.HasPrefix(r["inspected"], "200 ") || !strings.Contains(r["inspected"], `"path":"/get"`) {
		t.Errorf("inspected: %q; want 200", r["inspected"])
	}
	if !strings.HasPrefix(r["plain"], "200 ") {
		t.Errorf("plain: %q; want 200", r["plain"])
	}
	if code, _, _ := strings.Cut(r["refused"], " "); code == "200" {
		t.Errorf("refused: %q; want squid's refusal", r["refused"])
	}
	connectCode, body, _ := strings.Cut(r["refused_body"], " ")
	var rb map[string]any
	json.Unmarshal([]byte(body), &rb)
	if connectCode != "502" || rb["error"] != "upstream_failed" || rb["reason"] != "upstream_proxy_denied" ||
		rb["detail"] != "the upstream proxy answered 403 Forbidden" {
		t.Errorf("refused.test: CONNECT answer %s, body %q; want 502 upstream_failed upstream_proxy_denied", connectCode, body)
	}

	// squid saw the chained tunnels, by address, authenticated, and
	// nothing else.
	var toA, toB int
	for _, ln := range l.squid.Log() {
		switch {
		case ln.Method == "CONNECT" && ln.Target == l.a.String()+":443" && ln.Status == 200 && ln.User == l.squid.User:
			toA++
		case ln.Method == "CONNECT" && ln.Target == l.b.String()+":443" && ln.Status == 403:
			toB++
		default:
			t.Errorf("squid saw %+v: only CONNECTs to %s (allowed.test, api.test) and %s (refused.test) should reach it", ln, l.a, l.b)
		}
	}
	if toA < 2 || toB < 2 {
		t.Errorf("squid saw %d CONNECTs to %s and %d to %s; want at least 2 each (passthrough and inspected; curl and the raw CONNECT)", toA, l.a, toB, l.b)
	}
	// What reached the internet: everything allowed, direct or not.
	reached := map[string]bool{}
	for _, h := range l.inet.Hits() {
		reached[h.Server+" "+h.SNI+" "+h.Local.Addr().String()] = true
	}
	for _, want := range []string{"https allowed.test " + l.a.String(), "https api.test " + l.a.String(),
		"https direct.test " + l.b.String(), "https internal.test " + l.c.String(), "http  " + l.a.String()} {
		if !reached[want] {
			t.Errorf("the internet saw no %q: %v", want, reached)
		}
	}

	// The events say how each tunnel went.
	for host, want := range map[string]map[string]any{
		"allowed.test":  {"route": "chained", "connect_target": l.a.String() + ":443", "proxy": l.squid.URL()},
		"direct.test":   {"route": "direct", "no_proxy": "direct.test", "proxy": l.squid.URL()},
		"internal.test": {"route": "direct", "no_proxy": l.c.String() + "/32:443", "proxy": l.squid.URL()},
		"refused.test":  {"route": "chained", "connect_target": l.b.String() + ":443", "proxy": l.squid.URL()},
	} {
		got := l.upstreamRoute(4001, host)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: unmapped.egress_proxy.upstream_proxy %v; want %v", host, got, want)
		}
	}
	if got := l.upstreamRoute(4002, "api.test"); got["route"] != "chained" {
		t.Errorf("api.test requests: upstream_proxy %v; want chained", got)
	}
	if got := l.upstreamRoute(4002, "allowed.test"); got != nil && len(got) != 0 {
		t.Errorf("plain http://allowed.test: upstream_proxy %v; want none (plain HTTP is never chained)", got)
	}

	// The credential: nowhere but in the file.
	events, _ := os.ReadFile(l.events)
	enc := base64.StdEncoding.EncodeToString([]byte(l.squid.User + ":" + l.squid.Password))
	for what, text := range map[string]string{"events": string(events), "stderr and the proxy's log": stderr, "proxy argv": argv} {
		if strings.Contains(text, l.squid.Password) || strings.Contains(text, enc) {
			t.Errorf("the credential is in the %s", what)
		}
	}
	if !strings.Contains(argv, "--upstream-proxy-auth-file "+l.auth) {
		t.Errorf("proxy argv %q does not carry the auth file's path", argv)
	}
	if !strings.Contains(stderr, "CONNECT tunnels chained through an upstream proxy") || !strings.Contains(stderr, "credential=true") {
		t.Errorf("the proxy did not log the upstream proxy it uses:\n%s", stderr)
	}

	// A wrong password: squid answers 407.
	bad := l.writeAuth("bad-auth", l.squid.User+":not-"+l.squid.Password)
	r, stderr = l.run(chainScript, l.flags(bad), nil)
	if strings.Contains(stderr, l.squid.Password) || strings.Contains(stderr, "not-"+l.squid.Password) {
		t.Errorf("a credential is in stderr or the proxy's log of the wrong-credential run")
	}
	if code := strings.Fields(r["chained"]); len(code) < 2 || code[1] != "502" {
		t.Errorf("wrong credential: %q; want the CONNECT answered 502", r["chained"])
	}
	var saw407 bool
	for _, ln := range l.squid.Log() {
		saw407 = saw407 || ln.Status == 407
	}
	if !saw407 {
		t.Errorf("squid never answered 407 to the wrong credential")
	}
	var failed bool
	for _, e := range l.eventLines() {
		detail, _ := e["status_detail"].(string)
		failed = failed || e["status_code"] == "upstream_failed" && strings.Contains(detail, "upstream_proxy_auth_required")
	}
	if !failed {
		t.Errorf("no upstream_failed event with reason upstream_proxy_auth_required")
	}
}

// httpsScript makes one passthrough request through the proxy, then
// waits (at most 30 s) for "stop".
const httpsScript = `
code() { printf '%s=' "$1"; shift; "$@" -s -o /tmp/body -w '%{http_code} %{http_connect}' --max-time 15; printf ' %s\n' "$(head -c 300 /tmp/body 2>/dev/null | tr -d '\n')"; rm -f /tmp/body; }
code chained curl --cacert ./ca.pem https://allowed.test/
echo done
i=0; while [ ! -e stop ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
`

// TestChainedEgressThroughHTTPSSquid: with an https:// squid the proxy
// speaks TLS to it before the CONNECT, verified against
// --upstream-proxy-ca-bundle (and the credential, inside that TLS, needs
// no insecure acknowledgement). Without the bundle squid's certificate
// does not verify: the tunnel is a 502 upstream_proxy_tls and no CONNECT
// reaches squid.
func TestChainedEgressThroughHTTPSSquid(t *testing.T) {
	l := newChainLab(t, true)
	url := l.squid.URL()
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("squid at %s; want https://", url)
	}
	r, _ := l.run(httpsScript, []string{"--upstream-proxy", url, "--upstream-proxy-auth-file", l.auth,
		"--upstream-proxy-ca-bundle", l.inet.CAFile()}, nil)
	if !strings.HasPrefix(r["chained"], "200 ") || !strings.Contains(r["chained"], `"sni":"allowed.test"`) {
		t.Errorf("through the https:// squid: %q; want 200", r["chained"])
	}
	lines := l.squid.Log()
	if len(lines) != 1 || lines[0].Method != "CONNECT" || lines[0].Target != l.a.String()+":443" || lines[0].Status != 200 || lines[0].User != l.squid.User {
		t.Errorf("squid saw %+v; want one authenticated CONNECT %s:443", lines, l.a)
	}
	if got := l.upstreamRoute(4001, "allowed.test"); got["route"] != "chained" || got["proxy"] != url {
		t.Errorf("upstream_proxy %v; want chained through %s", got, url)
	}

	r, _ = l.run(httpsScript, []string{"--upstream-proxy", url, "--upstream-proxy-auth-file", l.auth}, nil)
	if f := strings.Fields(r["chained"]); len(f) < 2 || f[1] != "502" {
		t.Errorf("without the CA bundle: %q; want the CONNECT answered 502", r["chained"])
	}
	// (squid logs the handshake the proxy broke off as a transaction
	// without a request: "NONE error:...")
	var connects []nettest.SquidLine
	for _, ln := range l.squid.Log() {
		if ln.Method == "CONNECT" {
			connects = append(connects, ln)
		}
	}
	if len(connects) != 1 {
		t.Errorf("squid saw CONNECTs %+v; the one of the first run only, since a proxy whose certificate did not verify must get none", connects)
	}
	var tlsFail bool
	for _, e := range l.eventLines() {
		detail, _ := e["status_detail"].(string)
		tlsFail = tlsFail || e["status_code"] == "upstream_failed" && strings.HasPrefix(detail, "upstream_proxy_tls")
	}
	if !tlsFail {
		t.Errorf("no upstream_failed event with reason upstream_proxy_tls")
	}
}
