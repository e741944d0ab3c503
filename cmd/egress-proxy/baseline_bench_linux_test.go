//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// BenchmarkAgainstBaseline measures this build's egress-proxy against
// another build's side by side in one run, on the sandbox path of
// BenchmarkTunnelThroughputSandboxPath and BenchmarkSandboxConnectRate:
// a client namespace and cgroup behind a veth, the proxy in sandbox mode
// (eBPF attribution, send guard where the build has one) on the host
// side, the server in the TEST-NET internet beyond.
// PALISADE_BENCH_BASELINE_BIN_DIR names the other build's bin directory
// (a worktree of an older commit after make build;
// scripts/bench/baseline.sh does that);
// PALISADE_BENCH_BASELINE_PROXY_ARGS adds flags to the baseline's proxy
// only (PALISADE_BENCH_PROXY_ARGS to both): PALISADE_BENCH_BASELINE_BIN_DIR
// set to this build's bin and --send-guard off measures the guard.
//
// Each build has a sandbox path of its own (its own namespaces, cgroup,
// server and proxy), so each build's cgroup programs see only its own
// client; both proxies run throughout and the work alternates between
// them in small units, in the order ABBA, so that the load of a shared
// machine, which comes in bursts of seconds, falls on both alike. (The
// eBPF tracepoints are global: each build's fire, and return at once,
// for the other's client processes too; a client process starts per
// unit.) Halfway through, the builds swap sandbox paths (their proxies
// are started again there): what differs between the two paths falls on
// both alike. After one unmeasured unit on each proxy, each sub-benchmark
// runs PALISADE_BENCH_ROUNDS rounds (default 20; run it with -benchtime
// 1x) of PALISADE_BENCH_PAIRS pairs of units each (default 2: ABBA); a
// round's figure for a build is the mean of its units'. A unit is:
//
//   - download: curl downloads PALISADE_BENCH_MB MiB (default 256)
//     through a CONNECT tunnel (MB/s; the CPU per MiB of the proxy and
//     curl together);
//   - upload: curl sends as much (PUT) through a tunnel: the sandbox's
//     own sends, which the send guard's sk_msg program sees;
//   - connrate: python3 makes PALISADE_BENCH_CONNS (default 500)
//     sequential connections, each a CONNECT and a 1 KiB echo round trip,
//     events written to a file (conns/s; the proxy's CPU per connection);
//   - transparent: as many connections to echo.test's policy DNS address
//     with no CONNECT, redirected to the proxy's transparent listener.
//
// It prints each round and reports, per row, the median of each build's
// rate and CPU, and of the per-round ratios (current / baseline) with
// their quartiles and range: rate-x-median, rate-x-q1, rate-x-q3,
// rate-x-min, rate-x-max, and cpu-x-* for the CPU.
func BenchmarkAgainstBaseline(b *testing.B) {
	dir := os.Getenv("PALISADE_BENCH_BASELINE_BIN_DIR")
	var err error
	if dir == "" {
		err = errors.New("not set")
	} else {
		_, err = os.Stat(filepath.Join(dir, "egress-proxy"))
	}
	testutil.RequireData(b, "PALISADE_BENCH_BASELINE_BIN_DIR (the bin directory of the build to compare with)", err)
	builds := [2]benchBuild{
		{name: "baseline", bin: filepath.Join(dir, "egress-proxy"), args: strings.Fields(os.Getenv("PALISADE_BENCH_BASELINE_PROXY_ARGS"))},
		{name: "current", bin: testutil.Binary(b, "egress-proxy")},
	}
	for i := range builds {
		builds[i].sb = newBenchSandbox(b)
	}
	rounds, pairs := envInt("PALISADE_BENCH_ROUNDS", 20), envInt("PALISADE_BENCH_PAIRS", 2)
	curl := testutil.RequireCommand(b, "curl")
	python, err := filepath.EvalSymlinks("/usr/bin/python3")
	testutil.RequireData(b, "/usr/bin/python3 (apt install python3)", err)
	script, err := filepath.Abs("testdata/connrate.py")
	if err != nil {
		b.Fatal(err)
	}
	n := benchMB() << 20
	const addr = benchHostAddr + ":3128"
	// bulk runs one curl transfer through build's proxy (pid) and
	// returns MB/s and the CPU microseconds per MiB of the proxy and
	// curl together: where the kernel's receive work for a packet is
	// done (in the process that sent it, the one that reads it, or
	// ksoftirqd) moves with the scheduling from round to round, between
	// the two more than out of them.
	bulk := func(b *testing.B, build *benchBuild, pid int, args ...string) (float64, float64) {
		cpu0, start := procCPU(b, pid), time.Now()
		c := build.sb.start(b, nil, append([]string{curl, "-sS", "--fail", "-o", "/dev/null", "--max-time", "120",
			"--proxytunnel", "--proxy", "http://" + addr}, args...)...)
		if err := c.Wait(); err != nil {
			b.Fatalf("curl %v: %v", args, err)
		}
		wall, cpu := time.Since(start), procCPU(b, pid)-cpu0
		cpu += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
		return float64(n) / 1e6 / wall.Seconds(), float64(cpu.Nanoseconds()) / 1e3 / float64(n>>20)
	}
	b.Run("download", func(b *testing.B) {
		url := fmt.Sprintf("http://bulk.test/bytes?n=%d", n)
		sideBySide(b, &builds, rounds, pairs, "MB/s", "proxy+curl-cpu-us/MiB",
			func(b *testing.B, build *benchBuild) int {
				return build.sb.runProxy(b, build, addr, "bulk.test", 80, curl)
			},
			func(b *testing.B, build *benchBuild, pid int) (float64, float64) { return bulk(b, build, pid, url) })
	})
	b.Run("upload", func(b *testing.B) {
		// A sparse file: reading it costs curl no disk.
		file := filepath.Join(b.TempDir(), "upload")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Truncate(file, n); err != nil {
			b.Fatal(err)
		}
		sideBySide(b, &builds, rounds, pairs, "MB/s", "proxy+curl-cpu-us/MiB",
			func(b *testing.B, build *benchBuild) int {
				return build.sb.runProxy(b, build, addr, "bulk.test", 80, curl)
			},
			func(b *testing.B, build *benchBuild, pid int) (float64, float64) {
				return bulk(b, build, pid, "-H", "Expect:", "-T", file, "http://bulk.test/bytes")
			})
	})
	// connrate runs python3's sequential connections (mode connect or
	// direct, through proxy or "-", to target) from build's sandbox and
	// returns conns/s and the CPU microseconds per connection of the
	// proxy (pid).
	conns := envInt("PALISADE_BENCH_CONNS", 500)
	connrate := func(b *testing.B, build *benchBuild, pid int, mode, proxy, target string) (float64, float64) {
		var out bytes.Buffer
		// From the same state every unit (dropTimeWait): the
		// sandbox's earlier units' TIME_WAIT sockets would slow the
		// later units' connect(2).
		build.sb.dropTimeWait(b)
		cpu0 := procCPU(b, pid)
		cmd := build.sb.start(b, &out, python, script, mode, proxy, target, strconv.Itoa(conns), "20")
		if err := cmd.Wait(); err != nil {
			b.Fatalf("connrate through %s: %v: %s", build.name, err, out.String())
		}
		cpu := procCPU(b, pid) - cpu0
		var got int
		var secs float64
		if _, err := fmt.Sscan(out.String(), &got, &secs); err != nil || got == 0 || secs <= 0 {
			b.Fatalf("connrate output %q: %v", out.String(), err)
		}
		return float64(got) / secs, float64(cpu.Nanoseconds()) / 1e3 / float64(got)
	}
	b.Run("connrate", func(b *testing.B) {
		target := "echo.test:" + strconv.Itoa(nettest.EchoPort)
		sideBySide(b, &builds, rounds, pairs, "conns/s", "proxy-cpu-us",
			func(b *testing.B, build *benchBuild) int {
				// Events to a file, as sandbox-supervisor runs it: every
				// connection's event is part of its cost.
				return build.sb.runProxy(b, build, addr, "echo.test", nettest.EchoPort, python, "--events", filepath.Join(b.TempDir(), "events.jsonl"))
			},
			func(b *testing.B, build *benchBuild, pid int) (float64, float64) {
				return connrate(b, build, pid, "connect", addr, target)
			})
	})
	// transparent: the same connections to echo.test's policy DNS
	// address, which each sandbox's host namespace redirects to its
	// proxy's transparent listener (BenchmarkSandboxConnectRate's
	// transparent row); the name is resolved again before each unit (a
	// mapping lives 30 s, and a proxy started again may answer another).
	b.Run("transparent", func(b *testing.B) {
		for k := range builds {
			// The transparent listener on a range of ports
			// (benchTransparentArgs) came with 67e402d.
			if out, _ := exec.Command(builds[k].bin, "--help").CombinedOutput(); !bytes.Contains(out, []byte("HOST:LOW-HIGH")) {
				// Printed too: baseline.sh runs without -test.v.
				msg := fmt.Sprintf("transparent: skipped: the %s build (%s) takes no port range in --transparent-listen (HOST:LOW-HIGH, 67e402d and later); with one port the row loses connections to NAT port clashes after the swap", builds[k].name, builds[k].bin)
				fmt.Println(msg)
				b.Skip(msg)
			}
			builds[k].sb.redirectSynthetic(b)
		}
		sideBySide(b, &builds, rounds, pairs, "conns/s", "proxy-cpu-us",
			func(b *testing.B, build *benchBuild) int {
				return build.sb.runProxy(b, build, addr, "echo.test", nettest.EchoPort, python,
					append([]string{"--events", filepath.Join(b.TempDir(), "events.jsonl")}, benchTransparentArgs()...)...)
			},
			func(b *testing.B, build *benchBuild, pid int) (float64, float64) {
				target := net.JoinHostPort(build.sb.resolvePolicyDNS(b, python, "echo.test").String(), strconv.Itoa(nettest.EchoPort))
				return connrate(b, build, pid, "direct", "-", target)
			})
	})
}

