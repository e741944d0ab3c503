//go:build linux

package attribution

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// systemLib is a shared object no test writes, mapped as clean code and
// copied to stand in for an agent's own.
const systemLib = "/usr/lib/x86_64-linux-gnu/libz.so.1"

// spawnShell runs script (bash) in the sandbox; it must connect to the
// IPv4 listener and print "ready <tag> <pid>".
func (s *testSandbox) spawnShell(tag, script string) *client {
	t := s.t
	t.Helper()
	if _, err := fmt.Fprintf(s.stdin, "shell %s %s\n", tag, script); err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(s.waitLine(tag, 20*time.Second))
	c := &client{tag: tag}
	c.pid, _ = strconv.Atoi(f[2])
	s.ln4.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := s.ln4.Accept()
	if err != nil {
		t.Fatalf("accept %s: %v", tag, err)
	}
	t.Cleanup(func() { conn.Close() })
	c.conn = conn
	c.client = conn.RemoteAddr().(*net.TCPAddr).AddrPort()
	c.proxy = conn.LocalAddr().(*net.TCPAddr).AddrPort()
	return c
}

// Code identity: a process that maps executable code from a file the
// sandbox may write (here: a directory registered as writable), a
// memfd or a deleted file, however it makes the mapping executable, has
// lost its binary's identity (Identity.Code, naming the file); an exec
// starts clean and a fork keeps the mark. The eBPF backend (its
// tracepoints, and with them off, /proc/<pid>/maps) and the /proc
// backend agree.
func TestCodeIdentity(t *testing.T) {
	if _, err := os.Stat(systemLib); err != nil {
		testutil.RequireData(t, "a system shared library ("+systemLib+")", err)
	}
	s := newTestSandbox(t, 128)
	self, _ := selfAndOther(t)
	writable := t.TempDir()
	lib := filepath.Join(writable, "libagent.so")
	copyFile(t, systemLib, lib, nil)
	backends := map[string]Backend{"proc": s.backend(t, func(c *ProcConfig) { c.Writable = []string{writable} })}
	for _, hooks := range []string{HooksTracepoints, HooksOff} {
		bb := s.bpfBackendWith(t, func(c *BPFConfig) { c.Proc.Writable = []string{writable}; c.CodeHooks = hooks })
		if got, err := bb.CodeHooks(); (hooks == HooksTracepoints) != (got == HooksTracepoints) {
			t.Fatalf("code hooks %q (%v), want %q", got, err, hooks)
		}
		backends["bpf/"+hooks] = bb
	}
	check := func(what string, c *client, want []string, file string, only ...string) {
		t.Helper()
		for name, b := range backends {
			if len(only) > 0 && !slices.Contains(only, name) {
				continue
			}
			id, err := b.Lookup(context.Background(), c.client, c.proxy)
			if err != nil {
				t.Errorf("%s, %s: %v", what, name, err)
				continue
			}
			var got []string
			var gotFile string
			if id.Code != nil {
				got, gotFile = id.Code.Reasons, id.Code.File
			}
			if !slices.Equal(got, want) || (file != "" && gotFile != file) {
				t.Errorf("%s, %s: code %v %q, want %v %q", what, name, got, gotFile, want, file)
			}
		}
	}
	code := func(how, file string) *client { return s.spawnArgs(self, "code", "4", how, file) }
	check("clean client", s.spawn(self, "client", "4"), nil, "")
	check("a system library mapped", code("mmap", systemLib), nil, "")
	check("a writable file mapped", code("mmap", lib), []string{CodeWritablePath}, lib)
	check("a writable file made executable with mprotect", code("mprotect", lib), []string{CodeWritablePath}, lib)
	check("a writable file readable under READ_IMPLIES_EXEC", code("implies", lib), []string{CodeWritablePath}, lib)
	check("a memfd mapped", code("memfd", systemLib), []string{CodeMemfd}, "/memfd:code")
	gone := filepath.Join(t.TempDir(), "gone.so")
	copyFile(t, systemLib, gone, nil)
	check("a deleted file mapped", code("deleted", gone), []string{CodeDeleted}, "")
	check("an exec after mapping a writable file", code("exec", lib), nil, "")
	tag := testutil.UniqueName("forked")
	fork := s.spawnShell(tag, fmt.Sprintf(`LD_PRELOAD=%s bash -c '( exec 3<>/dev/tcp/%s/%d; echo "ready %s $BASHPID"; sleep 120; : )'`,
		lib, proxyV4, s.ln4.Addr().(*net.TCPAddr).Port, tag))
	check("a subshell forked from an LD_PRELOADed bash", fork, []string{CodeWritablePath}, lib)
}

