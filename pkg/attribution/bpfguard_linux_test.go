//go:build linux

package attribution

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	palisadebpf "github.com/palisade-sandbox/palisade/bpf"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
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

// TestNoSendGuardPutsNothingUnderIt: with NoSendGuard (egress-proxy
// --send-guard off) the backend reports the guard off and a sandbox
// connection stays out of the guarded sockhash (so its sends keep the
// plain TCP path), where the default backend puts the same connection
// under it. Before NoSendGuard, --send-guard off only skipped the binding
// and every socket still took the sk_msg path.
func TestNoSendGuardPutsNothingUnderIt(t *testing.T) {
	s := newTestSandbox(t, 64)
	self, _ := selfAndOther(t)
	guarded := func(bb *BPFBackend) int {
		var key, next uint64
		n := 0
		for k := any(nil); n < 1000; k = &key {
			if err := bb.objs.Guarded.NextKey(k, &next); err != nil {
				if !errors.Is(err, ebpf.ErrKeyNotExist) {
					t.Fatalf("guarded sockhash: %v", err)
				}
				break
			}
			key = next
			n++
		}
		return n
	}
	on := s.bpfBackend(t)
	if active, err := on.GuardActive(); !active {
		t.Fatalf("send guard: %v", err)
	}
	c := s.spawn(self, "client", "4")
	if _, err := on.Lookup(context.Background(), c.client, c.proxy); err != nil {
		t.Fatal(err)
	}
	if n := guarded(on); n == 0 {
		t.Fatal("the default backend put no sandbox connection under the guard")
	}
	on.Close()

	off := s.bpfBackendWith(t, func(c *BPFConfig) { c.NoSendGuard = true })
	if active, err := off.GuardActive(); active || err == nil || !strings.Contains(err.Error(), "turned off") {
		t.Fatalf("GuardActive with NoSendGuard: %v, %v; want false, turned off", active, err)
	}
	c = s.spawn(self, "client", "4")
	if _, err := off.Lookup(context.Background(), c.client, c.proxy); err != nil {
		t.Fatal(err)
	}
	if n := guarded(off); n != 0 {
		t.Fatalf("NoSendGuard: %d sockets under the guard, want none", n)
	}
}

// forgetDecided deletes a present entry, and a missing one costs the
// system call alone; BenchmarkForgetDecided compares it with
// cilium/ebpf's Map.Delete on a missing key (the usual case at release).
func newDecidedMap(tb testing.TB) *ebpf.Map {
	testutil.RequireRoot(tb)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8,
		ValueSize: uint32(unsafe.Sizeof(palisadebpf.AttrDecidedInfo{})), MaxEntries: 16})
	if err != nil {
		tb.Fatalf("hash map: %v", err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

func TestForgetDecided(t *testing.T) {
	m := newDecidedMap(t)
	d := palisadebpf.AttrDecidedInfo{Tgid: 7, StartTime: 9}
	for _, c := range []uint64{1, 2, 1 << 40} {
		if err := m.Put(c, &d); err != nil {
			t.Fatal(err)
		}
	}
	forgetDecided(m, 1<<40)
	forgetDecided(m, 3) // missing: nothing happens
	var got palisadebpf.AttrDecidedInfo
	if err := m.Lookup(uint64(1<<40), &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("entry 1<<40 after forgetDecided: %+v, %v", got, err)
	}
	for _, c := range []uint64{1, 2} {
		if err := m.Lookup(c, &got); err != nil || got != d {
			t.Fatalf("entry %d (not forgotten): %+v, %v", c, got, err)
		}
	}
}

func BenchmarkForgetDecided(b *testing.B) {
	m := newDecidedMap(b)
	b.Run("raw", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			forgetDecided(m, uint64(i))
		}
	})
	b.Run("cilium", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			m.Delete(uint64(i))
		}
	})
}
