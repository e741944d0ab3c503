//go:build linux

package sandboxnet

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// lab is one end-to-end setup: the real sandbox-supervisor and
// egress-proxy binaries, a fake internet of TEST-NET servers, a hosts
// file naming them, a policy file, a workdir the sandbox user owns and an
// events file.
type lab struct {
	t                         *testing.T
	sup                       string
	inet                      *nettest.Internet
	dir, policy, hosts, wd    string
	events, state, caInWorkdr string
	// runArgs are added to every `sandbox-supervisor run`.
	runArgs []string
}

const labPolicy = `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /bin, /sbin, /lib, /lib64, /etc]
  read_write: [/tmp]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: sandbox
  run_as_group: sandbox
network_policies:
  web:
    endpoints:
      - host: allowed.test
        port: 80
      - host: allowed.test
        port: 443
      - host: loopy.test
        port: 80
    binaries:
      - path: /usr/bin/curl
%s`

const labPythonEcho = `  echo:
    endpoints:
      - host: allowed.test
        port: 7
    binaries:
      - path: /usr/bin/python3*
`

func newLab(t *testing.T, extra string) *lab {
	t.Helper()
	testutil.RequireRoot(t)
	for _, f := range []string{"landlock", "seccomp", "nftables", "ns:net"} {
		testutil.RequireFeature(t, f)
	}
	testutil.RequireCommand(t, "curl")
	l := &lab{t: t, sup: testutil.Binary(t, "sandbox-supervisor")}
	proxy := testutil.Binary(t, "egress-proxy")
	if filepath.Dir(proxy) != filepath.Dir(l.sup) {
		t.Fatalf("egress-proxy (%s) is not next to sandbox-supervisor (%s)", proxy, l.sup)
	}
	l.inet = nettest.NewInternet(t)
	l.dir = t.TempDir()
	l.hosts = l.inet.HostsFile(map[string]string{
		"allowed.test":  l.inet.V4[0].String(),
		"denied.test":   l.inet.V4[1].String(),
		"loopy.test":    "127.0.0.1",
		"echo.test":     l.inet.V4[0].String(),
		"stranger.test": l.inet.V4[1].String(),
	})
	l.policy = filepath.Join(l.dir, "policy.yaml")
	l.write(fmt.Sprintf(labPolicy, extra))
	l.wd = filepath.Join(l.dir, "work")
	os.Mkdir(l.wd, 0o755)
	os.WriteFile(filepath.Join(l.wd, "ca.pem"), l.inet.CAPEM(), 0o644)
	os.Chown(l.wd, 10001, 10001)
	l.events = filepath.Join(l.dir, "events.jsonl")
	l.state = filepath.Join(l.dir, "state")
	return l
}

// write replaces the policy atomically (rename), as operators and
// policy-sync do.
func (l *lab) write(text string) {
	tmp := l.policy + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Rename(tmp, l.policy); err != nil {
		l.t.Fatal(err)
	}
}

func (l *lab) command(script string) *exec.Cmd {
	args := []string{"run", "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--workdir", l.wd}
	args = append(append(args, l.runArgs...), "--", "/bin/sh", "-c", script)
	cmd := exec.Command(l.sup, args...)
	cmd.Stderr = testutil.LogWriter(l.t, "sandbox-supervisor")
	return cmd
}

// results parses "name=value" lines.
func results(out []byte) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m
}

func (l *lab) eventLines() []map[string]any {
	l.t.Helper()
	data, _ := os.ReadFile(l.events)
	ocsftest.ValidateLines(l.t, data)
	var evs []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil {
			evs = append(evs, m)
		}
	}
	return evs
}

func denial(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("denial body %q is not JSON: %v", body, err)
	}
	return m
}

