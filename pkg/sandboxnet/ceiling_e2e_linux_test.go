//go:build linux

package sandboxnet

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The proxy of a running sandbox refuses a reload beyond the ceiling the
// supervisor gave it: the rejection event names the excess, and the host
// the new policy would have opened stays closed. (The supervisor refuses
// such a policy before the sandbox exists; the proxy checks again because
// the file may change between the two.)
func TestCeilingRefusesReloadInSandbox(t *testing.T) {
	l := newLab(t, "")
	ceil := filepath.Join(t.TempDir(), "ceiling.yaml")
	os.Chmod(filepath.Dir(ceil), 0o755)
	os.WriteFile(ceil, []byte(fmt.Sprintf(labPolicy, "")), 0o600)
	script := `
while [ ! -e go ] && [ $((n+=1)) -lt 600 ]; do sleep 0.05; done
printf 'denied=%s\n' "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://denied.test/)"
printf 'allowed=%s\n' "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://allowed.test/)"
`
	cmd := exec.Command(l.sup, "run", "--ceiling", ceil, "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--workdir", l.wd, "--", "/bin/sh", "-c", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor(t, 30*time.Second, func() bool { return l.countEvents(`"activity_name":"Policy Load"`, `"source":"egress-proxy"`) > 0 })
	wider := fmt.Sprintf(labPolicy, "  more:\n    endpoints: [{host: denied.test, port: 80}]\n    binaries: [{path: /usr/bin/curl}]\n")
	l.write(wider)
	want := "policy exceeds the ceiling " + ceil + ": network_policies.more.endpoints[0]: host denied.test not within the ceiling"
	waitFor(t, 10*time.Second, func() bool { return l.countEvents(`"status":"Failure"`, want) > 0 })
	os.WriteFile(filepath.Join(l.wd, "go"), nil, 0o644)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sandbox: %v\n%s", err, out.String())
	}
	r := results(out.Bytes())
	if r["denied"] != "403" || r["allowed"] != "200" {
		t.Fatalf("after the refused reload: %v", r)
	}
	if n := l.countEvents(`"activity_name":"Policy Reload"`, `"status":"Success"`); n != 0 {
		t.Errorf("%d reloads accepted", n)
	}
	if data, _ := os.ReadFile(l.events); !strings.Contains(string(data), `"hostname":"denied.test"`) {
		t.Error("no event for the denied connection")
	}
}
