//go:build linux

package sandboxnet

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// pyProbe is the python3 function the sandbox scripts connect with:
// probe(addr) returns ("echo", peer) when the data comes back, else why
// not (a refused connection is one that never gets the echo back).
const pyProbe = `import os, socket, time
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
`

// tcpScript runs in the sandbox. Every probe prints name=result.
const tcpScript = `
python3 - <<'PY'
` + pyProbe + `r, syn = probe(("echo.test", 7007))
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
			case dst["domain"] == "stranger.test" && pd["rcode"] == "NXDOMAIN" && e["status_code"] == "dns_denied":
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

// epochScript resolves and reaches echo.test, waits until the test has
// killed the proxy and the supervisor has restarted it (the file
// "restarted" appears), then connects to the address it cached, and
// resolves and connects afresh, once each.
const epochScript = `
python3 - <<'PY'
` + pyProbe + `r, cached = probe(("echo.test", 7007))
print("first=%s" % r)
print("first_addr=%s" % cached, flush=True)
deadline = time.time() + 90
while not os.path.exists("restarted") and time.time() < deadline:
    time.sleep(0.05)
print("cached=%s" % probe((cached, 7007))[0])
r2, fresh = probe(("echo.test", 7007))
print("second=%s" % r2)
print("second_addr=%s" % fresh, flush=True)
PY
`

// Seed 004's epochs: every start of a sandbox's proxy takes the next
// persisted boot epoch, whose synthetic addresses come from their own
// range. A client that cached echo.test's address before the proxy was
// killed and restarted is refused at that address (other_epoch, with its
// event), never handed to whichever name the new proxy mapped there; a
// fresh lookup gets an address of the new epoch and works.
func TestTransparentTCPEpochAcrossProxyRestart(t *testing.T) {
	l := newLab(t, labTCPEcho)
	cmd := l.command(epochScript)
	sc := startReading(t, cmd)
	r := map[string]string{}
	readKeys(sc, r, "first_addr")
	if r["first"] != "echo" {
		t.Fatalf("before the restart: %v", r)
	}
	files, _ := filepath.Glob(filepath.Join(l.state, "*", DNSEpochName))
	if len(files) != 1 {
		t.Fatalf("epoch files %v, want one in the sandbox's state directory", files)
	}
	readEpoch := func() uint64 {
		b, _ := os.ReadFile(files[0])
		e, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("%s: %q", files[0], b)
		}
		return e
	}
	first := readEpoch()
	dir := filepath.Dir(files[0])
	caBefore, err := os.ReadFile(filepath.Join(dir, CACertName))
	if err != nil {
		t.Fatal(err)
	}
	old := childByExe(t, cmd.Process.Pid, "egress-proxy")
	syscall.Kill(old, syscall.SIGKILL)
	// The restarted proxy as the supervisor took it: the supervisor
	// rewrites the sandbox's trust bundle with a new proxy's CA only once
	// that proxy said it is ready (its policy DNS and transparent
	// listener serving); a start it gives up on is killed unannounced.
	// (A bound listener says less: it is bound before the policy loads,
	// and a start killed for being slow takes connections with it.)
	waitFor(t, 60*time.Second, func() bool { return bundleHasNewCA(dir, caBefore) })
	pid := childByExe(t, cmd.Process.Pid, "egress-proxy")
	epoch := dnsEpochArg(t, pid)
	if pid == old || epoch <= first || epoch != readEpoch() {
		t.Fatalf("restarted proxy %d (killed %d) runs epoch %d; persisted %d, before the restart %d", pid, old, epoch, readEpoch(), first)
	}
	os.WriteFile(filepath.Join(l.wd, "restarted"), nil, 0o644)
	readKeys(sc, r, "")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sandbox: %v (%v)", err, r)
	}
	t.Logf("results: %v", r)
	a, aerr := netip.ParseAddr(r["first_addr"])
	b, berr := netip.ParseAddr(r["second_addr"])
	if aerr != nil || berr != nil || !policydns.EpochRange(first).Contains(a) || !policydns.EpochRange(epoch).Contains(b) {
		t.Fatalf("addresses %q then %q, want from %v then %v", r["first_addr"], r["second_addr"], policydns.EpochRange(first), policydns.EpochRange(epoch))
	}
	if r["cached"] == "echo" || r["second"] != "echo" {
		t.Errorf("cached address after the restart: %q (want refused); fresh lookup: %q (want echo)", r["cached"], r["second"])
	}
	refused := 0
	for _, e := range l.eventLines() {
		u, _ := e["unmapped"].(map[string]any)
		ep, _ := u["egress_proxy"].(map[string]any)
		tr, _ := ep["transparent"].(map[string]any)
		if ep["reason"] == "other_epoch" && tr["synthetic"] == a.String() && e["action"] != "Allowed" {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d other_epoch refusals of %v in the events, want 1", refused, a)
	}
}

// bundleHasNewCA reports whether the proxy CA in dir (CACertName, which
// every start of the proxy writes) is no longer before and the trust
// bundle (BundleName) ends with it: the supervisor writes the bundle
// only after the proxy that wrote the CA reported ready.
func bundleHasNewCA(dir string, before []byte) bool {
	ca, err := os.ReadFile(filepath.Join(dir, CACertName))
	if err != nil || len(ca) == 0 || bytes.Equal(ca, before) {
		return false
	}
	bundle, err := os.ReadFile(filepath.Join(dir, BundleName))
	return err == nil && bytes.HasSuffix(bytes.TrimSpace(bundle), bytes.TrimSpace(ca))
}

// dnsEpochArg is the --dns-epoch process pid was started with.
func dnsEpochArg(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a == "--dns-epoch" && i+1 < len(args) {
			e, err := strconv.ParseUint(args[i+1], 10, 64)
			if err != nil {
				t.Fatalf("--dns-epoch %q: %v", args[i+1], err)
			}
			return e
		}
	}
	t.Fatalf("process %d has no --dns-epoch: %q", pid, args)
	return 0
}

// stopSupervisor ends a `run` still running as its operator would:
// SIGTERM (the sandbox ends, and its fence, cgroup and proxy are torn
// down), SIGKILL only after 20 s.
func stopSupervisor(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// portReuseScript connects from one client port to each of e0..e7.test
// (eight synthetic destinations: with their conntrack entries lingering
// in TIME_WAIT, every port of the transparent range holds one from that
// client port), waits until the test has killed the proxy and the
// supervisor has restarted it, then connects from the same port to
// e0.test's address of the new epoch.
const portReuseScript = `
python3 - <<'PY'
import os, socket, time
PORT = 40127
def probe_from(name):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.settimeout(5)
    try:
        s.bind(("", PORT))
        s.connect((socket.gethostbyname(name), 7007))
        s.sendall(b"palisade-tcp")
        got = b""
        while len(got) < 12:
            b = s.recv(64)
            if not b:
                break
            got += b
        return "echo" if got == b"palisade-tcp" else "no_echo:%r" % got
    except OSError as e:
        return "error:%s" % e.errno
    finally:
        s.close()  # the client first: the entry ends in TIME_WAIT