// benchBuild is one side of BenchmarkAgainstBaseline: an egress-proxy
// binary, flags of its own, and its own sandbox path.
type benchBuild struct {
	name, bin string
	args      []string
	sb        *benchSandbox
}

// runProxy starts build's proxy on addr allowing host:port for binary
// (the build's own flags, then extra), stopped at the end of b, waits
// until the client namespace reaches it and returns its pid.
func (sb *benchSandbox) runProxy(b *testing.B, build *benchBuild, addr, host string, port int, binary string, extra ...string) int {
	sb.startBuildAt(b, build.bin, addr, host, port, binary, append(slices.Clone(build.args), extra...)...)
	return sb.pids[addr]
}

// sideBySide runs rounds rounds of 2×pairs units, the builds in the
// order ABBA (a round's rate and CPU on a build are the mean of its
// units'), prints each round and reports the medians and the per-round
// ratios' quartiles and range (see BenchmarkAgainstBaseline). Each build
// runs its proxy (start returns its pid) on a sandbox path of its own,
// and halfway the two swap paths (the proxies are started again), so
// that what differs between the two paths falls on both builds alike;
// one unmeasured unit on each proxy first. unit returns a rate (higher
// is better, unit rateUnit) and a CPU cost (lower is better, unit
// cpuUnit) of one piece of work.
func sideBySide(b *testing.B, builds *[2]benchBuild, rounds, pairs int, rateUnit, cpuUnit string,
	start func(*testing.B, *benchBuild) int, unit func(*testing.B, *benchBuild, int) (float64, float64)) {
	var pids [2]int
	run := func() {
		for k := range builds {
			pids[k] = start(b, &builds[k])
		}
		for k := range builds {
			unit(b, &builds[k], pids[k])
		}
	}
	var rate, cpu [2][]float64
	var rateX, cpuX []float64
	// Printed, not logged: a benchmark's log keeps only its first lines.
	name := b.Name()[strings.LastIndexByte(b.Name(), '/')+1:]
	fmt.Printf("%s: load before: %s\n", name, loadAvg())
	run()
	b.ResetTimer()
	for r := range rounds {
		if r == rounds/2 {
			b.StopTimer()
			for k := range builds {
				stopPID(b, pids[k])
			}
			builds[0].sb, builds[1].sb = builds[1].sb, builds[0].sb
			run()
			b.StartTimer()
		}
		var rt, c [2]float64
		for i := range 2 * pairs {
			k := (i + i/2) % 2 // 0 1 1 0 0 1 1 0 ...
			x, y := unit(b, &builds[k], pids[k])
			rt[k] += x / float64(pairs)
			c[k] += y / float64(pairs)
		}
		for k := range 2 {
			rate[k], cpu[k] = append(rate[k], rt[k]), append(cpu[k], c[k])
		}
		rateX, cpuX = append(rateX, rt[1]/rt[0]), append(cpuX, c[1]/c[0])
		fmt.Printf("%s round %d: %s %.0f / %.0f, %s %.1f / %.1f (baseline / current), ratio %.3f / %.3f\n",
			name, r+1, rateUnit, rt[0], rt[1], cpuUnit, c[0], c[1], rt[1]/rt[0], c[1]/c[0])
	}
	b.StopTimer()
	fmt.Printf("%s: load after: %s\n", name, loadAvg())
	for k, name := range []string{"baseline", "current"} {
		b.ReportMetric(quantile(rate[k], 0.5), name+"-"+rateUnit)
		b.ReportMetric(quantile(cpu[k], 0.5), name+"-"+cpuUnit)
	}
	for _, m := range []struct {
		name string
		v    []float64
	}{{"rate-x", rateX}, {"cpu-x", cpuX}} {
		b.ReportMetric(quantile(m.v, 0.5), m.name+"-median")
		b.ReportMetric(quantile(m.v, 0.25), m.name+"-q1")
		b.ReportMetric(quantile(m.v, 0.75), m.name+"-q3")
		b.ReportMetric(quantile(m.v, 0), m.name+"-min")
		b.ReportMetric(quantile(m.v, 1), m.name+"-max")
	}
	b.ReportMetric(0, "ns/op")
}

