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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/fence"
	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
	"github.com/palisade-sandbox/palisade/pkg/proxy"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// sandboxLab is a minimal sandbox: a process in its own network namespace
// and cgroup, fenced to a throwaway "host" namespace where the proxy runs
// and a fake internet is routed.
type sandboxLab struct {
	t        *testing.T
	name     string
	hostNs   string // /run/netns/<name>
	initPID  int
	group    *cgroup.Group
	fence    *fence.Fence
	internet *nettest.Internet
}

func newSandboxLab(t *testing.T) *sandboxLab {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "ns:net")
	testutil.RequireCommand(t, "nsenter")
	if err := cgroup.Supported(); err != nil {
		testutil.RequireFeature(t, "cgroup:pids")
	}
	l := &sandboxLab{t: t, name: testutil.UniqueName("pxt")}
	hostName, hostNs := testutil.NamedNetns(t, "pxh")
	l.hostNs = "/run/netns/" + hostName

	// The sandbox init: a sleeper in a new network namespace.
	init := exec.Command("sleep", "600")
	init.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := init.Start(); err != nil {
		t.Fatal(err)
	}
	l.initPID = init.Process.Pid
	t.Cleanup(func() { init.Process.Kill(); init.Wait() })

	g, err := cgroup.New(l.name, cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	l.group = g
	t.Cleanup(func() {
		g.Kill()
		if err := g.Destroy(); err != nil {
			t.Errorf("destroy cgroup: %v", err)
		}
	})
	if err := g.AddPID(l.initPID); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := fence.Setup(ctx, fence.Config{
		Sandbox:   l.name,
		NetnsPath: fmt.Sprintf("/proc/%d/ns/net", l.initPID),
		ProxyPort: 3128,
		FencePort: 3129,
		StateDir:  t.TempDir(),
		HostNetns: l.hostNs,
	})
	if err != nil {
		t.Fatal(err)
	}
	l.fence = f
	t.Cleanup(func() {
		if err := f.Teardown(); err != nil {
			t.Errorf("fence teardown: %v", err)
		}
	})
	l.internet = nettest.NewInternet(t, nettest.WithHostNetns(hostNs))
	return l
}

