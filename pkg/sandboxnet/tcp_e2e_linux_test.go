//go:build linux

package sandboxnet

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
)

const labTCPEcho = `  tcpecho:
    endpoints:
      - host: echo.test
        port: 7007
        protocol: tcp
    binaries:
      - path: /usr/bin/python3*
`

// tcpScript runs in the sandbox. Every probe prints name=result; a
// refused connection is one that never gets the echo back.
const tcpScript = `
python3 - <<'PY'
import socket, time
def probe(addr, data=b"palisade-tcp"):
    try:
        s = socket.create_connection(addr, timeout=5)
    except OSError as e:
        return "connect_error:%s" % e.errno, None
    peer = s.getpeername()[0]
    try:
        s.sendall(data)
        got = b""
        while len(got) < len(data):
            b = s.recv(64)
            if not b:
                break
            got += b
        return ("echo" if got == data else "no_echo:%r" % got), peer
    except OSError as e:
        return "reset:%s" % e.errno, peer
    finally:
        s.close()
r, syn = probe(("echo.test", 7007))
print("by_name=%s" % r)
print("synthetic=%s" % syn)
try:
    socket.getaddrinfo("stranger.test", 7007)
    print("stranger=resolved")
except socket.gaierror as e:
    print("stranger=gaierror:%s" % e.errno)
print("wrong_port=%s" % probe((syn, 7008))[0])
print("direct=%s" % probe(("REAL", 7007))[0])
time.sleep(6.5)
print("expired=%s" % probe((syn, 7007))[0])
r2, syn2 = probe(("echo.test", 7007))
print("again=%s" % r2)
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
q = b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04echo\x04test\x00\x00\x01\x00\x01"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
try:
    u.sendto(q, (ns, 53)); u.recv(512); print("dns_53=answered")
except OSError as e:
    print("dns_53=error:%s" % e.errno)
try:
    u.sendto(q, (ns, DNSPORT)); u.recv(512); print("dns_direct=answered")
except OSError as e:
    print("dns_direct=error:%s" % e.errno)
PY
printf 'bash=%s\n' "$(bash -c 'exec 3<>/dev/tcp/echo.test/7007 && printf hi >&3 && timeout 3 head -c 2 <&3' 2>/dev/null)"
printf 'resolv=%s\n' "$(grep -c '^nameserver' /etc/resolv.conf)"
`

// The acceptance run of transparent TCP: inside a real sandbox whose
// policy names echo.test through a protocol: tcp endpoint, python3's
// plain socket.create_connection reaches the echo server by name; a name
// not in the policy does not resolve (and no query leaves: the spy
// resolvers in the test internet see none); a wrong port, an expired
// mapping and a binary outside the entry (bash) get no echo; a direct
// connection to the real address is fenced. Each outcome is a valid
// OCSF 4001 event carrying the mapping.
func TestTransparentTCPEndToEnd(t *testing.T) {
	l := newLab(t, labTCPEcho)
	real := l.inet.V4[0].String()
	script := strings.ReplaceAll(strings.ReplaceAll(tcpScript, "REAL", real), "DNSPORT", strconv.Itoa(DefaultDNSPort))
	out, err := l.command(script).Output()
	if err != nil {
		t.Fatalf("sandbox: %v\n%s", err, out)
	}
	r := results(out)
	t.Logf("results: %v", r)
	if r["by_name"] != "echo" || r["again"] != "echo" {
		t.Errorf("by name: %q, again after expiry: %q; want the echo", r["by_name"], r["again"])
	}
	if a, err := netip.ParseAddr(r["synthetic"]); err != nil || !policydns.SyntheticRange.Contains(a) {
		t.Errorf("echo.test resolved to %q, want a synthetic 198.18.0.0/15 address", r["synthetic"])
	}
	if !strings.HasPrefix(r["stranger"], "gaierror") {
		t.Errorf("stranger.test: %q, want no resolution", r["stranger"])
	}
	for _, k := range []string{"wrong_port", "direct", "expired"} {
		if r[k] == "echo" || r[k] == "" {
			t.Errorf("%s: %q, want refused (no echo)", k, r[k])
		}
	}
	if r["bash"] != "" {
		t.Errorf("bash (not in the entry): got %q back, want nothing", r["bash"])
	}
	// Port 53 of the host address is redirected to the policy DNS; its
	// own (unprivileged) port is not reachable directly.
	if r["dns_53"] != "answered" || r["dns_direct"] == "answered" || r["dns_direct"] == "" {
		t.Errorf("raw DNS to port 53: %q, to port %d directly: %q; want answered, then an error", r["dns_53"], DefaultDNSPort, r["dns_direct"])
	}
	if r["resolv"] != "1" {
		t.Errorf("/etc/resolv.conf has %q nameservers, want the policy DNS only", r["resolv"])
	}

	// Nothing but the proxy's relays reached the echo server; no DNS
	// query and no datagram left.
	echoes := 0
	for _, h := range l.inet.Hits() {
		switch {
		case h.Server == "dns" || h.Server == "udp":
			t.Errorf("a datagram reached the internet: %+v", h)
		case h.Server == "echo" && h.Local.Port() == nettest.EchoAltPort:
			echoes++
		}
	}
	if echoes != 2 {
		t.Errorf("%d connections reached the echo server, want 2 (by name, and again after expiry)", echoes)
	}

	// Events: validated OCSF (eventLines); the transparent ones carry the
	// mapping, the DNS ones the query name.
	reasons := map[string]int{}
	var answered, refused int
	for _, e := range l.eventLines() {
		u, _ := e["unmapped"].(map[string]any)
		if pd, ok := u["policy_dns"].(map[string]any); ok {
			dst, _ := e["dst_endpoint"].(map[string]any)
			switch {
			case dst["domain"] == "echo.test" && pd["rcode"] == "NOERROR":
				answered++
			case dst["domain"] == "stranger.test" && pd["rcode"] == "REFUSED":
				refused++
			}
		}
		ep, _ := u["egress_proxy"].(map[string]any)
		if ep == nil || ep["listener"] != "transparent" {
			continue
		}
		tr, _ := ep["transparent"].(map[string]any)
		syn, _ := tr["synthetic"].(string)
		if a, err := netip.ParseAddr(syn); err != nil || !policydns.SyntheticRange.Contains(a) {
			b, _ := json.Marshal(e)
			t.Errorf("transparent event without its mapping: %s", b)
			continue
		}
		reason, _ := ep["reason"].(string)
		if e["action"] == "Allowed" {
			reason = "allowed"
		}
		reasons[reason]++
		if reason == "allowed" || reason == "port_not_eligible" || reason == "mapping_expired" {
			realList, _ := json.Marshal(tr["real"])
			if tr["mapping_id"] == "" || !strings.Contains(string(realList), real) || tr["generation"].(float64) < 1 {
				t.Errorf("%s: mapping %v, want id, real %s and generation", reason, tr, real)
			}
		}
	}
	t.Logf("transparent events by reason: %v; dns answered %d, refused %d", reasons, answered, refused)
	for _, k := range []string{"allowed", "port_not_eligible", "mapping_expired", "binary_not_allowed"} {
		if reasons[k] == 0 {
			t.Errorf("no transparent event with reason %s", k)
		}
	}
	if answered == 0 || refused == 0 {
		t.Errorf("policy DNS events: %d answers for echo.test, %d refusals for stranger.test", answered, refused)
	}
}
