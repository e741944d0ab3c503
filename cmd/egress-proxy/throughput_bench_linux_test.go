//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/nsthread"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// benchMB is the size of one download (PALISADE_BENCH_MB, default 256).
func benchMB() int64 {
	if v, err := strconv.Atoi(os.Getenv("PALISADE_BENCH_MB")); err == nil && v > 0 {
		return int64(v)
	}
	return 256
}

// download fetches n bytes from the internet's HTTP server over conn
// (direct, or a tunnel already established) and discards them.
func download(b *testing.B, conn net.Conn, host string, n int64) {
	fmt.Fprintf(conn, "GET /bytes?n=%d HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", n, host)
	br := bufio.NewReaderSize(conn, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		b.Fatal(err)
	}
	got, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || got != n {
		b.Fatalf("downloaded %d of %d bytes: %v", got, n, err)
	}
}

// tunnel opens a CONNECT tunnel to target through the proxy at addr.
func tunnel(b *testing.B, addr, target string) net.Conn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("CONNECT via %s: %v %v", addr, resp, err)
	}
	if br.Buffered() != 0 {
		b.Fatal("proxy sent bytes after the CONNECT response")
	}
	return c
}

func waitListening(b *testing.B, addr string) {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("nothing listens on %s", addr)
}

// startDaemon runs a third-party proxy in the foreground, killed by pid
// at cleanup.
func startDaemon(b *testing.B, addr string, name string, args ...string) {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitListening(b, addr)
}

func freeAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// squidConf is a squid configuration that listens on addr and allows
// only CONNECT from src to port, logging nothing, its files in dir.
func squidConf(addr, src string, port int, dir string) []byte {
	return []byte(fmt.Sprintf(`http_port %s
acl client src %s
acl target_port port %d
acl CONNECT method CONNECT
http_access allow CONNECT client target_port
http_access deny all
cache deny all
access_log none
cache_log /dev/null
cache_store_log none
pid_filename %s/squid.pid
coredump_dir %s
shutdown_lifetime 0 seconds
`, addr, src, port, dir, dir))
}

// BenchmarkTunnelThroughput downloads benchMB MiB from an HTTP server in a
// TEST-NET namespace behind a veth: directly, and through a CONNECT tunnel
// of egress-proxy, tinyproxy and squid (each when installed), side by
// side. scripts/bench/proxy.sh turns the MB/s into ratios.
func BenchmarkTunnelThroughput(b *testing.B) {
	testutil.RequireRoot(b)
	inet := nettest.NewInternet(b)
	n := benchMB() << 20
	host := "bulk.test"
	target := net.JoinHostPort(inet.V4[0].String(), "80")
	dir := b.TempDir()

	b.Run("direct", func(b *testing.B) {
		b.SetBytes(n)
		for i := 0; i < b.N; i++ {
			c, err := net.Dial("tcp", target)
			if err != nil {
				b.Fatal(err)
			}
			download(b, c, host, n)
			c.Close()
		}
	})

	b.Run("egress-proxy", func(b *testing.B) {
		bin := testutil.Binary(b, "egress-proxy")
		hosts := inet.HostsFile(map[string]string{host: inet.V4[0].String()})
		pol := filepath.Join(dir, "policy.yaml")
		exe, _ := os.Executable()
		os.WriteFile(pol, []byte(fmt.Sprintf(`version: 1
filesystem_policy:
  read_only: [/usr]
  read_write: [/srv/palisade-bench-none]
network_policies:
  bulk:
    endpoints:
      - host: %s
        port: 80
    binaries:
      - path: %s
`, host, exe)), 0o600)
		addr := freeAddr(b)
		cmd := exec.Command(bin, "--policy", pol, "--listen", addr, "--hosts-file", hosts, "--log-format", "json")
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitListening(b, addr)
		b.SetBytes(n)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c := tunnel(b, addr, net.JoinHostPort(host, "80"))
			download(b, c, host, n)
			c.Close()
		}
	})

	b.Run("tinyproxy", func(b *testing.B) {
		bin, err := exec.LookPath("tinyproxy")
		if err != nil {
			b.Skip("tinyproxy not installed (apt install tinyproxy)")
		}
		addr := freeAddr(b)
		_, port, _ := net.SplitHostPort(addr)
		conf := filepath.Join(dir, "tinyproxy.conf")
		os.WriteFile(conf, []byte(fmt.Sprintf("Port %s\nListen 127.0.0.1\nTimeout 600\nMaxClients 100\nAllow 127.0.0.1\nConnectPort 80\nLogLevel Critical\n", port)), 0o644)
		startDaemon(b, addr, bin, "-d", "-c", conf)
		b.SetBytes(n)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c := tunnel(b, addr, target)
			download(b, c, host, n)
			c.Close()
		}
	})

	b.Run("squid", func(b *testing.B) {
		bin, err := exec.LookPath("squid")
		if err != nil {
			b.Skip("squid not installed (apt install squid)")
		}
		addr := freeAddr(b)
		conf := filepath.Join(dir, "squid.conf")
		os.WriteFile(conf, squidConf(addr, "127.0.0.1/32", 80, dir), 0o644)
		startDaemon(b, addr, bin, "-N", "-f", conf)
		b.SetBytes(n)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c := tunnel(b, addr, target)
			download(b, c, host, n)
			c.Close()
		}
	})
}

