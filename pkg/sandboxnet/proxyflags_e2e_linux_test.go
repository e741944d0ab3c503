//go:build linux

package sandboxnet

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// ttlScript asks the policy DNS for echo.test from inside the sandbox,
// prints the answer's TTL as the sandbox's resolver sees it, then waits
// (at most 30 s) for the test to write "stop" into the workdir.
const ttlScript = `
python3 - <<'PY'
import os, socket, struct, time
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
q = b"\x00\x07\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04echo\x04test\x00\x00\x01\x00\x01"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.sendto(q, (ns, 53))
r = u.recv(512)
i = 12
while r[i]:
    i += r[i] + 1
i += 5
if r[i] & 0xc0 == 0xc0:
    i += 2
else:
    while r[i]:
        i += r[i] + 1
    i += 1
print("answers=%d" % struct.unpack(">H", r[6:8])[0])
print("ttl=%d" % struct.unpack(">I", r[i+4:i+8])[0], flush=True)
for _ in range(300):
    if os.path.exists("stop"):
        break
    time.sleep(0.1)
PY
`

// run --dns-ttl and --proxy-procs reach the sandbox's egress proxy: the
// policy DNS answers with the given TTL and the proxy runs proxy code on
// the given number of CPUs (its palisade_proxy_go_maxprocs gauge). Both
// differ from the proxy's defaults (5 s, 1), so a supervisor that did
// not pass them fails here.
func TestRunPassesDNSTTLAndProcsToTheProxy(t *testing.T) {
	testutil.RequireCommand(t, "python3")
	l := newLab(t, labTCPEcho)
	name := testutil.UniqueName("pf-")
	cmd := exec.Command(l.sup, "run", "--name", name, "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--workdir", l.wd, "--dns-ttl", "7s", "--proxy-procs", "2", "--", "/bin/sh", "-c", ttlScript)
	cmd.Stderr = testutil.LogWriter(t, "sandbox-supervisor")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
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
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			r[k] = v
		}
		if _, ok := r["ttl"]; ok {
			break
		}
	}
	if r["answers"] != "1" || r["ttl"] != "7" {
		t.Errorf("policy DNS answer for echo.test in the sandbox: %q answers, TTL %q; want 1 answer with TTL 7 (--dns-ttl 7s)", r["answers"], r["ttl"])
	}
	metrics := controlGet(t, filepath.Join(l.state, name, ControlSocketName), "/metrics")
	if !strings.Contains(metrics, "\npalisade_proxy_go_maxprocs 2\n") {
		t.Errorf("the proxy's metrics do not show --proxy-procs 2:\n%s", grepLines(metrics, "maxprocs"))
	}
	stop()
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// --dns-ttl with a policy that allows no egress is ignored with a
// warning naming it (no proxy, so no policy DNS, runs); the run goes
// ahead. (Every sandbox with a proxy runs the policy DNS.)
func TestRunWarnsDNSTTLWithoutEgress(t *testing.T) {
	l := newLab(t, "")
	head := labPolicy[:strings.Index(labPolicy, "network_policies:")]
	l.write(head + "network_policies: {}\n")
	cmd := exec.Command(l.sup, "run", "--policy", l.policy,
		"--state-dir", l.state, "--workdir", l.wd, "--dns-ttl", "7s", "--", "/bin/true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--dns-ttl ignored: the policy allows no egress") {
		t.Errorf("no warning that --dns-ttl is ignored:\n%s", out)
	}
}

// controlGet GETs path from a proxy's control socket.
func controlGet(t *testing.T, sock, path string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := c.Get("http://proxy" + path)
	if err != nil {
		t.Fatalf("control socket %s: %v", sock, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
