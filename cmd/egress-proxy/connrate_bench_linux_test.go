//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/nsthread"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// BenchmarkSandboxConnectRate measures sequential new connections per
// second from inside a sandbox-like namespace and cgroup, each a TCP
// connect plus a 1 KiB round trip to the echo server in the TEST-NET
// internet, made by python3 (testdata/connrate.py): "direct" (the host
// forwards), then through a CONNECT tunnel of egress-proxy in sandbox
// mode (so every connection is attributed among the cgroup's processes),
// "transparent" (the same proxy's transparent listener: the client
// connects to echo.test's policy DNS address, which the host namespace
// redirects there, with no CONNECT; the proxy CPU is that proxy's),
// "floor" (a minimal Go relay in the transparent row's place: accept,
// SO_ORIGINAL_DST, dial, splice both ways, and nothing else;
// floor_bench_linux_test.go), "floor-sockmap" (the same relay handing
// both sockets to the kernel once dialed: a sockhash and an sk_skb
// verdict; ksplice_bench_linux_test.go), "floor-raw" and
// "floor-sockmap-raw" (the floor in user space and with the kernel
// splice, each on one thread with an epoll of its own instead of Go's
// poller), with PALISADE_BENCH_DEFER_ROWS=1 "floor-defer" and
// "floor-raw-defer" (the floor and floor-raw with TCP_DEFER_ACCEPT on
// the relay's listener), squid and tinyproxy (when installed), all
// on the host side of the same veth. It runs with no extra processes in
// the cgroup and with 2,000 sleeping ones, which cost a /proc-based
// attribution its fd-table scan.
// The conns/s metric is the rate (b.N connections, at most 20 s), and
// connect-us, connect-answer-us, echo-us and close-us the median time of
// each phase (TCP connect; CONNECT sent until its 200 arrived, 0 when
// direct; the 1 KiB round trip; close(2), which sends the FIN and wakes
// the peer); first100-answer-us is the median CONNECT answer of the first
// 100 connections only, proxy-cpu-us the proxy process's CPU time per
// connection (0 when direct), kworker-cpu-us that of the kernel's
// worker threads and switches the machine's context switches per
// connection (both the whole machine's); scripts/bench/connrate.sh runs it in
// rounds and prints the medians and ratios. Every row runs 300
// unmeasured connections once before the first measured row, and every
// measured row starts with no TIME_WAIT socket in the bench namespaces
// (dropTimeWait).
//
//	go test -run '^$' -bench SandboxConnectRate -benchtime 2000x ./cmd/egress-proxy
func BenchmarkSandboxConnectRate(b *testing.B) {
	// /usr/bin/python3 as CI installs it (a PATH shim such as pyenv's
	// would run another binary than the policy names).
	exe, err := filepath.EvalSymlinks("/usr/bin/python3")
	testutil.RequireData(b, "/usr/bin/python3 (apt install python3)", err)
	script, err := filepath.Abs("testdata/connrate.py")
	if err != nil {
		b.Fatal(err)
	}
	sb := newBenchSandbox(b)
	echo := net.JoinHostPort(sb.inet.V4[0].String(), strconv.Itoa(nettest.EchoPort))
	// Events to a file, as sandbox-supervisor runs it: every connection's
	// event is part of its cost.
	proxyAddr := sb.startProxy(b, "echo.test", nettest.EchoPort, exe,
		append([]string{"--events", filepath.Join(b.TempDir(), "events.jsonl")}, benchTransparentArgs()...)...)
	// Transparent: the client connects to echo.test's synthetic address
	// (policy DNS, asked again before each row: a mapping lives at most
	// 30 s, a row at most 20), redirected to the same proxy's
	// transparent listener, which decides it as the CONNECT to echo.test
	// would be.
	sb.redirectSynthetic(b)
	synthetic := func() string {
		return net.JoinHostPort(sb.resolvePolicyDNS(b, exe, "echo.test").String(), strconv.Itoa(nettest.EchoPort))
	}
	floor := sb.startFloor(b, echo, "")
	floorTarget := net.JoinHostPort(floorAddr, strconv.Itoa(nettest.EchoPort))
	sockmapFloor := sb.startFloor(b, echo, "sockmap")
	sockmapTarget := net.JoinHostPort(sockmapFloorAddr, strconv.Itoa(nettest.EchoPort))
	rawSockmapFloor := sb.startFloor(b, echo, "sockmap-raw")
	rawSockmapTarget := net.JoinHostPort(rawSockmapFloorAddr, strconv.Itoa(nettest.EchoPort))
	rawFloor := sb.startFloor(b, echo, "raw")
	rawTarget := net.JoinHostPort(rawFloorAddr, strconv.Itoa(nettest.EchoPort))
	// floor-defer and floor-raw-defer (TCP_DEFER_ACCEPT on the relay's
	// listener) run only with PALISADE_BENCH_DEFER_ROWS=1: measured once
	// (docs/egress-proxy.md), they did not lift the floor.
	deferRows := os.Getenv("PALISADE_BENCH_DEFER_ROWS") == "1"
	var deferFloor, deferTarget, rawDeferFloor, rawDeferTarget string
	if deferRows {
		deferFloor = sb.startFloor(b, echo, "defer")
		deferTarget = net.JoinHostPort(deferFloorAddr, strconv.Itoa(nettest.EchoPort))
		rawDeferFloor = sb.startFloor(b, echo, "raw-defer")
		rawDeferTarget = net.JoinHostPort(rawDeferFloorAddr, strconv.Itoa(nettest.EchoPort))
	}
	dir := b.TempDir()
	squid := sb.startSquid(b, dir)
	tiny := sb.startTinyproxy(b, dir)

	// rate runs the client through proxy (or "-") to target; the CPU
	// per connection is that of the proxy listening at cpuOf ("" for
	// none).
	rate := func(b *testing.B, mode, proxy, target, cpuOf string) {
		var out bytes.Buffer
		pid, proxied := sb.pids[cpuOf]
		var cpu0 time.Duration
		if proxied {
			cpu0 = cpuTime(b, pid)
		}
		// Every row starts with no TIME_WAIT socket in either namespace:
		// see dropTimeWait.
		sb.dropTimeWait(b)
		kw0, sw0 := kworkerTimes(), contextSwitches(b)
		cmd := sb.start(b, &out, exe, script, mode, proxy, target, strconv.Itoa(b.N), "20")
		if err := cmd.Wait(); err != nil {
			b.Fatalf("connrate %s via %q: %v: %s", mode, proxy, err, out.String())
		}
		kwPer := float64(kworkerSince(kw0)) / float64(time.Microsecond)
		sw := contextSwitches(b) - sw0
		var cpuPer float64
		if proxied {
			cpuPer = float64(cpuTime(b, pid)-cpu0) / float64(time.Microsecond)
		}
		var n, connectUS, headUS, echoUS, closeUS, firstHeadUS int
		var secs float64
		if _, err := fmt.Sscan(out.String(), &n, &secs, &connectUS, &headUS, &echoUS, &closeUS, &firstHeadUS); err != nil || n == 0 || secs <= 0 {
			b.Fatalf("connrate output %q: %v", out.String(), err)
		}
		b.ReportMetric(float64(n)/secs, "conns/s")
		// The proxy's own CPU time per connection (0 when direct): less
		// noisy than the rate, which the whole machine's load moves.
		b.ReportMetric(cpuPer/float64(n), "proxy-cpu-us")
		// The kernel's worker threads' CPU time per connection, the
		// whole machine's: a sockmap's redirect is sent from a kworker,
		// which proxy-cpu-us does not count. Every row has it, so the
		// floor-sockmap rows' excess over the others is theirs.
		b.ReportMetric(kwPer/float64(n), "kworker-cpu-us")
		// The whole machine's context switches per connection (other
		// processes' included): each is a wake-up of the client, the
		// echo server, the proxy or a kworker.
		b.ReportMetric(float64(sw)/float64(n), "switches")
		// Medians of each phase: where a proxied connection's time goes.
		b.ReportMetric(float64(connectUS), "connect-us")
		b.ReportMetric(float64(headUS), "connect-answer-us")
		b.ReportMetric(float64(echoUS), "echo-us")
		b.ReportMetric(float64(closeUS), "close-us")
		// The CONNECT answer of the first 100 connections of the client
		// process: above connect-answer-us while the proxy is still
		// ramping up to its steady pace.
		b.ReportMetric(float64(firstHeadUS), "first100-answer-us")
		b.ReportMetric(0, "ns/op")
	}
	// One unmeasured pass of every row first, so that the row measured
	// first does not pay for the machine settling after the set-up
	// (squid's start, cold caches): without it, over 15 rounds, direct
	// with no other process ran at a median 0.87x (0.62-1.24x) of direct
	// with 2,000 processes, measured later in the same round.
	warm := []struct{ mode, proxy, target string }{
		{"direct", "-", echo}, {"connect", proxyAddr, "echo.test:" + strconv.Itoa(nettest.EchoPort)},
		{"direct", "-", synthetic()}, {"direct", "-", floorTarget}, {"direct", "-", sockmapTarget}, {"direct", "-", rawSockmapTarget}, {"direct", "-", rawTarget}, {"connect", squid, echo}, {"connect", tiny, echo},
	}
	if deferRows {
		warm = append(warm, struct{ mode, proxy, target string }{"direct", "-", deferTarget},
			struct{ mode, proxy, target string }{"direct", "-", rawDeferTarget})
	}
	for _, w := range warm {
		if w.proxy == "" {
			continue
		}
		var out bytes.Buffer
		if err := sb.start(b, &out, exe, script, w.mode, w.proxy, w.target, "300", "10").Wait(); err != nil {
			b.Fatalf("warm-up %s via %q: %v: %s", w.mode, w.proxy, err, out.String())
		}
	}
	for _, procs := range []int{0, 2000} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			if procs > 0 {
				sb.sleepers(b, procs)
			}
			b.Run("direct", func(b *testing.B) { rate(b, "direct", "-", echo, "") })
			b.Run("egress-proxy", func(b *testing.B) {
				rate(b, "connect", proxyAddr, "echo.test:"+strconv.Itoa(nettest.EchoPort), proxyAddr)
			})
			b.Run("transparent", func(b *testing.B) { rate(b, "direct", "-", synthetic(), proxyAddr) })
			b.Run("floor", func(b *testing.B) { rate(b, "direct", "-", floorTarget, floor) })
			b.Run("floor-sockmap", func(b *testing.B) { rate(b, "direct", "-", sockmapTarget, sockmapFloor) })
			b.Run("floor-raw", func(b *testing.B) { rate(b, "direct", "-", rawTarget, rawFloor) })
			b.Run("floor-sockmap-raw", func(b *testing.B) { rate(b, "direct", "-", rawSockmapTarget, rawSockmapFloor) })
			if deferRows {
				b.Run("floor-defer", func(b *testing.B) { rate(b, "direct", "-", deferTarget, deferFloor) })
				b.Run("floor-raw-defer", func(b *testing.B) { rate(b, "direct", "-", rawDeferTarget, rawDeferFloor) })
			}
			b.Run("squid", func(b *testing.B) {
				if squid == "" {
					b.Skip("squid not installed (apt install squid)")
				}
				rate(b, "connect", squid, echo, squid)
			})
			b.Run("tinyproxy", func(b *testing.B) {
				if tiny == "" {
					b.Skip("tinyproxy not installed (apt install tinyproxy)")
				}
				rate(b, "connect", tiny, echo, tiny)
			})
		})
	}
}