// BenchmarkTunnelThroughputSandboxPath measures the sandbox's real path:
// curl runs in its own network namespace and cgroup behind a veth to a
// "host" namespace, as in a sandbox, and the server is in the TEST-NET
// internet beyond the host. "direct" lets the host forward curl's
// connection (what a sandbox without the fence would do); "egress-proxy"
// sends it through a CONNECT tunnel of the proxy, in sandbox mode
// (attribution through the cgroup), on the host side of the same veth.
// Both cross the same two veths, so the ratio is the proxy's cost.
func BenchmarkTunnelThroughputSandboxPath(b *testing.B) {
	curl := testutil.RequireCommand(b, "curl")
	sb := newBenchSandbox(b)
	n := benchMB() << 20
	host := "bulk.test"
	url := fmt.Sprintf("http://%s/bytes?n=%d", host, n)
	resolve := fmt.Sprintf("%s:80:%s", host, sb.inet.V4[0])

	// run reports, besides MB/s, the CPU time per MiB of each party:
	// curl (client-cpu-us/MiB), this process, which holds the server
	// (server-cpu-us/MiB), and the proxy (proxy-cpu-us/MiB, when pid is
	// not 0); and how many CPUs the whole host kept busy meanwhile
	// (host-cpus, /proc/stat: above the three parties' share is other
	// work on a shared machine). CPU per MiB moves much less with that
	// load than MB/s does.
	run := func(b *testing.B, pid int, args ...string) {
		b.SetBytes(n)
		var client time.Duration
		var proxy0 time.Duration
		if pid != 0 {
			proxy0 = procCPU(b, pid)
		}
		b.ResetTimer()
		start, self0, busy0 := time.Now(), testutil.ProcessCPU(), hostBusy(b)
		for i := 0; i < b.N; i++ {
			cmd := sb.start(b, io.Discard, append([]string{curl, "-sS", "--fail", "-o", "/dev/null", "--max-time", "120"}, args...)...)
			if err := cmd.Wait(); err != nil {
				b.Fatalf("curl %v: %v", args, err)
			}
			client += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		b.StopTimer()
		wall, self, busy := time.Since(start), testutil.ProcessCPU()-self0, hostBusy(b)-busy0
		mib := float64(int64(b.N)*n) / (1 << 20)
		perMiB := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / mib }
		b.ReportMetric(perMiB(client), "client-cpu-us/MiB")
		b.ReportMetric(perMiB(self), "server-cpu-us/MiB")
		if pid != 0 {
			b.ReportMetric(perMiB(procCPU(b, pid)-proxy0), "proxy-cpu-us/MiB")
		}
		b.ReportMetric(busy.Seconds()/wall.Seconds(), "host-cpus")
	}
	b.Run("direct", func(b *testing.B) { run(b, 0, "--noproxy", "*", "--resolve", resolve, url) })

	b.Run("egress-proxy", func(b *testing.B) {
		addr := sb.startProxy(b, host, 80, curl)
		run(b, sb.pids[addr], "--proxytunnel", "--proxy", "http://"+addr, url)
	})
}

