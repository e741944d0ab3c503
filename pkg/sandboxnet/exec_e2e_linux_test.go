//go:build linux

package sandboxnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/fence"
	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

const execEgressScript = `
code() { printf '%s=' "$1"; shift; "$@" -s -o /tmp/body -w '%{http_code}' --max-time 10; printf ' %s\n' "$(cat /tmp/body 2>/dev/null | tr -d '\n')"; rm -f /tmp/body; }
code http_allowed curl http://allowed.test/
code denied_host curl http://denied.test/
s=$(date +%s%N); curl --noproxy '*' -s -o /dev/null --max-time 5 http://ADDR/; rc=$?; e=$(date +%s%N)
printf 'direct=%s %s\n' "$rc" "$(( (e-s)/1000000 ))"
touch /var/tmp/palisade-exec-probe 2>/dev/null; printf 'write_var_tmp=%s\n' "$?"
`

// An exec'd command is held to the sandbox's network rules exactly as the
// main command (TestEgressEndToEnd): allowed host through the proxy, 403
// policy_denied for another, a direct connection refused within a
// second. Its denial shows in `logs --denied` within a second. After a
// policy reload a new exec sees the new network rules, and still the
// static rules the sandbox was created with.
func TestExecEgressAndReload(t *testing.T) {
	l := newLab(t, "")
	addr := l.inet.V4[2].String()
	name := testutil.UniqueName("exe-")
	det := exec.Command(l.sup, "run", "--detach", "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--workdir", l.wd, "--name", name)
	if out, err := det.CombinedOutput(); err != nil {
		t.Fatalf("run --detach: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command(l.sup, "delete", "--state-dir", l.state, name).Run() })
	execScript := func(script string) map[string]string {
		t.Helper()
		cmd := exec.Command(l.sup, "exec", "--state-dir", l.state, name, "--", strings.ReplaceAll(script, "ADDR", addr))
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("exec: %v: %s%s", err, out, errb.String())
		}
		return results(out)
	}

	// A second exec, on a terminal, at the same time: the same rules.
	m, slave := testutil.Pty(t)
	ttyExec := exec.Command(l.sup, "exec", "--tty", "--state-dir", l.state, name, "--",
		`sleep 0.2; a=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://allowed.test/); d=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 http://denied.test/); echo "tty_allowed=$a tty_denied=$d tty=$(tty)"`)
	ttyExec.Stdin, ttyExec.Stdout, ttyExec.Stderr = slave, slave, slave
	if err := ttyExec.Start(); err != nil {
		t.Fatal(err)
	}
	ttyOut := make(chan string, 1)
	go func() {
		var b []byte
		buf := make([]byte, 1024)
		for !bytes.Contains(b, []byte("tty=")) || !bytes.Contains(b, []byte("\n")) {
			n, err := m.Read(buf)
			b = append(b, buf[:n]...)
			if err != nil {
				break
			}
		}
		ttyOut <- string(b)
	}()
	r := execScript(execEgressScript)
	execEnded := time.Now()
	if err := ttyExec.Wait(); err != nil {
		t.Errorf("tty exec: %v", err)
	}
	select {
	case got := <-ttyOut:
		if !strings.Contains(got, "tty_allowed=200 tty_denied=403 tty=/dev/pts/") {
			t.Errorf("the concurrent tty exec saw other network rules: %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Error("no output from the tty exec")
	}
	if !strings.HasPrefix(r["http_allowed"], "200 ") {
		t.Errorf("http_allowed: %q, want 200", r["http_allowed"])
	}
	if code, body, _ := strings.Cut(r["denied_host"], " "); code != "403" || denial(t, body)["reason"] != "no_matching_endpoint" {
		t.Errorf("denied_host: %q, want 403 no_matching_endpoint", r["denied_host"])
	}
	rc, ms, _ := strings.Cut(r["direct"], " ")
	var msN int
	fmt.Sscan(ms, &msN)
	if rc == "0" || msN > 1000 {
		t.Errorf("direct connection: curl exit %s after %s ms, want a failure within 1 s", rc, ms)
	}
	if r["write_var_tmp"] == "0" {
		t.Errorf("exec wrote /var/tmp, outside the policy")
	}

	// logs --denied shows the exec'd curl's denial within a second.
	var logs string
	for {
		out, _ := exec.Command(l.sup, "logs", "--denied", "--state-dir", l.state, name).Output()
		logs = string(out)
		if strings.Contains(logs, "-> denied.test:80 policy_denied/no_matching_endpoint") || time.Since(execEnded) > time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs, "DENY /usr/bin/curl(") || !strings.Contains(logs, "-> denied.test:80 policy_denied/no_matching_endpoint") {
		t.Errorf("logs --denied a second after the exec:\n%s", logs)
	}
	t.Logf("logs --denied:\n%s", logs)
	// The exec'd command's launch and end are events too, valid OCSF,
	// naming the shell the init ran.
	launches, ends := 0, 0
	for _, e := range l.eventLines() {
		p, _ := e["process"].(map[string]any)
		if e["class_uid"] == float64(1007) && p != nil && (p["name"] == "bash" || p["name"] == "sh") {
			switch e["activity_name"] {
			case "Launch":
				launches++
			case "Terminate":
				ends++
			}
		}
	}
	if launches != 2 || ends != 2 {
		t.Errorf("events of the exec'd shells: %d launches, %d terminations, want 2 each", launches, ends)
	}
	out, _ := exec.Command(l.sup, "logs", "--json", "--state-dir", l.state, name).Output()
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			t.Fatalf("logs --json printed %q", line)
		}
	}

	// Reload: denied.test is allowed now, and the new file also grants
	// /var/tmp, which the running sandbox must not get.
	widened := strings.Replace(fmt.Sprintf(labPolicy, ""), "      - host: loopy.test\n", "      - host: denied.test\n        port: 80\n      - host: loopy.test\n", 1)
	widened = strings.Replace(widened, "read_write: [/tmp]", "read_write: [/tmp, /var/tmp]", 1)
	l.write(widened)
	waitFor(t, 10*time.Second, func() bool { return l.countEvents(`"activity_name":"Policy Reload"`, `"status":"Success"`) > 0 })
	r = execScript(execEgressScript)
	if !strings.HasPrefix(r["denied_host"], "200 ") {
		t.Errorf("after the reload: denied_host %q, want 200", r["denied_host"])
	}
	if r["write_var_tmp"] == "0" {
		t.Errorf("after the reload an exec wrote /var/tmp: static rules must stay those of the sandbox's creation")
	}
	os.Remove("/var/tmp/palisade-exec-probe")

	// delete --expect-id tears down what a finished run does: the owner,
	// the init, the proxy, the host side of the fence, the state.
	store, err := state.Open(l.state)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := store.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	proxyPID := childByExe(t, lb.CreatorPID, "egress-proxy")
	if _, err := net.InterfaceByName(fence.HostIfName(name)); err != nil {
		t.Fatalf("host veth %s missing while the sandbox runs: %v", fence.HostIfName(name), err)
	}
	if out, err := exec.Command(l.sup, "delete", "--expect-id", lb.ID, "--state-dir", l.state, name).CombinedOutput(); err != nil {
		t.Fatalf("delete: %v %s", err, out)
	}
	for _, pid := range []int{lb.CreatorPID, lb.InitPID, proxyPID} {
		if _, err := state.ProcStartTime(pid); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("pid %d still runs after delete", pid)
		}
	}
	if _, err := net.InterfaceByName(fence.HostIfName(name)); err == nil {
		t.Errorf("host veth %s left after delete", fence.HostIfName(name))
	}
	if _, err := store.Get(name); err == nil {
		t.Error("state left after delete")
	}
}