// stopPID kills a proxy this benchmark started, by its pid, and waits
// (at most 10 s) until every thread of it has exited: its sockets and
// eBPF programs are gone then, though the cleanup reaps it only at the
// end. (The main thread turns zombie before the others are gone, and
// the listening socket lives as long as any of them.)
func stopPID(b testing.TB, pid int) {
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		b.Fatalf("kill %d: %v", pid, err)
	}
	task := fmt.Sprintf("/proc/%d/task", pid)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		tasks, err := os.ReadDir(task)
		if err != nil {
			return
		}
		if len(tasks) != 1 {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", task, pid))
		if err != nil {
			return
		}
		if f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return
		}
	}
	b.Fatalf("proxy %d still running 10 s after SIGKILL", pid)
}

// quantile is the q-quantile of v, interpolated linearly between the
// closest ranks (the "type 7" estimate of R and numpy's default).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

// procCPU is the CPU time process pid (all its threads, exited ones
// included) has used so far, in nanoseconds, from its process CPU clock
// (clock_getcpuclockid(3): the scheduler's own count, not /proc's 10 ms
// ticks, which over a round's 768 MiB would be 13 µs per MiB).
func procCPU(b *testing.B, pid int) time.Duration {
	// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) of linux/posix-timers.h.
	clock := int32((^uint32(pid))<<3 | 2)
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		b.Fatalf("CPU clock of pid %d: %v", pid, err)
	}
	return time.Duration(ts.Nano())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// loadAvg is the host's load averages (1, 5 and 15 minutes).
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
