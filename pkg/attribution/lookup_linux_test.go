//go:build linux

package attribution

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	palisadebpf "github.com/palisade-sandbox/palisade/bpf"
)

// The lookup program reads at most lookupAncestors ancestors; ancestors
// goes on from the last with map lookups when the chain is longer, and
// stops where a shorter chain ended (the program found no entry there).
// A fake chain of process-tree entries, named from the image cache.
func TestAncestorsBeyondTheLookupProgram(t *testing.T) {
	s := newTestSandbox(t, 16)
	bb := s.bpfBackend(t)
	const base = 3_900_000 // tgids no live process has (pid_max is lower)
	n := lookupAncestors + 5
	infos := make([]palisadebpf.AttrProcInfo, n+1) // [0] the connector, [i] the parent of [i-1]
	for i := range infos {
		infos[i] = palisadebpf.AttrProcInfo{Tgid: uint32(base + i), StartTime: uint64(1000 + i), ExecSeq: 1, ExeIno: uint64(i + 1), ExeDev: 1}
		if i < n {
			infos[i].Ppid = uint32(base + i + 1)
			infos[i].Pstart = uint64(1000 + i + 1)
		}
		if err := bb.objs.Procs.Put(infos[i].Tgid, infos[i]); err != nil {
			t.Fatal(err)
		}
		bb.images.put(imageKeyOf(&infos[i]), imageInfo{exe: fmt.Sprintf("/bin/a%d", i)})
	}
	t.Cleanup(func() {
		for i := range infos {
			bb.objs.Procs.Delete(infos[i].Tgid)
		}
	})
	names := func(ps []Process) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Exe)
		}
		return out
	}
	var want []string
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("/bin/a%d", i))
	}
	unaided := names(bb.ancestors(base, &infos[0], nil))
	full := names(bb.ancestors(base, &infos[0], infos[1:1+lookupAncestors]))
	if !slices.Equal(unaided, want) || !slices.Equal(full, want) {
		t.Errorf("ancestors: map lookups only %v, after the program's %d %v; want %v", unaided, lookupAncestors, full, want)
	}
	// The program stopped after 3: whatever the map holds now, the chain
	// it read ends there.
	if short := names(bb.ancestors(base, &infos[0], infos[1:4])); !slices.Equal(short, want[:3]) {
		t.Errorf("ancestors after a chain of 3: %v, want %v", short, want[:3])
	}
}

// BenchmarkLookupProgramRun runs the lookup program for one live
// connection through cilium/ebpf's Program.Run (the context handed over
// as bytes: as a struct it is encoded by reflection, slower still) and
// through progRunCtx, the BPF_PROG_TEST_RUN that byTupleRun makes on
// the context's own memory.
//
//	go test -run '^$' -bench LookupProgramRun ./pkg/attribution
func BenchmarkLookupProgramRun(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	s := newTestSandbox(b, 64)
	bb := s.bpfBackend(b)
	c := s.spawn(self, "client", "4")
	key := tupleKey(normAddr(c.client), normAddr(c.proxy))
	check := func(b *testing.B, lk *palisadebpf.AttrLookupCtx) {
		if lk.Found&lookupConn == 0 || int(lk.Conn.Proc.Tgid) != c.pid {
			b.Fatalf("lookup found %d, tgid %d; want the client %d", lk.Found, lk.Conn.Proc.Tgid, c.pid)
		}
	}
	b.Run("cilium-Run", func(b *testing.B) {
		lk := new(palisadebpf.AttrLookupCtx)
		raw := unsafe.Slice((*byte)(unsafe.Pointer(lk)), unsafe.Sizeof(*lk))
		b.ReportAllocs()
		for b.Loop() {
			*lk = palisadebpf.AttrLookupCtx{Key: key}
			if _, err := bb.objs.Lookup.Run(&ebpf.RunOptions{Context: raw, ContextOut: raw}); err != nil {
				b.Fatal(err)
			}
		}
		check(b, lk)
	})
	b.Run("progRunCtx", func(b *testing.B) {
		lk := new(palisadebpf.AttrLookupCtx)
		b.ReportAllocs()
		for b.Loop() {
			*lk = palisadebpf.AttrLookupCtx{Key: key}
			if err := progRunCtx(bb.objs.Lookup.FD(), unsafe.Pointer(lk), uint32(unsafe.Sizeof(*lk))); err != nil {
				b.Fatal(err)
			}
		}
		check(b, lk)
	})
}