// dropTimeWait destroys every TIME_WAIT socket in the bench's host and
// client namespaces (SOCK_DESTROY through sock_diag), so that each row
// starts from the same state. Every proxy and floor row connects from
// the host namespace to the same echo address and closes upstream
// first, leaving a TIME_WAIT socket there for 60 s: a round makes some
// 34,000 such connections in about a minute, and once the even half of
// the port range (connect(2) tries ports of one parity first) was taken
// the later rows' connect(2) searched the whole half for a free port on
// every connection. The last rows paid for the earlier ones: with 2,000
// processes tinyproxy, the last row, ran at 80/s with 9-11 ms of CPU per
// connection, squid before it at 560/s with 1.4 ms, where each alone
// runs at about 1,300/s and 900/s.
func (sb *benchSandbox) dropTimeWait(b *testing.B) {
	for _, ns := range []netns.NsHandle{sb.hostNS, sb.clientNS} {
		if err := nsthread.Run(ns, func() error {
			socks, err := netlink.SocketDiagTCP(unix.AF_INET)
			if err != nil {
				return err
			}
			for _, s := range socks {
				if s.State != netlink.TCP_TIME_WAIT {
					continue
				}
				if err := netlink.SocketDestroy(&net.TCPAddr{IP: s.ID.Source, Port: int(s.ID.SourcePort)},
					&net.TCPAddr{IP: s.ID.Destination, Port: int(s.ID.DestinationPort)}); err != nil && !errors.Is(err, unix.ENOENT) {
					return fmt.Errorf("destroy the TIME_WAIT socket %s:%d-%s:%d: %w", s.ID.Source, s.ID.SourcePort, s.ID.Destination, s.ID.DestinationPort, err)
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// sleepers adds n sleeping processes to the sandbox's cgroup (killed
// with the cgroup at cleanup) and waits until they all run.
func (sb *benchSandbox) sleepers(b *testing.B, n int) {
	before, err := sb.cg.Procs()
	if err != nil {
		b.Fatal(err)
	}
	// Output to /dev/null, not a pipe: the sleepers inherit it, and Wait
	// would wait for them to close it.
	sh := sb.start(b, nil, "/bin/sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do sleep 3600 & i=$((i+1)); done; wait", n))
	b.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pids, err := sb.cg.Procs()
		if err != nil {
			b.Fatal(err)
		}
		if len(pids) >= len(before)+n+1 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d sleepers running after 3 minutes", len(pids)-len(before)-1, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startSquid runs squid on the host side of the veth, allowing CONNECT
// from the client to the echo port; "" when squid is not installed.
func (sb *benchSandbox) startSquid(b *testing.B, dir string) string {
	bin, err := exec.LookPath("squid")
	if err != nil {
		return ""
	}
	addr := benchHostAddr + ":3130"
	conf := filepath.Join(dir, "squid.conf")
	os.WriteFile(conf, squidConf(addr, "192.0.2.0/30", nettest.EchoPort, dir), 0o644)
	sb.daemon(b, addr, bin, "-N", "-f", conf)
	return addr
}

// startTinyproxy runs tinyproxy like startSquid; "" when not installed.
func (sb *benchSandbox) startTinyproxy(b *testing.B, dir string) string {
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		return ""
	}
	conf := filepath.Join(dir, "tinyproxy.conf")
	os.WriteFile(conf, []byte(strings.Join([]string{
		"Port 3131", "Listen " + benchHostAddr, "Timeout 600", "MaxClients 100",
		"Allow 192.0.2.0/30", "ConnectPort " + strconv.Itoa(nettest.EchoPort), "LogLevel Critical", "",
	}, "\n")), 0o644)
	addr := benchHostAddr + ":3131"
	sb.daemon(b, addr, bin, "-d", "-c", conf)
	return addr
}

// daemon starts a third-party proxy in the host namespace, killed by pid
// at cleanup, and waits until the client can reach it.
func (sb *benchSandbox) daemon(b *testing.B, addr, bin string, args ...string) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := nsthread.Run(sb.hostNS, cmd.Start); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sb.pids[addr] = cmd.Process.Pid
	sb.waitListening(b, addr)
}

// contextSwitches is the machine's context switches since boot (the
// ctxt line of /proc/stat).
func contextSwitches(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	_, rest, ok := bytes.Cut(raw, []byte("\nctxt "))
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	v, err := strconv.ParseInt(string(line), 10, 64)
	if !ok || err != nil {
		b.Fatalf("/proc/stat: no ctxt line")
	}
	return v
}

// kworkerTimes is the CPU time each kernel worker thread (kworker/*)
// has used so far, by pid, in clock ticks as cpuTime reads them.
func kworkerTimes() map[string]int64 {
	ents, _ := os.ReadDir("/proc")
	t := map[string]int64{}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil || !bytes.Contains(raw, []byte("(kworker/")) {
			continue
		}
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		t[e.Name()] = u + s
	}
	return t
}

// kworkerSince is the CPU time the kernel worker threads have used since
// before (kworkerTimes), those that started since included; those that
// exited since are not counted (kworkers come and go with the load).
func kworkerSince(before map[string]int64) time.Duration {
	var ticks int64
	for pid, t := range kworkerTimes() {
		if t >= before[pid] {
			ticks += t - before[pid]
		} else { // a new thread on an exited one's pid
			ticks += t
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// cpuTime is the CPU time process pid has used so far, its threads that
// exited included (tinyproxy runs a thread per connection) and the
// children it reaped: utime, stime, cutime and cstime of /proc/PID/stat,
// in clock ticks of 10 ms (USER_HZ is 100 on Linux), which over thousands
// of connections is a few microseconds per connection.
func cpuTime(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which may hold spaces: the
	// first of them is the line's third (state), so the 14th to 17th
	// (utime, stime, cutime, cstime) are at 11 to 14.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat: %v", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