const egressScript = `
code() { printf '%s=' "$1"; shift; "$@" -s -o /tmp/body -w '%{http_code}' --max-time 10; printf ' %s\n' "$(cat /tmp/body 2>/dev/null | tr -d '\n')"; rm -f /tmp/body; }
code http_allowed curl http://allowed.test/
code https_allowed curl --cacert ./ca.pem https://allowed.test/
code denied_host curl http://denied.test/
code wrong_port curl http://allowed.test:8080/
code ssrf curl http://loopy.test/
cp /usr/bin/curl /tmp/curl
code copy_of_curl /tmp/curl http://allowed.test/
printf 'python=%s\n' "$(python3 -c '
import os, urllib.request, urllib.error
try:
    urllib.request.urlopen("http://allowed.test/", timeout=10)
    print("200")
except urllib.error.HTTPError as e:
    print(e.code, os.getpid(), e.read().decode().strip())
except Exception as e:
    print("error", e)
')"
s=$(date +%s%N); curl --noproxy '*' -s -o /dev/null --max-time 5 http://ADDR/; rc=$?; e=$(date +%s%N)
printf 'direct=%s %s\n' "$rc" "$(( (e-s)/1000000 ))"
printf 'udp=%s\n' "$(python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"x", ("ADDR", 9)); print("sent")
except OSError as e:
    print(e.errno)
')"
printf 'dns=%s\n' "$(python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
try:
    s.sendto(b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01", ("ADDR", 53)); s.recv(512); print("answered")
except OSError as e:
    print(e.errno)
')"
printf 'icmp=%s\n' "$(python3 -c '
import socket
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("ADDR", 0)); print("sent")
except OSError as e:
    print(e.errno)
')"
curl --noproxy '*' -6 -s -o /dev/null --max-time 5 'http://[ADDR6]/'; printf 'ipv6=%s\n' "$?"
`