// hostBusy is the CPU time the whole host has spent not idle so far
// (/proc/stat's first line: every field but idle and iowait; guest time
// is already in user).
func hostBusy(b *testing.B) time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, name := range f[1:] {
		if i >= 8 { // guest and guest_nice are counted in user and nice
			break
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			b.Fatalf("/proc/stat: %v", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// benchSandbox is the sandbox's network path without the rest of a
// sandbox: a client network namespace and cgroup behind a veth
// (192.0.2.0/30, TEST-NET-1) to a throwaway "host" namespace that
// forwards to the TEST-NET internet, with an anchor process standing in
// for the init.
type benchSandbox struct {
	hostNS, clientNS netns.NsHandle
	inet             *nettest.Internet
	cg               *cgroup.Group
	anchor           *exec.Cmd
	// pids maps a proxy's listening address to its process, whose CPU
	// time the connection-rate benchmark reports per connection.
	pids map[string]int
}

// benchHostAddr is the host side of the client's veth.
const benchHostAddr = "192.0.2.1"

func newBenchSandbox(b testing.TB) *benchSandbox {
	testutil.RequireRoot(b)
	sb := &benchSandbox{pids: map[string]int{}}
	_, sb.hostNS = testutil.NamedNetns(b, "bh")
	_, sb.clientNS = testutil.NamedNetns(b, "bc")
	sb.inet = nettest.NewInternet(b, nettest.WithHostNetns(sb.hostNS))
	if err := nsthread.Run(sb.hostNS, func() error {
		la := netlink.NewLinkAttrs()
		la.Name = "bcl0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "bcl1"}); err != nil {
			return err
		}
		h0, _ := netlink.LinkByName("bcl0")
		h1, _ := netlink.LinkByName("bcl1")
		if err := netlink.LinkSetNsFd(h1, int(sb.clientNS)); err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr(benchHostAddr + "/30")
		netlink.AddrAdd(h0, addr)
		if err := netlink.LinkSetUp(h0); err != nil {
			return err
		}
		if lo, err := netlink.LinkByName("lo"); err == nil {
			netlink.LinkSetUp(lo)
		}
		// Every proxy row connects from this namespace to the same echo
		// address: a round makes some 17,000 such connections within
		// half a minute, each leaving a TIME_WAIT socket for 60 s. With
		// the default 32768-60999 range (and connect(2) trying ports of
		// one parity first) the last rows' connect(2) searched for a
		// free port at about 2 ms of proxy CPU each; the whole range
		// keeps every row out of that regime.
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("1024 65535"), 0o644); err != nil {
			return err
		}
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		b.Fatal(err)
	}
	if err := nsthread.Run(sb.clientNS, func() error {
		c1, err := netlink.LinkByName("bcl1")
		if err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("192.0.2.2/30")
		netlink.AddrAdd(c1, addr)
		netlink.LinkSetUp(c1)
		if lo, err := netlink.LinkByName("lo"); err == nil {
			netlink.LinkSetUp(lo)
		}
		// The client closes first, so its TIME_WAIT sockets (to the
		// proxy's one address) are here: the whole range for the same
		// reason as on the host side (after some 14,000 connections a
		// minute the connection rate fell to a fifth).
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("1024 65535"), 0o644); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: c1.Attrs().Index, Gw: net.ParseIP(benchHostAddr)})
	}); err != nil {
		b.Fatal(err)
	}
	cg, err := cgroup.New(testutil.UniqueName("bcg-"), cgroup.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	sb.cg = cg
	b.Cleanup(func() { cg.Kill(); cg.Destroy() })
	sb.anchor = sb.start(b, io.Discard, "/bin/sleep", "3600")
	b.Cleanup(func() { sb.anchor.Process.Kill(); sb.anchor.Wait() })
	return sb
}

// start runs argv in the client namespace and cgroup, its stdout and
// stderr to stdout (nil: /dev/null).
func (sb *benchSandbox) start(b testing.TB, stdout io.Writer, argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stdout
	if err := nsthread.Run(sb.clientNS, func() error { return sb.cg.StartIn(cmd) }); err != nil {
		b.Fatal(err)
	}
	return cmd
}

// startProxy runs egress-proxy in sandbox mode on the host side of the
// veth, allowing host:port for binary, and returns its address once the
// client namespace can reach it. extra flags are appended.
func (sb *benchSandbox) startProxy(b testing.TB, host string, port int, binary string, extra ...string) string {
	return sb.startProxyAt(b, benchHostAddr+":3128", host, port, binary, extra...)
}

// startProxyAt is startProxy listening on addr.
func (sb *benchSandbox) startProxyAt(b testing.TB, addr, host string, port int, binary string, extra ...string) string {
	return sb.startBuildAt(b, testutil.Binary(b, "egress-proxy"), addr, host, port, binary, extra...)
}

// startBuildAt is startProxyAt running the egress-proxy binary bin.
func (sb *benchSandbox) startBuildAt(b testing.TB, bin, addr, host string, port int, binary string, extra ...string) string {
	hosts := sb.inet.HostsFile(map[string]string{host: sb.inet.V4[0].String()})
	pol := filepath.Join(b.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf(`version: 1
network_policies:
  bench:
    endpoints:
      - host: %s
        port: %d
    binaries:
      - path: %s
`, host, port, binary)), 0o600)
	args := append([]string{"--policy", pol, "--listen", addr, "--hosts-file", hosts, "--log-format", "json",
		"--sandbox", "bench", "--cgroup", sb.cg.Name(), "--init-pid", strconv.Itoa(sb.anchor.Process.Pid)}, extra...)
	// PALISADE_BENCH_PROXY_ARGS adds flags (say --send-guard off, to
	// measure what the guard costs against the same build).
	args = append(args, strings.Fields(os.Getenv("PALISADE_BENCH_PROXY_ARGS"))...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = io.Discard
	// Started from a thread inside the host namespace: the proxy is born
	// there.
	if err := nsthread.Run(sb.hostNS, cmd.Start); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sb.pids[addr] = cmd.Process.Pid
	sb.waitListening(b, addr)
	return addr
}

// waitListening waits until addr accepts connections from the client
// namespace.
func (sb *benchSandbox) waitListening(b testing.TB, addr string) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := nsthread.Run(sb.clientNS, func() error {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("nothing listening on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
