//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/caps"
	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
	"github.com/palisade-sandbox/palisade/pkg/proxy"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// proc is a running egress-proxy binary.
type proc struct {
	cmd    *exec.Cmd
	addr   string
	sock   string
	events string
	stderr *syncBuffer
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startProxy runs the built binary standalone on loopback and waits for
// "ready" on its ready pipe.
func startProxy(t *testing.T, policyPath, hostsFile string, extra ...string) *proc {
	t.Helper()
	return startProxyEnv(t, nil, policyPath, hostsFile, extra...)
}

// startProxyEnv is startProxy with the binary's environment (nil: this
// process's).
func startProxyEnv(t *testing.T, env []string, policyPath, hostsFile string, extra ...string) *proc {
	t.Helper()
	bin := testutil.Binary(t, "egress-proxy")
	dir := t.TempDir()
	p := &proc{
		addr:   fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		sock:   filepath.Join(dir, "proxy.sock"),
		events: filepath.Join(dir, "events.jsonl"),
		stderr: &syncBuffer{},
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p.cmd = exec.Command(bin, append([]string{"--policy", policyPath, "--listen", p.addr, "--hosts-file", hostsFile,
		"--control", p.sock, "--events", p.events, "--ready-fd", "3", "--deny-window", "0", "--log-format", "json"}, extra...)...)
	p.cmd.Stderr = p.stderr
	p.cmd.Env = env
	p.cmd.ExtraFiles = []*os.File{w}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if line != "ready\n" {
			t.Fatalf("ready pipe said %q; stderr:\n%s", line, p.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not ready after 10s; stderr:\n%s", p.stderr)
	}
	return p
}

// curl runs a curl binary through the proxy and returns status and body.
func curl(t *testing.T, bin, proxyAddr string, args ...string) (int, string) {
	t.Helper()
	full := append([]string{"-sS", "--max-time", "10", "-x", "http://" + proxyAddr, "-o", "-", "-w", "\n%{http_code}"}, args...)
	out, err := exec.Command(bin, full...).Output()
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	code, _ := strconv.Atoi(s[i+1:])
	if code == 0 {
		t.Logf("curl %v: %v %q", args, err, s)
	}
	return code, s[:max(i, 0)]
}

func TestStandaloneBinaryAgainstAFakeInternet(t *testing.T) {
	testutil.RequireRoot(t)
	curlBin := testutil.RequireCommand(t, "curl")
	in := nettest.NewInternet(t)
	server := in.V4[0].String()
	hosts := in.HostsFile(map[string]string{
		"allowed.test":  server,
		"denied.test":   server,
		"loopback.test": "127.0.0.1",
	})
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.yaml")
	policyText := `version: 1
network_policies:
  web:
    endpoints:
      - host: allowed.test
        ports: [80, 443]
      - host: loopback.test
        port: 80
    binaries:
      - path: ` + curlBin + `
`
	os.WriteFile(policyPath, []byte(policyText), 0o600)
	p := startProxy(t, policyPath, hosts, "--procs", "3")

	// Allowed over forward HTTP and over CONNECT (TLS end to end).
	code, body := curl(t, curlBin, p.addr, "http://allowed.test/hello?token=SECRET")
	if code != 200 || !strings.Contains(body, `"server":"http"`) {
		t.Fatalf("http: %d %s", code, body)
	}
	code, body = curl(t, curlBin, p.addr, "--cacert", in.CAFile(), "https://allowed.test/tls")
	if code != 200 || !strings.Contains(body, `"sni":"allowed.test"`) {
		t.Fatalf("https: %d %s", code, body)
	}
	// Denied: another host, a wrong port, loopback behind an allowed name,
	// and the same request from a copy of curl at another path.
	deny := func(what, wantErr, wantReason string, bin string, args ...string) {
		t.Helper()
		code, body := curl(t, bin, p.addr, args...)
		var d proxy.DenialBody
		if err := json.Unmarshal([]byte(body), &d); err != nil || code != 403 || d.Error != wantErr || d.Reason != wantReason {
			t.Errorf("%s: %d %s, want 403 %s/%s", what, code, body, wantErr, wantReason)
		}
	}
	deny("other host", "policy_denied", "no_matching_endpoint", curlBin, "http://denied.test/")
	deny("wrong port", "policy_denied", "port_not_allowed", curlBin, "http://allowed.test:8080/")
	deny("ssrf", "ssrf_denied", "loopback", curlBin, "http://loopback.test/")
	copied := filepath.Join(dir, "curl")
	if b, err := os.ReadFile(curlBin); err == nil {
		os.WriteFile(copied, b, 0o755)
	}
	deny("copied curl", "policy_denied", "binary_not_allowed", copied, "http://allowed.test/")
	for _, h := range in.Hits() {
		if h.Host == "denied.test" || strings.HasPrefix(h.Host, "allowed.test:8080") {
			t.Errorf("a denied request reached the internet: %+v", h)
		}
	}

	// Control socket: status and metrics.
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", p.sock)
	}}}
	defer cl.CloseIdleConnections()
	var st proxy.Status
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err := cl.Get("http://proxy/status")
		if err != nil {
			t.Fatal(err)
		}
		st = proxy.Status{}
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		// The last denial's books close once its client has gone.
		if st.Counters.ActiveConnections == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Counters.Allowed != 2 || st.Counters.Denied != 4 || st.Policy.Generation != 1 {
		t.Errorf("status: %+v", st)
	}
	resp, err := cl.Get("http://proxy/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "\npalisade_proxy_go_maxprocs 3\n") {
		t.Errorf("--procs 3 not in force; metrics:\n%s", metrics)
	}

	// SIGHUP reloads a tightened policy.
	os.WriteFile(policyPath, []byte(strings.Replace(policyText, "ports: [80, 443]", "ports: [443]", 1)), 0o600)
	p.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _ := curl(t, curlBin, p.addr, "http://allowed.test/"); code == 403 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tightened policy not in force after SIGHUP; stderr:\n%s", p.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Capabilities: a cgo-free build keeps only the two it needs.
	if s, err := caps.ReadStatus(p.cmd.Process.Pid); err == nil {
		want := uint64(1)<<19 | uint64(1)<<2
		if strings.Contains(p.stderr.String(), "capabilities not dropped") {
			t.Logf("binary built with cgo: capabilities kept (CapEff %#x)", s.CapEff)
		} else if s.CapEff != want || s.CapPrm != want || s.NoNewPrivs != 1 {
			t.Errorf("CapEff %#x CapPrm %#x NoNewPrivs %d, want %#x and 1", s.CapEff, s.CapPrm, s.NoNewPrivs, want)
		}
	}

	// SIGTERM: clean exit 0.
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, p.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}

	// Every event is valid OCSF and none leaks the query string.
	data, err := os.ReadFile(p.events)
	if err != nil {
		t.Fatal(err)
	}
	if n := ocsftest.ValidateLines(t, data); n < 8 {
		t.Errorf("%d events, want at least 8 (load, reload, 7 connections)", n)
	}
	if bytes.Contains(data, []byte("SECRET")) {
		t.Error("events leak a query string")
	}
	for _, want := range []string{`"class_uid":4002`, `"status_code":"ssrf_denied"`, `"binary_not_allowed"`, `"activity_name":"Policy Reload"`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("events lack %s", want)
		}
	}
	if _, err := os.Stat(p.sock); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
}