// The acceptance run of the egress issue: inside a real sandbox, allowed
// destinations work over HTTP and HTTPS; a denied host, a wrong port, a
// binary outside the entry (python3, a copy of curl) and an SSRF target
// get 403 JSON naming the reason; a direct connection fails within a
// second and is recorded as a bypass with pid and binary; UDP, DNS, ICMP
// and IPv6 fail; nothing but the proxy reaches the internet.
func TestEgressEndToEnd(t *testing.T) {
	l := newLab(t, "")
	addr := l.inet.V4[2].String()
	addr6 := "2001:db8::10"
	if len(l.inet.V6) > 2 {
		addr6 = l.inet.V6[2].String()
	}
	script := strings.ReplaceAll(strings.ReplaceAll(egressScript, "ADDR6", addr6), "ADDR", addr)
	out, err := l.command(script).Output()
	if err != nil {
		t.Fatalf("sandbox: %v\n%s", err, out)
	}
	r := results(out)
	t.Logf("results: %v", r)
	for _, k := range []string{"http_allowed", "https_allowed"} {
		if !strings.HasPrefix(r[k], "200 ") || !strings.Contains(r[k], `"host":"allowed.test`) {
			t.Errorf("%s: %q, want 200 from allowed.test", k, r[k])
		}
	}
	for k, want := range map[string][2]string{
		"denied_host":  {"policy_denied", "no_matching_endpoint"},
		"wrong_port":   {"policy_denied", "port_not_allowed"},
		"copy_of_curl": {"policy_denied", "binary_not_allowed"},
		"ssrf":         {"ssrf_denied", ""},
	} {
		code, body, _ := strings.Cut(r[k], " ")
		if code != "403" {
			t.Errorf("%s: %q, want 403", k, r[k])
			continue
		}
		d := denial(t, body)
		if d["error"] != want[0] || (want[1] != "" && d["reason"] != want[1]) {
			t.Errorf("%s: body %v, want error %s reason %s", k, d, want[0], want[1])
		}
		for _, f := range []string{"host", "port", "binary", "pid", "policy", "reason"} {
			if _, ok := d[f]; !ok {
				t.Errorf("%s: denial body lacks %q: %v", k, f, d)
			}
		}
		if k == "copy_of_curl" && d["binary"] != "/tmp/curl" {
			t.Errorf("copy_of_curl: binary %v, want /tmp/curl", d["binary"])
		}
	}
	// The denial names the caller by the pid it has in the sandbox's pid
	// namespace (what os.getpid() says there), never by its host pid;
	// the event keeps the host pid.
	pyCode, rest, _ := strings.Cut(r["python"], " ")
	pyPID, pyBody, _ := strings.Cut(rest, " ")
	var pyDenial map[string]any
	if pyCode == "403" {
		pyDenial = denial(t, pyBody)
	}
	if pyDenial == nil || pyDenial["reason"] != "binary_not_allowed" {
		t.Fatalf("python3 through the proxy: %q, want 403 binary_not_allowed", r["python"])
	}
	if got := fmt.Sprint(pyDenial["pid"]); got != pyPID {
		t.Errorf("python3's denial names pid %s; python3's pid in the sandbox is %s", got, pyPID)
	}
	pyHostPID := 0
	for _, e := range l.eventLines() {
		a, _ := e["actor"].(map[string]any)
		pr, _ := a["process"].(map[string]any)
		f, _ := pr["file"].(map[string]any)
		if pid, ok := pr["pid"].(float64); ok && e["action"] == "Denied" && strings.Contains(fmt.Sprint(f["path"]), "python3") {
			pyHostPID = int(pid)
		}
	}
	if pyHostPID == 0 || strconv.Itoa(pyHostPID) == pyPID {
		t.Errorf("python3's denial event names host pid %d; want the host pid, not the sandbox's %s", pyHostPID, pyPID)
	}
	rc, ms, _ := strings.Cut(r["direct"], " ")
	if n, _ := strconv.Atoi(ms); rc == "0" || n > 1000 {
		t.Errorf("direct connection: curl exit %s after %s ms, want a failure within 1 s", rc, ms)
	}
	for _, k := range []string{"udp", "dns", "icmp"} {
		if v := r[k]; v == "sent" || v == "answered" || v == "" {
			t.Errorf("%s: %q, want an error", k, v)
		}
	}
	if r["ipv6"] == "0" || r["ipv6"] == "" {
		t.Errorf("ipv6: curl exit %q, want a failure", r["ipv6"])
	}

	// Only the proxy reached the internet, and only for the allowed host.
	for _, h := range l.inet.Hits() {
		if h.Server == "udp" || h.Local.Addr().String() == addr || h.Local.Addr().String() == addr6 {
			t.Errorf("something reached the internet around the proxy: %+v", h)
		}
		if (h.Server == "http" || h.Server == "https") && h.Host != "allowed.test" {
			t.Errorf("denied host reached: %+v", h)
		}
	}
	if n, err := l.inet.ICMPEchoRequests(); err == nil && n != 0 {
		t.Errorf("%d pings reached the internet", n)
	}

	// Events: all valid OCSF; the bypass is a finding with pid and binary.
	// Connections in a real sandbox are attributed through eBPF (the
	// default, auto, on this kernel), most by their records alone.
	var bypass, denies, allows, viaBPF, viaFast, viaOther int
	var backendEvent bool
	for _, e := range l.eventLines() {
		if e["class_uid"].(float64) == 5019 && e["activity_name"] == "Attribution Backend" {
			backendEvent = e["message"] == "connection attribution through bpf"
		}
		if u, ok := e["unmapped"].(map[string]any); ok {
			if ep, ok := u["egress_proxy"].(map[string]any); ok && ep["listener"] == "proxy" {
				switch ep["attribution"] {
				case "bpf":
					viaBPF++
				case "bpf/fast":
					viaFast++
				default:
					viaOther++
				}
			}
		}
		switch e["class_uid"].(float64) {
		case 2004:
			fi, _ := e["finding_info"].(map[string]any)
			if types, _ := json.Marshal(fi["types"]); strings.Contains(string(types), "Bypass") {
				b, _ := json.Marshal(e)
				if strings.Contains(string(b), `"pid"`) && strings.Contains(string(b), "/usr/bin/curl") && strings.Contains(string(b), addr) {
					bypass++
				}
			}
		case 4001, 4002:
			switch e["action"] {
			case "Denied":
				denies++
			case "Allowed":
				allows++
			}
		}
	}
	if bypass == 0 {
		t.Error("no bypass finding naming the pid, /usr/bin/curl and the destination")
	}
	if denies < 5 || allows < 2 {
		t.Errorf("network events: %d denied, %d allowed", denies, allows)
	}
	if !backendEvent || viaFast == 0 || viaOther != 0 {
		t.Errorf("attribution: backend event for bpf %v; connections via bpf/fast %d, bpf %d, other %d; want all through eBPF",
			backendEvent, viaFast, viaBPF, viaOther)
	}
}

