//go:build linux

package attribution

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// sleepers starts n sleeping processes in the sandbox (children of its
// init, so in its cgroup) and waits until they all run.
func (s *testSandbox) sleepers(n int) {
	s.t.Helper()
	tag := testutil.UniqueName("sleep")
	if _, err := fmt.Fprintf(s.stdin, "sleepers %s %d\n", tag, n); err != nil {
		s.t.Fatal(err)
	}
	s.waitLine(tag, 3*time.Minute)
}

// BenchmarkProcLookup measures one Lookup (cgroup pid list, socket table,
// the fd tables of every sandbox process, identity and ancestors; the
// executable's hash is cached after the first lookup) in a sandbox of N
// processes: N idle sleep processes (3 fds each), the init, and the
// client that owns the socket, which Procs lists last. The search always
// covers every process (a socket held by several must be seen), so the
// owner's position does not change the cost. p50/p99 are per-lookup
// latencies in microseconds, cpu-us/op the CPU time (user and system) one
// lookup costs. Each size runs with the sock_diag fast path, with the
// /proc/<pid>/net/tcp tables only, and with the eBPF backend (a client
// connected after its programs were attached, answered from its record:
// the fast path).
//
//	go test -run '^$' -bench ProcLookup -benchtime 200x ./pkg/attribution/
func BenchmarkProcLookup(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{70, 500, 5000} {
		b.Run(fmt.Sprintf("procs=%d", n), func(b *testing.B) {
			s := newTestSandbox(b, int64(n)+64)
			start := time.Now()
			s.sleepers(n)
			b.Logf("started %d sleepers in %v", n, time.Since(start).Round(time.Millisecond))
			c := s.spawn(self, "client", "4")
			for _, mode := range []struct {
				name       string
				noSockDiag bool
			}{{"sock_diag", false}, {"proc_tables", true}} {
				b.Run(mode.name, func(b *testing.B) {
					benchLookup(b, s.orderedBackend(b, c, mode.noSockDiag), c, self, "")
				})
			}
			b.Run("bpf", func(b *testing.B) {
				be := s.bpfBackend(b)
				bc := s.spawn(self, "client", "4")
				benchLookup(b, be, bc, self, BackendBPFFast)
			})
		})
	}
}

// orderedBackend is a /proc backend whose Procs lists c's owner last.
func (s *testSandbox) orderedBackend(b *testing.B, c *client, noSockDiag bool) *ProcBackend {
	return s.backend(b, func(cfg *ProcConfig) {
		cfg.NoSockDiag = noSockDiag
		cfg.Procs = func() ([]int, error) {
			pids, err := s.cg.Procs()
			if i := slices.Index(pids, c.pid); i >= 0 {
				pids = append(slices.Delete(pids, i, i+1), c.pid)
			}
			return pids, err
		}
	})
}

// benchLookup measures Lookup of c's connection through be; wantBackend,
// when set, is the Identity.Backend every answer must name.
func benchLookup(b *testing.B, be Backend, c *client, self, wantBackend string) {
	ctx := context.Background()
	cold := time.Now()
	if _, err := be.Lookup(ctx, c.client, c.proxy); err != nil {
		b.Fatal(err)
	}
	b.Logf("first lookup (hashes %s): %v", self, time.Since(cold).Round(time.Microsecond))
	var lat []time.Duration
	var ru0, ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	for b.Loop() {
		t0 := time.Now()
		id, err := be.Lookup(ctx, c.client, c.proxy)
		lat = append(lat, time.Since(t0))
		if err != nil || id.PID != c.pid || (wantBackend != "" && id.Backend != wantBackend) {
			b.Fatalf("lookup: %+v, %v", id, err)
		}
	}
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds())
	}
	if pb, ok := be.(*ProcBackend); ok {
		st := pb.Stats()
		noSockDiag := pb.cfg.NoSockDiag
		if noSockDiag != (st.SockDiag == 0) {
			b.Fatalf("NoSockDiag=%v but stats %+v", noSockDiag, st)
		}
		b.ReportMetric(float64(st.Scanned)/float64(st.Lookups), "procs/op")
	}
	b.ReportMetric(pct(0.5), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
	// CPU time (user+system, all threads) per lookup: less sensitive than
	// latency to other load on the machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(len(lat)), "cpu-us/op")
}
