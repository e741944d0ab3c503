//go:build linux

package attribution

import (
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSendGuard measures what the send guard costs a connection,
// with the guard attached and turned off (guard_on 0: sockets are not
// put under it), rounds alternating:
//   - bind: the proxy's Guard and its release for one decided
//     connection (a map lookup, an update and a delete);
//   - send: the CPU a sandbox process spends per 1 KiB write on a
//     decided connection (the sk_msg verdict on every send).
func BenchmarkSendGuard(b *testing.B) {
	s := newTestSandbox(b, 64)
	self, _ := selfAndOther(b)
	bb := s.bpfBackend(b)
	if on, err := bb.GuardActive(); !on {
		b.Fatalf("send guard: %v", err)
	}
	setGuard := func(on bool) {
		v := uint32(0)
		if on {
			v = 1
		}
		if err := bb.objs.GuardOn.Put(uint32(0), v); err != nil {
			b.Fatal(err)
		}
	}
	const writes, size = 20000, 1024
	send := func(on bool) float64 {
		setGuard(on)
		c := s.spawnArgs(self, "blast", "4", strconv.Itoa(writes), strconv.Itoa(size))
		go io.Copy(io.Discard, c.conn)
		if on {
			id, err := bb.Lookup(context.Background(), c.client, c.proxy)
			if err != nil {
				b.Fatal(err)
			}
			release, err := bb.Guard(id, func(SendViolation) {})
			if err != nil {
				b.Fatal(err)
			}
			defer release()
		}
		syscall.Kill(c.pid, syscall.SIGUSR1)
		f := strings.Fields(s.waitLine(c.tag, 60*time.Second))
		cpu, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			b.Fatalf("blast: %q", f)
		}
		return cpu / writes
	}
	var on, off []float64
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			on, off = append(on, send(true)), append(off, send(false))
		} else {
			off, on = append(off, send(false)), append(on, send(true))
		}
	}
	// The bind: Guard + release on one decided connection, many times.
	setGuard(true)
	c := s.spawn(self, "client", "4")
	id, err := bb.Lookup(context.Background(), c.client, c.proxy)
	if err != nil {
		b.Fatal(err)
	}
	const binds = 2000
	start := time.Now()
	for range binds {
		release, err := bb.Guard(id, func(SendViolation) {})
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
	bind := float64(time.Since(start).Nanoseconds()) / binds
	slices.Sort(on)
	slices.Sort(off)
	b.Logf("CPU ns per 1 KiB write, guarded %.0f\nunguarded %.0f\nbind+release %.0f ns", on, off, bind)
	b.ReportMetric(on[len(on)/2], "cpu-ns/write-guarded")
	b.ReportMetric(off[len(off)/2], "cpu-ns/write-unguarded")
	b.ReportMetric(bind, "ns/bind")
	b.ReportMetric(0, "ns/op")
}
