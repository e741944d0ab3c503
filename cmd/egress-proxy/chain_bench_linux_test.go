//go:build linux

package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/nsthread"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// BenchmarkChainedConnect states what chaining through a corporate proxy
// costs a new tunnel: sequential new connections from inside a
// sandbox-like namespace and cgroup (testdata/connrate.py: CONNECT, then
// a 1 KiB echo round trip), through two egress-proxy processes in
// sandbox mode side by side, one dialling the echo server directly
// ("unchained") and one chaining through a real squid with Basic
// authentication on the host's loopback ("chained"). conns/s is the rate, connect-answer-us the
// median time from sending CONNECT to its 200 (what chaining adds to:
// a second CONNECT, squid's work, one more connection), proxy-cpu-us the
// egress proxy's CPU per connection and squid-cpu-us squid's.
// scripts/bench/chain.sh runs it in rounds and prints medians, spreads
// and the per-round ratios.
//
//	go test -run '^$' -bench ChainedConnect -benchtime 1000x ./cmd/egress-proxy
func BenchmarkChainedConnect(b *testing.B) {
	exe, err := filepath.EvalSymlinks("/usr/bin/python3")
	testutil.RequireData(b, "/usr/bin/python3 (apt install python3)", err)
	script, err := filepath.Abs("testdata/connrate.py")
	if err != nil {
		b.Fatal(err)
	}
	sb := newBenchSandbox(b)
	sq := nettest.StartSquid(b, nettest.SquidOptions{Start: func(c *exec.Cmd) error { return nsthread.Run(sb.hostNS, c.Start) }})
	auth := filepath.Join(b.TempDir(), "proxy-auth")
	if err := os.WriteFile(auth, []byte(sq.User+":"+sq.Password+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	events := func() string { return filepath.Join(b.TempDir(), "events.jsonl") }
	plain := sb.startProxy(b, "echo.test", nettest.EchoPort, exe, "--events", events())
	chained := sb.startProxyAt(b, benchHostAddr+":3132", "echo.test", nettest.EchoPort, exe, "--events", events(),
		"--upstream-proxy", sq.URL(), "--upstream-proxy-auth-file", auth, "--upstream-proxy-allow-insecure")
	squidPID := sq.PID()
	target := "echo.test:" + strconv.Itoa(nettest.EchoPort)
	rate := func(b *testing.B, proxy string) {
		var out bytes.Buffer
		pid := sb.pids[proxy]
		cpu0, sq0 := cpuTime(b, pid), cpuTime(b, squidPID)
		cmd := sb.start(b, &out, exe, script, "connect", proxy, target, strconv.Itoa(b.N), "20")
		if err := cmd.Wait(); err != nil {
			b.Fatalf("connrate via %s: %v: %s", proxy, err, out.String())
		}
		cpu := float64(cpuTime(b, pid)-cpu0) / float64(time.Microsecond)
		sqCPU := float64(cpuTime(b, squidPID)-sq0) / float64(time.Microsecond)
		var n, connectUS, answerUS, echoUS, closeUS, firstUS int
		var secs float64
		if _, err := fmt.Sscan(out.String(), &n, &secs, &connectUS, &answerUS, &echoUS, &closeUS, &firstUS); err != nil || n == 0 || secs <= 0 {
			b.Fatalf("connrate output %q: %v", out.String(), err)
		}
		b.ReportMetric(float64(n)/secs, "conns/s")
		b.ReportMetric(float64(answerUS), "connect-answer-us")
		b.ReportMetric(float64(echoUS), "echo-us")
		b.ReportMetric(cpu/float64(n), "proxy-cpu-us")
		b.ReportMetric(sqCPU/float64(n), "squid-cpu-us")
		b.ReportMetric(0, "ns/op")
	}
	// One unmeasured pass of each first (squid's start, cold caches).
	for _, p := range []string{plain, chained} {
		var out bytes.Buffer
		if err := sb.start(b, &out, exe, script, "connect", p, target, "200", "10").Wait(); err != nil {
			b.Fatalf("warm-up via %s: %v: %s", p, err, out.String())
		}
	}
	b.Run("unchained", func(b *testing.B) { rate(b, plain) })
	b.Run("chained", func(b *testing.B) { rate(b, chained) })
	if lines := sq.Log(); len(lines) == 0 || lines[0].Target != netip.AddrPortFrom(sb.inet.V4[0], nettest.EchoPort).String() {
		b.Fatalf("squid's log does not show the chained tunnels to the checked address: %v", lines[:min(len(lines), 3)])
	}
}
