//go:build linux

package attribution

import (
	"context"
	"errors"
	"io"
	"net"
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
	// A release deletes the entry, and a connection is bound once, on
	// the placeholder sock_ops put when it was established: each round
	// puts the placeholder back first, outside the time.
	setGuard(true)
	c := s.spawn(self, "client", "4")
	id, err := bb.Lookup(context.Background(), c.client, c.proxy)
	if err != nil {
		b.Fatal(err)
	}
	const binds = 2000
	var took time.Duration
	for range binds {
		if err := bb.objs.Decided.Update(id.cookie, &palisadebpf.AttrDecidedInfo{}, ebpf.UpdateAny); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		release, err := bb.Guard(id, func(SendViolation) {})
		if err != nil {
			b.Fatal(err)
		}
		release()
		took += time.Since(start)
	}
	bind := float64(took.Nanoseconds()) / binds
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
	id, err := on.Lookup(context.Background(), c.client, c.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if n := guarded(on); n == 0 {
		t.Fatal("the default backend put no sandbox connection under the guard")
	}
	var member uint64
	var d palisadebpf.AttrDecidedInfo
	if on.objs.Guarded.Lookup(id.cookie, &member) != nil || on.objs.Decided.Lookup(id.cookie, &d) != nil || d.Tgid != 0 {
		t.Fatalf("guarded connection: in the sockhash %v, placeholder %v (%+v); want both, unbound",
			on.objs.Guarded.Lookup(id.cookie, &member) == nil, on.objs.Decided.Lookup(id.cookie, &d) == nil, d)
	}
	on.Close()

	off := s.bpfBackendWith(t, func(c *BPFConfig) { c.NoSendGuard = true })
	if active, err := off.GuardActive(); active || err == nil || !strings.Contains(err.Error(), "turned off") {
		t.Fatalf("GuardActive with NoSendGuard: %v, %v; want false, turned off", active, err)
	}
	c = s.spawn(self, "client", "4")
	if id, err = off.Lookup(context.Background(), c.client, c.proxy); err != nil {
		t.Fatal(err)
	}
	if n := guarded(off); n != 0 {
		t.Fatalf("NoSendGuard: %d sockets under the guard, want none", n)
	}
	if off.objs.Decided.Lookup(id.cookie, &d) == nil {
		t.Fatalf("NoSendGuard: a decided-map entry %+v for the connection", d)
	}
}

// TestGuardNeedsThePlaceholder: sock_ops puts an unbound placeholder
// (tgid 0) in the decided map when a socket joins the guarded sockhash,
// and Guard binds only by replacing it (BPF_EXIST) instead of asking the
// sockhash first (a system call fewer per connection). A socket without
// the placeholder is not bound (ErrNoGuard: the proxy refuses the
// connection). That sends pass under the placeholder every test of a
// tunnel shows: its CONNECT request is sent before the binding.
func TestGuardNeedsThePlaceholder(t *testing.T) {
	s := newTestSandbox(t, 64)
	self, _ := selfAndOther(t)
	bb := s.bpfBackend(t)
	if active, err := bb.GuardActive(); !active {
		t.Fatalf("send guard: %v", err)
	}
	c := s.spawn(self, "client", "4")
	id, err := bb.Lookup(context.Background(), c.client, c.proxy)
	if err != nil {
		t.Fatal(err)
	}
	var d palisadebpf.AttrDecidedInfo
	if err := bb.objs.Decided.Lookup(id.cookie, &d); err != nil || d.Tgid != 0 {
		t.Fatalf("placeholder: %+v, %v; want an unbound entry", d, err)
	}
	release, err := bb.Guard(id, func(SendViolation) {})
	if err != nil {
		t.Fatalf("Guard with the placeholder in place: %v", err)
	}
	if err := bb.objs.Decided.Lookup(id.cookie, &d); err != nil || int(d.Tgid) != id.PID {
		t.Fatalf("binding: %+v, %v; want tgid %d", d, err, id.PID)
	}
	release() // deletes the entry, placeholder and all
	if release, err := bb.Guard(id, func(SendViolation) {}); !errors.Is(err, ErrNoGuard) {
		if release != nil {
			release()
		}
		t.Fatalf("Guard without the placeholder: %v, want ErrNoGuard", err)
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

// TestReconnectedSocketIsNotGuardedAgain: a socket that was under the
// guard, bound to a decided connection, then disconnected (connect with
// AF_UNSPEC, which leaves it in the sockhash) and connected again is the
// same socket with the same cookie. sock_ops takes it out of the guard
// without a placeholder, so its new connection cannot be bound
// (ErrNoGuard: the proxy refuses it as attribution_incomplete). Before,
// the second connection was bound like any other, and the first
// connection's release (forgetDecided by cookie, whenever that
// connection ended) deleted the second one's binding, leaving it
// unguarded.
func TestReconnectedSocketIsNotGuardedAgain(t *testing.T) {
	s := newTestSandbox(t, 64)
	self, _ := selfAndOther(t)
	bb := s.bpfBackend(t)
	if active, err := bb.GuardActive(); !active {
		t.Fatalf("send guard: %v", err)
	}
	c := s.spawnArgs(self, "reconnect", "4")
	id, err := bb.Lookup(context.Background(), c.client, c.proxy)
	if err != nil {
		t.Fatal(err)
	}
	release, err := bb.Guard(id, func(SendViolation) {})
	if err != nil {
		t.Fatalf("bind the first connection: %v", err)
	}
	defer release()
	syscall.Kill(c.pid, syscall.SIGUSR1)
	f := strings.Fields(s.waitLine(c.tag+".re", 20*time.Second))
	if len(f) != 3 {
		t.Fatalf("bad reconnected line %q", f)
	}
	s.ln4.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := s.ln4.Accept()
	if err != nil {
		t.Fatalf("accept the second connection: %v", err)
	}
	defer conn.Close()
	client := conn.RemoteAddr().(*net.TCPAddr).AddrPort()
	if client.String() != f[2] {
		t.Fatalf("the helper says it reconnected from %s, accepted %v", f[2], client)
	}
	id2, err := bb.Lookup(context.Background(), client, conn.LocalAddr().(*net.TCPAddr).AddrPort())
	if err != nil {
		t.Fatalf("lookup of the second connection: %v", err)
	}
	if id2.cookie != id.cookie {
		t.Fatalf("the second connection's cookie %d is not the first's %d: not the same socket", id2.cookie, id.cookie)
	}
	if release2, err := bb.Guard(id2, func(SendViolation) {}); !errors.Is(err, ErrNoGuard) {
		if release2 != nil {
			release2()
		}
		t.Fatalf("Guard of the reconnected socket: %v, want ErrNoGuard", err)
	}
}