const reloadScript = `python3 - <<'EOF'
import os, socket, time
h, port = os.environ["HTTP_PROXY"][len("http://"):].rsplit(":", 1)
def connect():
    s = socket.create_connection((h, int(port)), timeout=10)
    s.sendall(b"CONNECT allowed.test:7 HTTP/1.1\r\nHost: allowed.test:7\r\n\r\n")
    resp = b""
    while b"\r\n\r\n" not in resp:
        c = s.recv(4096)
        if not c:
            break
        resp += c
    return s, resp.split(b"\r\n")[0].decode()
s, st = connect()
print("first=" + st, flush=True)
s.sendall(b"a\n"); print("echo1=" + s.recv(16).decode().strip(), flush=True)
open("ready", "w").close()
deadline = time.time() + 30
while not os.path.exists("go") and time.time() < deadline:
    time.sleep(0.05)
s.sendall(b"b\n"); print("echo2=" + s.recv(16).decode().strip(), flush=True)
s2, st2 = connect()
print("second=" + st2, flush=True)
EOF`

// Hot reload: a tightened policy denies new connections while an open
// tunnel keeps working; an invalid file keeps the last-known-good and says
// so in an event.
func TestEgressHotReload(t *testing.T) {
	l := newLab(t, labPythonEcho)
	cmd := l.command(reloadScript)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(filepath.Join(l.wd, "ready")); return err == nil })
	// An invalid policy first: rejected, last-known-good stays.
	l.write("version: 1\nnetwork_policies: [this is not valid\n")
	waitFor(t, 10*time.Second, func() bool { return l.countEvents(`"status":"Failure"`) > 0 })
	// Then the tightened one: python3 loses its entry.
	l.write(fmt.Sprintf(labPolicy, ""))
	waitFor(t, 10*time.Second, func() bool { return l.countEvents(`"activity_name":"Policy Reload"`, `"status":"Success"`) > 0 })
	os.WriteFile(filepath.Join(l.wd, "go"), nil, 0o644)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sandbox: %v\n%s", err, out.String())
	}
	r := results(out.Bytes())
	if !strings.Contains(r["first"], " 200") || r["echo1"] != "a" {
		t.Fatalf("before the reload: %v", r)
	}
	if r["echo2"] != "b" {
		t.Errorf("the open tunnel did not survive the reload: %v", r)
	}
	if !strings.Contains(r["second"], " 403") {
		t.Errorf("a new connection after tightening: %q, want 403", r["second"])
	}
}