for i in range(8):
    print("before%d=%s" % (i, probe_from("e%d.test" % i)), flush=True)
print("ready=1", flush=True)
deadline = time.time() + 90
while not os.path.exists("restarted") and time.time() < deadline:
    time.sleep(0.05)
print("after=%s" % probe_from("e0.test"), flush=True)
PY
`

// After the supervisor restarts a sandbox's proxy, a client port the
// sandbox used for the old proxy's names is used again for the new
// epoch's addresses. The old connections' conntrack entries linger in
// TIME_WAIT, one per transparent port the redirect gave them; with all
// eight ports held for that client port, the kernel's NAT moved the new
// connection's source port and the proxy refused it (attribution_failed;
// fail-closed, but a working client refused). The supervisor now flushes
// the sandbox's entries before it starts the proxy again
// (fence.FlushConntrack): the connection is allowed and echoes. Fails
// without that flush (after=error:104, an attribution_failed event).
func TestTransparentClientPortAcrossProxyRestart(t *testing.T) {
	var entries strings.Builder
	names := map[string]string{}
	for i := range DefaultTransparentPorts {
		fmt.Fprintf(&entries, "      - host: e%d.test\n        port: 7007\n        protocol: tcp\n", i)
	}
	l := newLab(t, "  tcpreuse:\n    endpoints:\n"+entries.String()+"    binaries:\n      - path: /usr/bin/python3*\n")
	for i := range DefaultTransparentPorts {
		names[fmt.Sprintf("e%d.test", i)] = l.inet.V4[0].String()
	}
	l.hosts = l.inet.HostsFile(names)
	cmd := l.command(portReuseScript)
	sc := startReading(t, cmd)
	r := map[string]string{}
	readKeys(sc, r, "ready")
	for i := range DefaultTransparentPorts {
		if k := fmt.Sprintf("before%d", i); r[k] != "echo" {
			t.Fatalf("before the restart: %s=%q, want echo (%v)", k, r[k], r)
		}
	}
	files, _ := filepath.Glob(filepath.Join(l.state, "*", CACertName))
	if len(files) != 1 {
		t.Fatalf("CA files %v, want one in the sandbox's state directory", files)
	}
	caBefore, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	old := childByExe(t, cmd.Process.Pid, "egress-proxy")
	syscall.Kill(old, syscall.SIGKILL)
	waitFor(t, 60*time.Second, func() bool { return bundleHasNewCA(filepath.Dir(files[0]), caBefore) })
	os.WriteFile(filepath.Join(l.wd, "restarted"), nil, 0o644)
	readKeys(sc, r, "")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sandbox: %v (%v)", err, r)
	}
	t.Logf("results: %v", r)
	if r["after"] != "echo" {
		t.Errorf("after the restart, from the same client port: %q, want echo", r["after"])
	}
	for _, e := range l.eventLines() {
		u, _ := e["unmapped"].(map[string]any)
		ep, _ := u["egress_proxy"].(map[string]any)
		if ep["reason"] == "attribution_failed" {
			t.Errorf("an attribution_failed event (the NAT moved a client port?): %v", ep)
		}
	}
}

// startReading starts the sandbox command cmd (stopped at the test's
// end) and returns a scanner over its standard output.
func startReading(t *testing.T, cmd *exec.Cmd) *bufio.Scanner {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopSupervisor(cmd) })
	return bufio.NewScanner(stdout)
}

// readKeys reads the "key=value" lines of sc into r: up to and including
// the line whose key is until, or to the end when until is "".
func readKeys(sc *bufio.Scanner, r map[string]string, until string) {
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			r[k] = v
		}
		if until != "" && k == until {
			return
		}
	}
}
