//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// connLines returns the proxy's "connection" log lines (JSON logs).
func connLines(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "connection" {
			out = append(out, m)
		}
	}
	return out
}

// helpExamples returns the standalone HTTPS_PROXY example lines of
// --help, each split into the command and its "# expectation".
func helpExamples(t *testing.T) [][2]string {
	t.Helper()
	var ex [][2]string
	for _, l := range strings.Split(usage, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "HTTPS_PROXY=http://127.0.0.1:3128 ") {
			cmd, want, _ := strings.Cut(l, "#")
			ex = append(ex, [2]string{strings.TrimSpace(cmd), strings.TrimSpace(want)})
		}
	}
	if len(ex) == 0 {
		t.Fatal("--help has no HTTPS_PROXY example")
	}
	return ex
}

// Issue 16 item 6, through the real binary on the rendered fleet policy
// the --help example names: the standalone example does what its
// comment says (git reaches GitHub; curl is denied, binary_not_allowed;
// before the fix the only example was the curl line, which the policy
// denies); defaults start without a descriptor-limit warning; an allowed
// connection logs nothing at the default level and one line at
// --log-level debug, a denial logs at warn.
func TestStandaloneHelpExampleAndQuietDefaults(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "curl")
	gitBin := testutil.RequireCommand(t, "git")
	in := nettest.NewInternet(t)
	hosts := in.HostsFile(map[string]string{"github.com": in.V4[0].String(), "api.github.com": in.V4[0].String()})
	tmpl, err := os.ReadFile("../../policies/mac-hermes-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text, err := policy.Render(tmpl, map[string]string{
		"AGENT_USER": "hermes", "MAC_HUB_HOST": "hub.example.internal", "MAC_HUB_PORT": "8080", "MODEL_GATEWAY_HOST": "models.example.com",
	})
	if err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "openshell-policy.yaml")
	os.WriteFile(pol, text, 0o600)

	// GitHub's endpoints are protocol: rest, so the proxy terminates
	// their TLS: clients trust its CA (--ca-out), it trusts the fake
	// internet's (--upstream-ca-bundle).
	proxyCA := filepath.Join(t.TempDir(), "proxy-ca.pem")
	trust := []string{"--ca-out", proxyCA, "--upstream-ca-bundle", in.CAFile()}
	runExample := func(p *proc, cmd string) {
		t.Helper()
		line := strings.Replace(cmd, "http://127.0.0.1:3128", "http://"+p.addr, 1)
		c := exec.Command("/bin/sh", "-c", line)
		c.Env = append(os.Environ(), "GIT_SSL_CAINFO="+proxyCA, "CURL_CA_BUNDLE="+proxyCA, "GIT_TERMINAL_PROMPT=0")
		c.Run() // the fake GitHub is no git server: only the proxy's decision counts
	}
	waitConn := func(p *proc, n int) []map[string]any {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ls := connLines(t, p.stderr.String())
			if len(ls) >= n || time.Now().After(deadline) {
				return ls
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Default level.
	p := startProxy(t, pol, hosts, trust...)
	if s := p.stderr.String(); strings.Contains(s, "RLIMIT_NOFILE") || strings.Contains(s, "descriptor limit") {
		t.Errorf("default settings warn about the descriptor limit:\n%s", s)
	}
	// The CA key lives in this process's memory only: no core file.
	if lim, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", p.cmd.Process.Pid)); err != nil {
		t.Error(err)
	} else if !regexp.MustCompile(`(?m)^Max core file size\s+0\s+0\s`).Match(lim) {
		t.Errorf("the proxy may dump core (its CA key with it):\n%s", lim)
	}
	for _, ex := range helpExamples(t) {
		runExample(p, ex[0])
	}
	ls := waitConn(p, 1)
	var deniedCurl bool
	for _, l := range ls {
		if l["outcome"] == "allowed" {
			t.Errorf("an allowed connection logged at the default level: %v", l)
		}
		if l["level"] == "INFO" && l["reason"] == "binary_not_allowed" && strings.HasSuffix(l["binary"].(string), "curl") {
			deniedCurl = true
		}
		if l["level"] == "WARN" || l["level"] == "ERROR" {
			// Issue 29 item 5: a denial is the proxy working, not a
			// warning for the operator.
			t.Errorf("a connection logged at %s: %v", l["level"], l)
		}
	}
	if !deniedCurl {
		t.Errorf("the curl example was not denied with binary_not_allowed at info; lines %v", ls)
	}
	events, _ := os.ReadFile(p.events)
	if !strings.Contains(string(events), `"hostname":"github.com"`) && !strings.Contains(string(events), "github.com") {
		t.Errorf("no event for the git example's github.com connection:\n%s", events)
	}

	// --log-level debug: the git example's allowed connection is a line.
	p = startProxy(t, pol, hosts, append(trust, "--log-level", "debug")...)
	for _, ex := range helpExamples(t) {
		if strings.Contains(ex[1], "allowed") {
			runExample(p, ex[0])
		}
	}
	var allowedGit bool
	for _, l := range waitConn(p, 1) {
		if l["outcome"] == "allowed" && l["host"] == "github.com" && strings.Contains(l["binary"].(string), "git") {
			allowedGit = true
		}
	}
	if !allowedGit {
		t.Errorf("the git example (%s) was not allowed, or not logged at debug:\n%s", gitBin, p.stderr.String())
	}
}

// Issue 16 item 6: a policy that does not load at start-up says so and
// exits 1, without claiming a last-known-good policy it does not have.
func TestStartupPolicyDoesNotLoad(t *testing.T) {
	bin := testutil.Binary(t, "egress-proxy")
	bad := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(bad, []byte("version: 1\nnetwork_policies: [\n"), 0o600)
	cmd := exec.Command(bin, "--policy", bad, "--listen", "127.0.0.1:0")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "policy does not load: ") || !strings.Contains(string(out), bad) || strings.Contains(string(out), "last-known-good") {
		t.Fatalf("exit %d, output:\n%s\nwant 1 and \"policy does not load: %s\", no last-known-good", code, out, bad)
	}
}

// Issue 16 item 8 for the proxy: --events /dev/fd/3 writes to the
// caller's pipe.
func TestEventsOnInheritedDescriptor(t *testing.T) {
	bin := testutil.Binary(t, "egress-proxy")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte("version: 1\nnetwork_policies: {}\n"), 0o600)
	evR, evW, _ := os.Pipe()
	readyR, readyW, _ := os.Pipe()
	defer evR.Close()
	defer readyR.Close()
	cmd := exec.Command(bin, "--policy", pol, "--listen", "127.0.0.1:0", "--events", "/dev/fd/3", "--ready-fd", "4")
	cmd.ExtraFiles = []*os.File{evW, readyW}
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	evW.Close()
	readyW.Close()
	if line, _ := bufio.NewReader(readyR).ReadString('\n'); line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("not ready (%q): %s", line, errb.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	data, _ := io.ReadAll(evR)
	cmd.Wait()
	if !strings.Contains(string(data), `"class_uid":5019`) {
		t.Fatalf("no policy event on fd 3: %q\n%s", data, errb.String())
	}
}