// countEvents counts 5019 events containing every substring.
func (l *lab) countEvents(substrs ...string) int {
	data, _ := os.ReadFile(l.events)
	n := 0
	for _, line := range bytes.Split(data, []byte("\n")) {
		ok := bytes.Contains(line, []byte(`"class_uid":5019`))
		for _, s := range substrs {
			ok = ok && bytes.Contains(line, []byte(s))
		}
		if ok {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Proxy SIGKILL: egress fails (closed, never direct), the incident is
// recorded, the supervisor restarts the proxy and egress works again.
func TestEgressProxyKilled(t *testing.T) {
	l := newLab(t, "")
	// Back-to-back requests (each a few ms) so the restart window, at
	// least the 100 ms backoff, is always observed.
	script := `i=0; while [ $i -lt 3000 ]; do printf 'c=%s\n' "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://allowed.test/)"; [ -e stop ] && break; i=$((i+1)); done`
	cmd := l.command(script)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	next := func() string {
		if !sc.Scan() {
			t.Fatalf("sandbox output ended: %v", sc.Err())
		}
		return sc.Text()
	}
	if c := next(); c != "c=200" {
		t.Fatalf("before the kill: %s", c)
	}
	proxyPID := childByExe(t, cmd.Process.Pid, "egress-proxy")
	syscall.Kill(proxyPID, syscall.SIGKILL)
	var sawFailure, sawRecovery bool
	for i := 0; i < 2500 && !sawRecovery; i++ {
		switch c := next(); {
		case c != "c=200":
			sawFailure = true
		case sawFailure:
			sawRecovery = true
		}
	}
	os.WriteFile(filepath.Join(l.wd, "stop"), nil, 0o644)
	cmd.Wait()
	if !sawFailure || !sawRecovery {
		t.Fatalf("failure seen %v, recovery seen %v", sawFailure, sawRecovery)
	}
	found := false
	for _, e := range l.eventLines() {
		if b, _ := json.Marshal(e); e["class_uid"].(float64) == 2004 && strings.Contains(string(b), "Egress Proxy Down") {
			found = true
		}
	}
	if !found {
		t.Error("no incident event for the dead proxy")
	}
	// Nothing went around the proxy: every hit came from the host side.
	for _, h := range l.inet.Hits() {
		if netip.MustParsePrefix("10.200.0.0/16").Contains(h.Remote.Addr()) {
			t.Errorf("a sandbox address reached the internet directly: %+v", h)
		}
	}
}

// childByExe finds the child of parent (any of its threads) whose
// executable is named base, waiting up to 5 s for it to appear.
func childByExe(t *testing.T, parent int, base string) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", parent))
		for _, tp := range tasks {
			b, _ := os.ReadFile(tp)
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && filepath.Base(exe) == base {
					return pid
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s child of %d", base, parent)
	return 0
}

// Issue 16 item 8: with --events /dev/fd/3 the supervisor passes the
// caller's descriptor on to the egress proxy (as its fd 4), so the
// proxy's allow and deny events arrive on the same pipe as the
// supervisor's own, and the pipe ends when both are done.
func TestEgressEventsOnInheritedDescriptor(t *testing.T) {
	l := newLab(t, "")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(l.sup, "run", "--policy", l.policy, "--hosts-file", l.hosts, "--events", "/dev/fd/3",
		"--state-dir", l.state, "--workdir", l.wd, "--", "/bin/sh", "-c",
		"curl -s -o /dev/null --max-time 10 http://allowed.test/; curl -s -o /dev/null --max-time 10 http://denied.test/; echo ran")
	cmd.ExtraFiles = []*os.File{w}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	var data []byte
	select {
	case data = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the events pipe did not end within 60 s")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("supervisor: %v\n%s", err, errb.String())
	}
	ocsftest.ValidateLines(t, data)
	var allowed, denied, launched bool
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var e map[string]any
		if json.Unmarshal(line, &e) != nil {
			t.Fatalf("not JSON: %q", line)
		}
		switch e["class_uid"].(float64) {
		case 4001, 4002:
			allowed = allowed || (e["action"] == "Allowed" && bytes.Contains(line, []byte("allowed.test")))
			denied = denied || (e["action"] == "Denied" && bytes.Contains(line, []byte("denied.test")))
		case 1007:
			launched = true
		}
	}
	if !allowed || !denied || !launched {
		t.Errorf("events on fd 3: proxy allowed %v, proxy denied %v, supervisor launch %v\n%s\nstderr: %s", allowed, denied, launched, data, errb.String())
	}
}