// inSandbox runs argv inside the sandbox: in its network namespace and,
// before it execs, in its cgroup (the shell waits for a line on stdin
// until the test has moved it there).
func (l *sandboxLab) inSandbox(argv ...string) (string, error) {
	l.t.Helper()
	script := `read go; exec "$@"`
	cmd := exec.Command("nsenter", append([]string{"--net=/proc/" + strconv.Itoa(l.initPID) + "/ns/net", "--", "sh", "-c", script, "sh"}, argv...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	if err := l.group.AddPID(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		l.t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	stdin.Close()
	err = cmd.Wait()
	return out.String(), err
}

// labProxy is an egress-proxy running for a sandboxLab.
type labProxy struct {
	sock, events string
	stderr       *syncBuffer
	stop         func() // SIGTERM and wait (events are complete after it)
}

// startProxy runs egress-proxy in the lab's "host" namespace, as
// sandbox-supervisor starts it (the same flags, readiness on fd 3), with a
// policy letting bin reach allowed.test:80; prefix runs before it (for
// example setpriv). It waits until the proxy is ready.
func (l *sandboxLab) startProxy(t *testing.T, bin string, prefix []string, extra ...string) *labProxy {
	t.Helper()
	hosts := l.internet.HostsFile(map[string]string{"allowed.test": l.internet.V4[0].String(), "denied.test": l.internet.V4[0].String()})
	policyPath := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(policyPath, []byte(`version: 1
network_policies:
  web:
    endpoints:
      - host: allowed.test
        port: 80
    binaries:
      - path: `+bin+`
`), 0o600)
	stateDir := t.TempDir()
	lp := &labProxy{sock: filepath.Join(stateDir, "proxy.sock"), events: filepath.Join(stateDir, "events.jsonl"), stderr: &syncBuffer{}}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	args := append([]string{"--net=" + l.hostNs, "--"}, prefix...)
	args = append(args, testutil.Binary(t, "egress-proxy"),
		"--policy", policyPath,
		"--listen", l.fence.ProxyAddr().String(),
		"--fence-listen", l.fence.FenceAddr().String(),
		"--sandbox", l.name, "--cgroup", l.name, "--init-pid", strconv.Itoa(l.initPID),
		"--control", lp.sock, "--events", lp.events, "--hosts-file", hosts,
		"--ready-fd", "3", "--log-format", "json")
	args = append(args, extra...)
	px := exec.Command("nsenter", args...)
	px.ExtraFiles = []*os.File{w}
	px.Stderr = lp.stderr
	if err := px.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var once sync.Once
	lp.stop = func() { once.Do(func() { px.Process.Signal(syscall.SIGTERM); px.Wait() }) }
	t.Cleanup(lp.stop)
	ready := make(chan string, 1)
	go func() { line, _ := bufio.NewReader(r).ReadString('\n'); ready <- line }()
	select {
	case line := <-ready:
		if line != "ready\n" {
			t.Fatalf("ready: %q\n%s", line, lp.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not ready\n%s", lp.stderr)
	}
	return lp
}

// A proxy that may not load eBPF programs (no CAP_BPF or CAP_SYS_ADMIN in
// its bounding set) falls back to /proc under the default --attribution
// auto: a Device Config State Change says so with the reason, attribution
// still works, and each connection event names proc.
func TestSandboxModeFallsBackToProc(t *testing.T) {
	curlBin := testutil.RequireCommand(t, "curl")
	setpriv := testutil.RequireCommand(t, "setpriv")
	l := newSandboxLab(t)
	lp := l.startProxy(t, curlBin, []string{setpriv, "--bounding-set", "-bpf,-sys_admin,-perfmon", "--"})
	out, err := l.inSandbox(curlBin, "-sS", "--max-time", "5", "-x", "http://"+l.fence.ProxyAddr().String(), "http://allowed.test/fallback")
	if err != nil || !strings.Contains(out, `"server":"http"`) {
		t.Fatalf("allowed from the sandbox: %v %s\n%s", err, out, lp.stderr)
	}
	st := controlStatus(t, lp.sock)
	if st.Attribution["lookups"] != 1 || st.Attribution["bpf_fast"] != 0 {
		t.Errorf("attribution counters %v: want one /proc lookup and no eBPF", st.Attribution)
	}
	deadline := time.Now().Add(5 * time.Second)
	var fallback, viaProc bool
	for !(fallback && viaProc) && time.Now().Before(deadline) {
		data, _ := os.ReadFile(lp.events)
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var ev map[string]any
			json.Unmarshal(line, &ev)
			if get(ev, "class_uid") == float64(5019) && get(ev, "activity_name") == "Attribution Backend" {
				detail, _ := get(ev, "status_detail").(string)
				fallback = get(ev, "severity_id") == float64(2) && get(ev, "status_id") == float64(2) && strings.Contains(detail, "bpf")
			}
			if get(ev, "unmapped", "egress_proxy", "listener") == "proxy" {
				viaProc = get(ev, "unmapped", "egress_proxy", "attribution") == "proc"
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !fallback || !viaProc {
		data, _ := os.ReadFile(lp.events)
		t.Errorf("want a Low 5019 fallback event naming the eBPF failure (%v) and a connection attributed by proc (%v)\n%s", fallback, viaProc, data)
	}
}

// With --attribution proc, sockets are found through the exact sock_diag
// lookup, in a proxy that dropped CAP_SYS_ADMIN after start-up: a lookup
// that misses there reads the namespace's whole /proc/<pid>/net/tcp table
// instead (the regression this catches: every connection took that path).
func TestSandboxModeProcUsesSockDiag(t *testing.T) {
	curlBin := testutil.RequireCommand(t, "curl")
	l := newSandboxLab(t)
	lp := l.startProxy(t, curlBin, nil, "--attribution", "proc")
	proxyURL := "http://" + l.fence.ProxyAddr().String()
	for _, path := range []string{"/one", "/two"} {
		if out, err := l.inSandbox(curlBin, "-sS", "--max-time", "5", "-x", proxyURL, "http://allowed.test"+path); err != nil || !strings.Contains(out, `"server":"http"`) {
			t.Fatalf("allowed from the sandbox: %v %s\n%s", err, out, lp.stderr)
		}
	}
	st := controlStatus(t, lp.sock)
	if st.Attribution["sock_diag"] < 2 || st.Attribution["proc_tables"] != 0 || st.Attribution["bpf_fast"] != 0 {
		t.Errorf("attribution counters %v: want every socket found by sock_diag (>= 2), no /proc table read, no eBPF\n%s", st.Attribution, lp.stderr)
	}
}

func TestSandboxModeWithFence(t *testing.T) {
	curlBin := testutil.RequireCommand(t, "curl")
	l := newSandboxLab(t)
	lp := l.startProxy(t, curlBin, nil)
	sock, events, stderr := lp.sock, lp.events, lp.stderr

	proxyURL := "http://" + l.fence.ProxyAddr().String()
	out, err := l.inSandbox(curlBin, "-sS", "--max-time", "5", "-x", proxyURL, "http://allowed.test/in-sandbox")
	if err != nil || !strings.Contains(out, `"server":"http"`) {
		t.Fatalf("allowed from the sandbox: %v %s\n%s", err, out, stderr)
	}
	out, _ = l.inSandbox(curlBin, "-sS", "--max-time", "5", "-x", proxyURL, "http://denied.test/")
	var d proxy.DenialBody
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Error != "policy_denied" || d.Binary != curlBin || d.PID == 0 {
		t.Fatalf("denied from the sandbox: %s", out)
	}
	// The default (auto) attributes through eBPF on this kernel: both
	// sockets were found by their 4-tuple in the programs' maps (no
	// sock_diag query, no /proc table read), and a plain curl's record is
	// trusted alone (the fast path).
	st := controlStatus(t, sock)
	if st.Attribution["bpf_by_tuple"] < 2 || st.Attribution["proc_tables"] != 0 {
		t.Errorf("attribution counters %v: want every socket found by 4-tuple (>= 2) and no /proc table read\n%s", st.Attribution, stderr)
	}
	if st.Attribution["bpf_fast"] < 2 || st.Attribution["bpf_exhaustive"] != 0 {
		t.Errorf("attribution counters %v: want both curls attributed by their eBPF records alone\n%s", st.Attribution, stderr)
	}
	// A direct connection around the proxy fails fast and is reported.
	start := time.Now()
	out, err = l.inSandbox(curlBin, "-sS", "--max-time", "5", "--noproxy", "*", "http://"+l.internet.V4[0].String()+"/direct")
	if err == nil {
		t.Fatalf("direct connection succeeded: %s", out)
	}
	if e := time.Since(start); e > 2*time.Second {
		t.Errorf("direct connection failed after %v, want well under the 5 s curl timeout", e)
	}
	for _, h := range l.internet.Hits() {
		if h.Path == "/direct" || h.Host == "denied.test" {
			t.Errorf("reached the internet around the policy: %+v", h)
		}
	}

	lp.stop()
	data, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	ocsftest.ValidateLines(t, data)
	var sawBypass, sawFinding, sawBackend bool
	var backends []any
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var ev map[string]any
		json.Unmarshal(line, &ev)
		pid, _ := get(ev, "actor", "process", "pid").(float64)
		exe, _ := get(ev, "actor", "process", "file", "path").(string)
		switch {
		case get(ev, "class_uid") == float64(4001) && get(ev, "activity_id") == float64(5):
			sawBypass = pid > 0 && exe == curlBin && get(ev, "dst_endpoint", "ip") == l.internet.V4[0].String()
		case get(ev, "class_uid") == float64(2004):
			sawFinding = pid > 0 && exe == curlBin
		case get(ev, "class_uid") == float64(5019) && get(ev, "activity_name") == "Attribution Backend":
			sawBackend = get(ev, "message") == "connection attribution through bpf"
		}
		if cls := get(ev, "class_uid"); (cls == float64(4001) || cls == float64(4002)) && get(ev, "unmapped", "egress_proxy", "listener") == "proxy" {
			backends = append(backends, get(ev, "unmapped", "egress_proxy", "attribution"))
		}
	}
	if !sawBackend || len(backends) != 2 || backends[0] != "bpf/fast" || backends[1] != "bpf/fast" {
		t.Errorf("want a 5019 event choosing bpf and both proxied connections naming bpf/fast: %v, %v", sawBackend, backends)
	}
	if !sawBypass || !sawFinding {
		t.Errorf("bypass refuse event with pid and binary: %v, finding: %v\n%s", sawBypass, sawFinding, data)
	}
}

// controlStatus asks the proxy's control socket for GET /status.
func controlStatus(t *testing.T, sock string) proxy.Status {
	t.Helper()
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get("http://proxy/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st proxy.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

func get(m map[string]any, path ...string) any {
	var cur any = m
	for _, k := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}