// BenchmarkCodeHooksExec measures what the code-identity tracepoints
// cost a sandbox process: each op is one fork+exec of /bin/true (a
// dynamically linked program: its loader maps libc and makes its text
// and relro read-only with mprotect) inside the sandbox's cgroup, with
// the eBPF backend attached with the hooks and without them, rounds
// alternating. Reported: the CPU time (user+system of the loop and its
// children, bash's time) per exec for each, medians of the rounds: on a
// shared machine wall time mostly measures the others.
func BenchmarkCodeHooksExec(b *testing.B) {
	s := newTestSandbox(b, 64)
	const perRound = 300
	run := func(hooks string) float64 {
		bb := s.bpfBackendWith(b, func(c *BPFConfig) { c.CodeHooks = hooks })
		defer bb.Close()
		tag := testutil.UniqueName("execs")
		// bash's time: user and system seconds of the loop and its children.
		script := fmt.Sprintf(`TIMEFORMAT='%%3U %%3S'; t=$( { time for i in $(seq %d); do /bin/true; done; } 2>&1 ); echo ready %s $t`, perRound, tag)
		if _, err := fmt.Fprintf(s.stdin, "shell %s %s\n", tag, script); err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(s.waitLine(tag, 60*time.Second))
		var cpu float64
		for _, v := range f[2:] {
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("time: %q", f)
			}
			cpu += sec
		}
		return cpu * 1e9 / perRound
	}
	var on, off []float64
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			on = append(on, run(HooksTracepoints))
			off = append(off, run(HooksOff))
		} else {
			off = append(off, run(HooksOff))
			on = append(on, run(HooksTracepoints))
		}
	}
	slices.Sort(on)
	slices.Sort(off)
	b.Logf("CPU ns per exec, hooks %.0f\nnone %.0f", on, off)
	b.ReportMetric(on[len(on)/2], "cpu-ns/exec-hooks")
	b.ReportMetric(off[len(off)/2], "cpu-ns/exec-nohooks")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCodeCheckMaps measures code identity's cost per connection
// where it reads /proc/<pid>/maps (the /proc backend, and the eBPF
// backend without its code hooks): one op is the check of one process,
// /usr/bin/python3 with the socket and ssl modules loaded (nine
// executable mappings on Debian 12: the interpreter, the loader, libc,
// libm, libz, libexpat, libssl, libcrypto, the ssl extension), its files already found clean (the steady state:
// a file is remembered by device, inode and change time). A lookup
// checks the connecting process and each ancestor a rule could name, so
// a connection pays this once per process checked. With the eBPF code
// hooks the mark is read with the process-tree entry the lookup reads
// anyway, and this costs nothing.
func BenchmarkCodeCheckMaps(b *testing.B) {
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	testutil.RequireData(b, "/usr/bin/python3 (apt install python3)", err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", "import socket, ssl, sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		b.Fatalf("python3 did not start: %q %v", line, err)
	}
	c := newCodeChecker("/proc", nil)
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	mappings := 0
	parseMaps(raw, func(mapping) { mappings++ })
	if fc, err := c.check(cmd.Process.Pid); err != nil || fc != nil {
		b.Fatalf("python3 is not clean: %+v %v", fc, err)
	}
	b.ResetTimer()
	for range b.N {
		if fc, err := c.check(cmd.Process.Pid); err != nil || fc != nil {
			b.Fatalf("python3 is not clean: %+v %v", fc, err)
		}
	}
	b.ReportMetric(float64(mappings), "exec-mappings")
}
