//go:build linux

package attribution

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	palisadebpf "github.com/palisade-sandbox/palisade/bpf"
	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// handOffBackends are the backends every hand-off test runs against:
// /proc and eBPF, attached before any client connects.
func handOffBackends(t *testing.T, s *testSandbox) map[string]Backend {
	return map[string]Backend{"proc": s.backend(t, nil), "bpf": s.bpfBackend(t)}
}

// bpfBackend loads the eBPF backend on the sandbox's v2 cgroup.
func (s *testSandbox) bpfBackend(t testing.TB) *BPFBackend {
	t.Helper()
	return s.bpfBackendWith(t, nil)
}

// selfAndOther returns the test binary and a copy of it under another
// name, standing in for an unlisted program.
func selfAndOther(t testing.TB) (self, other string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other = filepath.Join(t.TempDir(), "other-binary")
	copyFile(t, self, other, nil)
	if err := os.Chmod(other, 0o755); err != nil {
		t.Fatal(err)
	}
	return self, other
}

// waitExe waits until pid runs exe (after an exec).
func waitExe(t *testing.T, pid int, exe string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err == nil && got == exe {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d runs %q (%v), want %s", pid, got, err, exe)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A socket created and connected by one binary and handed to another is
// attributed to the process that holds it when the request arrives (the
// one that sends it), never to the connector alone: by exec (same pid,
// new binary), to a child that outlives the parent's copy, and over
// SCM_RIGHTS to an unrelated process. A socket both the sender and the
// receiver of SCM_RIGHTS still hold is refused.
func TestHandOffsAttributeTheSender(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, other := selfAndOther(t)
	backends := handOffBackends(t, s)
	ctx := context.Background()
	// check also wants the eBPF backend to name the recorded connector
	// (connector: its pid and binary, "" when no longer nameable).
	check := func(what string, c *client, wantPID int, wantExe string, wantAncestor int, connector Process) {
		t.Helper()
		for name, b := range backends {
			id, err := b.Lookup(ctx, c.client, c.proxy)
			if err != nil {
				t.Errorf("%s, %s backend: %v", what, name, err)
				continue
			}
			switch {
			case name == "proc" && (id.Connector != nil || id.Backend != BackendProc):
				t.Errorf("%s, proc backend: connector %+v, backend %q", what, id.Connector, id.Backend)
			case name == "bpf" && (id.Connector == nil || *id.Connector != connector || id.Backend != BackendBPF):
				t.Errorf("%s, bpf backend: connector %+v (backend %q), want %+v", what, id.Connector, id.Backend, connector)
			}
			if id.PID != wantPID || id.Exe != wantExe {
				t.Errorf("%s, %s backend: attributed to pid %d %s, want pid %d %s", what, name, id.PID, id.Exe, wantPID, wantExe)
			}
			if wantAncestor != 0 && (len(id.Ancestors) == 0 || id.Ancestors[0].PID != wantAncestor) {
				t.Errorf("%s, %s backend: ancestors %+v, want %d first", what, name, id.Ancestors, wantAncestor)
			}
			for _, a := range id.Ancestors {
				if wantAncestor == 0 && a.Exe == self {
					t.Errorf("%s, %s backend: the connector %s appears among the sender's ancestors %+v", what, name, self, id.Ancestors)
				}
			}
		}
	}

	t.Run("exec", func(t *testing.T) {
		c := s.spawnArgs(self, "exechand", "4", other)
		waitExe(t, c.pid, other)
		// The connector ran self; after its exec nothing names that binary.
		check("fd inherited across exec", c, c.pid, other, 0, Process{PID: c.pid})
	})
	t.Run("fork", func(t *testing.T) {
		c := s.spawnArgs(self, "forkhand", "4", other)
		check("fd inherited by a child, parent's copy closed", c, c.holders[0], other, c.pid, Process{PID: c.pid, Exe: self})
	})
	for _, keep := range []string{"close", "keep"} {
		t.Run("scm_rights_"+keep, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.sock")
			tag := testutil.UniqueName("recv")
			if _, err := fmt.Fprintf(s.stdin, "spawn %s recv %s %s\n", other, tag, path); err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(s.waitLine(tag, 20*time.Second))
			recvPID, _ := strconv.Atoi(f[2])
			c := s.spawnArgs(self, "scmsend", "4", path, keep)
			s.waitLine(tag+".got", 20*time.Second)
			if keep == "close" {
				check("fd passed over SCM_RIGHTS, sender's copy closed", c, recvPID, other, 0, Process{PID: c.pid, Exe: self})
				return
			}
			for name, b := range backends {
				_, err := b.Lookup(ctx, c.client, c.proxy)
				var se *SharedError
				if !errors.As(err, &se) || !sameSet(se.PIDs, []int{c.pid, recvPID}) {
					t.Errorf("fd held by sender and receiver, %s backend: %v, want *SharedError naming %d and %d", name, err, c.pid, recvPID)
				}
			}
		})
	}
}

// waitGone waits until pid has exited (and been reaped).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still exists", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The eBPF and /proc backends agree on pid, binary and ancestors: for a
// plain client (the eBPF backend's fast path: its record alone), a
// client whose child shares the socket, a connector that hands the
// socket to a child and exits at once, and a client that exits right
// after connecting (nobody holds the socket: both refuse).
func TestBPFAndProcAgree(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, other := selfAndOther(t)
	pb, bb := s.backend(t, nil), s.bpfBackend(t)
	ctx := context.Background()
	agree := func(what string, c *client, wantPID int, wantBackend string) {
		t.Helper()
		pid, perr := pb.Lookup(ctx, c.client, c.proxy)
		bid, berr := bb.Lookup(ctx, c.client, c.proxy)
		if perr != nil || berr != nil {
			t.Errorf("%s: proc %v, bpf %v", what, perr, berr)
			return
		}
		if !identityEqual(*pid, *bid) || pid.PID != wantPID {
			t.Errorf("%s: backends disagree or miss pid %d:\n proc %+v\n bpf  %+v", what, wantPID, *pid, *bid)
		}
		if bid.Backend != wantBackend {
			t.Errorf("%s: bpf answered by %q, want %q", what, bid.Backend, wantBackend)
		}
	}
	for fam, what := range map[string]string{"4": "IPv4", "6": "IPv6", "mapped": "an IPv6 socket to an IPv4-mapped address"} {
		c := s.spawn(self, "client", fam)
		agree("plain client over "+what, c, c.pid, BackendBPFFast)
		// The record names the connecting thread and descriptor.
		inode, cookie, err := bb.proc.socketID(normAddr(c.client), normAddr(c.proxy))
		var rec palisadebpf.AttrConnInfo
		if err != nil || bb.objs.Conns.Lookup(cookie, &rec) != nil {
			t.Fatalf("%s: no record for cookie %d: %v", what, cookie, err)
		}
		if int(rec.Proc.Tgid) != c.pid || rec.FdPlus1 == 0 || rec.Proc.ExeIno == 0 || rec.SockIno != inode {
			t.Errorf("%s: record %+v: want tgid %d, the connecting fd, the executable's inode and the socket's inode %d", what, rec, c.pid, inode)
		}
		// The 4-tuple leads to the same socket as sock_diag.
		var byTuple palisadebpf.AttrConnInfo
		if ti, tc, ok := bb.byTuple(normAddr(c.client), normAddr(c.proxy), &byTuple); !ok || ti != inode || tc != cookie {
			t.Errorf("%s: by 4-tuple: inode %d cookie %d found %v; sock_diag says inode %d cookie %d", what, ti, tc, ok, inode, cookie)
		}
		// The lookup program reads in one call what the map lookups
		// read one by one.
		var byRun palisadebpf.AttrConnInfo
		ri, rc, ok, pre := bb.byTupleRun(normAddr(c.client), normAddr(c.proxy), &byRun)
		if !ok || pre == nil || ri != inode || rc != cookie || byRun != byTuple {
			t.Fatalf("%s: lookup program: inode %d cookie %d found %v prefetch %v, record %+v; want %d, %d, %+v", what, ri, rc, ok, pre != nil, byRun, inode, cookie, byTuple)
		}
		var passes uint64
		var selfInfo palisadebpf.AttrProcInfo
		bb.objs.Passes.Lookup(uint32(0), &passes)
		bb.objs.Procs.Lookup(uint32(c.pid), &selfInfo)
		if pre.Passes != passes || !pre.selfOK() || pre.Self != selfInfo {
			t.Errorf("%s: prefetched passes %d, self %+v (%v); the maps say %d, %+v", what, pre.Passes, pre.Self, pre.selfOK(), passes, selfInfo)
		}
		var chain []palisadebpf.AttrProcInfo
		for info := selfInfo; len(chain) < lookupAncestors; {
			var parent palisadebpf.AttrProcInfo
			if info.Ppid == 0 || bb.objs.Procs.Lookup(info.Ppid, &parent) != nil {
				break
			}
			chain = append(chain, parent)
			info = parent
		}
		if !slices.Equal(pre.anc(), chain) {
			t.Errorf("%s: prefetched ancestors %+v, the map's chain %+v", what, pre.anc(), chain)
		}
	}
	if n := bb.Counters()["bpf_lookup_run_errors"]; n != 0 {
		t.Errorf("%d runs of the lookup program failed", n)
	}
	sh := s.spawn(self, "share", "4")
	agree("client sharing with its child", sh, sh.pid, BackendBPFFast)
	fe := s.spawnArgs(self, "forkexit", "4", other)
	waitGone(t, fe.pid)
	agree("connector handed to a child and exited", fe, fe.holders[0], BackendBPF)

	before := mapLen(t, bb.objs.Conns)
	if before != 5 {
		t.Errorf("connection records: %d, want one per live client socket (5)", before)
	}
	ex := s.spawnArgs(self, "exit", "4", "-")
	waitGone(t, ex.pid)
	_, perr := pb.Lookup(ctx, ex.client, ex.proxy)
	_, berr := bb.Lookup(ctx, ex.client, ex.proxy)
	if !errors.Is(perr, ErrNotFound) || !errors.Is(berr, ErrNotFound) {
		t.Errorf("client exited after connecting: proc %v, bpf %v; want ErrNotFound from both", perr, berr)
	}
	// Maps are cleaned: the exited process leaves the tree, and its
	// socket's record goes when the socket closes.
	var info palisadebpf.AttrProcInfo
	if err := bb.objs.Procs.Lookup(uint32(ex.pid), &info); err == nil {
		t.Errorf("exited pid %d is still in the process tree: %+v", ex.pid, info)
	}
	ex.conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for mapLen(t, bb.objs.Conns) != before {
		if time.Now().After(deadline) {
			t.Fatalf("connection records: %d, want %d once the socket closed", mapLen(t, bb.objs.Conns), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := bb.Counters(); c["bpf_fast"] < 3 || c["bpf_by_tuple"] < 3 {
		t.Errorf("counters %v: want the fast path, found by 4-tuple, for the three clients that still hold their sockets", c)
	}
}

// mapLen counts a map's entries.
func mapLen(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var k uint64
	var v palisadebpf.AttrConnInfo
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// A backend that cannot attach fails with an error naming what failed,
// and releases what it had loaded (no panic on the way out).
func TestBPFBackendAttachFailure(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "bpf:cgroup_sock_addr")
	missing := filepath.Join(t.TempDir(), "no-such-cgroup")
	_, err := NewBPFBackend(BPFConfig{CgroupPath: missing, Proc: ProcConfig{
		NetnsPID: os.Getpid,
		Procs:    func() ([]int, error) { return nil, nil },
	}})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("attach to %s: %v, want an error naming it", missing, err)
	}
	if _, err := NewBPFBackend(BPFConfig{}); err == nil || !strings.Contains(err.Error(), "CgroupPath") {
		t.Errorf("no cgroup: %v, want an error naming CgroupPath", err)
	}
}

// The fast path names an image once (the image cache) and must not keep
// that name across an exec: a connector that execs the same file under
// another name (a hard link: same inode, so the executable still matches
// the record) is named by its new path, as /proc names it.
func TestImageCacheFollowsExec(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "image-a"), filepath.Join(dir, "image-b")
	copyFile(t, self, a, nil)
	if err := os.Chmod(a, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	pb, bb := s.backend(t, nil), s.bpfBackend(t)
	ctx := context.Background()
	c := s.spawnArgs(a, "execwait", "4", b)
	name := func(what, want string) {
		t.Helper()
		pid, perr := pb.Lookup(ctx, c.client, c.proxy)
		bid, berr := bb.Lookup(ctx, c.client, c.proxy)
		if perr != nil || berr != nil {
			t.Fatalf("%s: proc %v, bpf %v", what, perr, berr)
		}
		if bid.Exe != want || bid.PID != c.pid || bid.Backend != BackendBPFFast || !identityEqual(*pid, *bid) {
			t.Errorf("%s: bpf %+v, proc %+v; want pid %d %s from the fast path", what, *bid, *pid, c.pid, want)
		}
	}
	name("first lookup", a)
	hits := bb.Counters()["bpf_image_cached"]
	name("second lookup", a)
	if got := bb.Counters()["bpf_image_cached"]; got != hits+1 {
		t.Errorf("image_cached %d after a repeat lookup, want %d: the image was read again", got, hits+1)
	}
	if err := syscall.Kill(c.pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitExe(t, c.pid, b)
	name("after exec of the same file under another name", b)
}

// The documented map sizes are the ones the programs declare.
func TestBPFMapSizes(t *testing.T) {
	spec, err := palisadebpf.LoadAttr()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"conns": BPFMaxConns, "procs": BPFMaxProcs, "tuples": BPFMaxTuples,
		"guarded": BPFMaxConns, "decided": BPFMaxConns} {
		if m := spec.Maps[name]; m == nil || m.MaxEntries != want {
			t.Errorf("map %s: %+v, want %d entries", name, m, want)
		}
	}
	// Sized per sandbox: every map of a size follows it.
	if err := sizeMaps(spec, BPFConfig{MaxConns: 300, MaxProcs: 4096}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"conns": 300, "tuples": 300, "guarded": 300, "decided": 300, "procs": 4096} {
		if m := spec.Maps[name]; m.MaxEntries != want {
			t.Errorf("sized map %s: %d entries, want %d", name, m.MaxEntries, want)
		}
	}
	if err := sizeMaps(spec, BPFConfig{MaxProcs: -1}); err == nil || !strings.Contains(err.Error(), "MaxProcs") {
		t.Errorf("MaxProcs -1: %v, want an error naming it", err)
	}
}

// The exhaustive search names whoever holds the socket's inode, so an
// inode the connect hook recorded wrongly (as a descriptor swapped during
// the connect could make it) must not lead it to another process's
// socket: the record of a handed-off socket is made to name a socket
// another process holds, and the lookup still names the real holder.
func TestExhaustiveSearchChecksTheRecordedInode(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, other := selfAndOther(t)
	bb := s.bpfBackend(t)
	ctx := context.Background()
	handed := s.spawnArgs(self, "forkhand", "4", other)
	bystander := s.spawn(self, "client", "4")
	hInode, hCookie, err := bb.proc.socketID(normAddr(handed.client), normAddr(handed.proxy))
	if err != nil {
		t.Fatal(err)
	}
	bInode, _, err := bb.proc.socketID(normAddr(bystander.client), normAddr(bystander.proxy))
	if err != nil {
		t.Fatal(err)
	}
	var rec palisadebpf.AttrConnInfo
	if err := bb.objs.Conns.Lookup(hCookie, &rec); err != nil || rec.SockIno != hInode {
		t.Fatalf("record of the handed-off socket: %+v, %v; want its inode %d", rec, err, hInode)
	}
	rec.SockIno = bInode
	if err := bb.objs.Conns.Update(hCookie, &rec, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	id, err := bb.Lookup(ctx, handed.client, handed.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if id.PID != handed.holders[0] || id.PID == bystander.pid {
		t.Errorf("attributed to pid %d (%s); want the holder %d, not the bystander %d whose socket the record named", id.PID, id.Exe, handed.holders[0], bystander.pid)
	}
	if c := bb.Counters(); c["bpf_tuple_mismatch"] != 1 {
		t.Errorf("counters %v: want one tuple mismatch", c)
	}
}

// A connector whose process-tree entry cannot key the image cache (a
// process seeded at attach time has no start time; an exec counter that
// wrapped marks its image unknown) is still answered by the fast path,
// from /proc, and agrees with the /proc backend; nothing is cached.
func TestFastPathWithoutImageCache(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, _ := selfAndOther(t)
	pb, bb := s.backend(t, nil), s.bpfBackend(t)
	ctx := context.Background()
	c := s.spawn(self, "client", "4")
	var info palisadebpf.AttrProcInfo
	if err := bb.objs.Procs.Lookup(uint32(c.pid), &info); err != nil {
		t.Fatal(err)
	}
	info.ExecSeq = execSeqUnknown
	if err := bb.objs.Procs.Update(uint32(c.pid), &info, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		pid, perr := pb.Lookup(ctx, c.client, c.proxy)
		bid, berr := bb.Lookup(ctx, c.client, c.proxy)
		if perr != nil || berr != nil {
			t.Fatalf("proc %v, bpf %v", perr, berr)
		}
		if bid.Backend != BackendBPFFast || !identityEqual(*pid, *bid) {
			t.Errorf("bpf %+v, proc %+v: want the fast path's answer equal to /proc's", *bid, *pid)
		}
	}
	if got := bb.Counters()["bpf_image_cached"]; got != 0 {
		t.Errorf("image_cached %d: an uncacheable image was answered from the cache", got)
	}
}

// An exec between naming the connector and the fast path's end (a new
// exec_seq in the process tree) makes the fast path refuse: the name it
// read may be the old image's. The exhaustive search answers instead.
func TestFastPathRefusesAnExecWhileNaming(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, _ := selfAndOther(t)
	bb := s.bpfBackend(t)
	c := s.spawn(self, "client", "4")
	testHookNamed = func(tgid int) {
		var info palisadebpf.AttrProcInfo
		if bb.objs.Procs.Lookup(uint32(tgid), &info) == nil {
			info.ExecSeq++ // what the exec tracepoint would do
			bb.objs.Procs.Update(uint32(tgid), &info, ebpf.UpdateExist)
		}
	}
	t.Cleanup(func() { testHookNamed = nil })
	id, err := bb.Lookup(context.Background(), c.client, c.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if id.Backend == BackendBPFFast || id.PID != c.pid {
		t.Errorf("%+v: want the exhaustive search's answer (pid %d), not the fast path's", *id, c.pid)
	}
}

// A socket handed from an unlisted connector to another process is
// attributed to both (the proxy then needs both allowed). A flood that
// evicts the socket's connect record from its LRU map must not leave
// the holder to be decided on alone: the lookup fails closed
// (ErrIncomplete), counted as unrecorded. The map is sized small for
// the sandbox (BPFConfig.MaxConns) so the flood is quick.
func TestEvictedRecordNeverWidens(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, other := selfAndOther(t)
	bb := s.bpfBackendWith(t, func(c *BPFConfig) { c.MaxConns = 256 })
	path := filepath.Join(t.TempDir(), "r.sock")
	tag := testutil.UniqueName("recv")
	if _, err := fmt.Fprintf(s.stdin, "spawn %s recv %s %s\n", other, tag, path); err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(s.waitLine(tag, 20*time.Second))
	recvPID, _ := strconv.Atoi(f[2])
	c := s.spawnArgs(self, "scmsend", "4", path, "close")
	s.waitLine(tag+".got", 20*time.Second)
	// The record exists before the flood (read by the map-lookup system
	// call, which leaves the LRU's reference bit alone: a lookup by a
	// program would move the record to the active list, which a flood of
	// unreferenced records never rotates).
	_, cookie, err := bb.proc.socketID(normAddr(c.client), normAddr(c.proxy))
	var rec palisadebpf.AttrConnInfo
	if err != nil || bb.objs.Conns.Lookup(cookie, &rec) != nil || int(rec.Proc.Tgid) != c.pid {
		t.Fatalf("before the flood: record %+v of cookie %d (%v); want connector %d", rec, cookie, err, c.pid)
	}
	flood := testutil.UniqueName("flood")
	if _, err := fmt.Fprintf(s.stdin, "spawn %s flood %s 4096\n", self, flood); err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(s.waitLine(flood, 60*time.Second)); len(got) < 3 || got[2] != strconv.Itoa(4096*runtime.NumCPU()) {
		t.Fatalf("flood: %v, want 4096 refused connects per CPU (%d)", got, runtime.NumCPU())
	}
	if bb.objs.Conns.Lookup(cookie, &rec) == nil {
		t.Fatalf("the flood left the record of cookie %d in place (%d records): the test proves nothing", cookie, mapLen(t, bb.objs.Conns))
	}
	before := bb.Counters()["bpf_unrecorded"]
	id, err := bb.Lookup(context.Background(), c.client, c.proxy)
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("after the flood: %+v, %v; want ErrIncomplete, never the holder (pid %d) alone", id, err, recvPID)
	}
	var ie *IncompleteError
	if !errors.As(err, &ie) || ie.Holder == nil || ie.Holder.PID != recvPID {
		t.Errorf("refusal %v: want it to name the holder %d for the record", err, recvPID)
	}
	if got := bb.Counters()["bpf_unrecorded"]; got != before+1 {
		t.Errorf("bpf_unrecorded %d, want %d", got, before+1)
	}
}

// bpfBackendWith is bpfBackend with the configuration adjusted by mod.
func (s *testSandbox) bpfBackendWith(t testing.TB, mod func(*BPFConfig)) *BPFBackend {
	t.Helper()
	for _, f := range []string{"bpf:cgroup_sock_addr", "bpf:sock_ops", "bpf:tracepoint"} {
		testutil.RequireFeature(t, f)
	}
	dir := s.cg.Path(cgroup.Unified)
	if dir == "" {
		testutil.RequireData(t, "a cgroup v2 hierarchy for the sandbox's cgroup", errors.New("none mounted"))
	}
	cfg := BPFConfig{CgroupPath: dir, Proc: ProcConfig{
		NetnsPID: func() int { return s.initPID },
		Procs:    s.cg.Procs,
		InitPID:  s.initPID,
	}}
	if mod != nil {
		mod(&cfg)
	}
	b, err := NewBPFBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// reusePID makes the next process the sandbox init spawns (through bash)
// get host pid pid, which must be free: it sets the host's
// /proc/sys/kernel/ns_last_pid just below it and spawns, retrying while
// other processes on the host take the pid first. It returns the
// spawned bash's tag.
func (s *testSandbox) reusePID(pid int, bin string) {
	t := s.t
	t.Helper()
	for attempt := range 50 {
		tag := testutil.UniqueName("reuse")
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			testutil.RequireData(t, "a writable /proc/sys/kernel/ns_last_pid", err)
		}
		if _, err := fmt.Fprintf(s.stdin, "spawn %s holder %s x\n", bin, tag); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if pids, _ := s.cg.Procs(); slices.Contains(pids, pid) {
				t.Logf("pid %d reused on attempt %d", pid, attempt+1)
				return
			}
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
				break // someone else's process took it: try again
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Fatalf("pid %d was not reused by a sandbox process in 50 attempts", pid)
}

// Pid reuse cannot forge ancestry, on either backend: a client whose
// parent exited (an orphan) has no ancestors, also after a new sandbox
// process got the dead parent's pid; before, the eBPF process tree kept
// the dead parent's pid and the walk named whatever process had it now.
func TestPidReuseCannotForgeAncestry(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, other := selfAndOther(t)
	backends := handOffBackends(t, s)
	bb := backends["bpf"].(*BPFBackend)
	c := s.spawnArgs(self, "orphan", "4")
	waitGone(t, c.ppid)
	var rec palisadebpf.AttrProcInfo
	if err := bb.objs.Procs.Lookup(uint32(c.pid), &rec); err != nil || int(rec.Ppid) != c.ppid || rec.Pstart == 0 {
		t.Fatalf("process-tree entry of the orphan %d: %+v, %v; want its dead parent %d with a start time", c.pid, rec, err, c.ppid)
	}
	s.reusePID(c.ppid, other)
	var reused palisadebpf.AttrProcInfo
	if err := bb.objs.Procs.Lookup(uint32(c.ppid), &reused); err != nil || reused.StartTime == rec.Pstart {
		t.Fatalf("entry of the reused pid %d: %+v, %v; want a new process there", c.ppid, reused, err)
	}
	ctx := context.Background()
	for name, b := range backends {
		id, err := b.Lookup(ctx, c.client, c.proxy)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if id.PID != c.pid || len(id.Ancestors) != 0 {
			t.Errorf("%s: %+v; want pid %d with no ancestors (its parent %d exited; that pid is another process's now)", name, id, c.pid, c.ppid)
		}
	}
}

// Processes that existed before the programs were attached are seeded
// from their tasks (the seed program): a start time and their parent's,
// so ancestor chains pass through them; their image is not cached.
func TestSeedReadsTasks(t *testing.T) {
	s := newTestSandbox(t, 128)
	_, other := selfAndOther(t)
	tag := testutil.UniqueName("seeded")
	if _, err := fmt.Fprintf(s.stdin, "spawn %s holder %s x\n", other, tag); err != nil {
		t.Fatal(err)
	}
	var holder, bash int
	deadline := time.Now().Add(10 * time.Second)
	for holder == 0 && time.Now().Before(deadline) {
		pids, _ := s.cg.Procs()
		for _, p := range pids {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p)); exe == other {
				holder = p
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if holder == 0 {
		t.Fatal("the holder did not start")
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", holder))
	if err != nil {
		t.Fatal(err)
	}
	if bash, err = parseStatPPid(st); err != nil {
		t.Fatal(err)
	}
	bb := s.bpfBackend(t)
	if bb.objs.Seed == nil {
		t.Fatalf("the seed program did not load: %v", bb.skipped["seed"])
	}
	var h, p palisadebpf.AttrProcInfo
	if err := bb.objs.Procs.Lookup(uint32(holder), &h); err != nil {
		t.Fatal(err)
	}
	if err := bb.objs.Procs.Lookup(uint32(bash), &p); err != nil {
		t.Fatal(err)
	}
	if h.StartTime == 0 || int(h.Ppid) != bash || h.Pstart != p.StartTime || p.StartTime == 0 || h.ExecSeq != execSeqUnknown {
		t.Errorf("seeded holder %+v, its parent %+v: want start times, the parent's recorded, the image not cacheable", h, p)
	}
	if got := bb.ancestors(holder, nil, nil); len(got) != 1 || got[0].PID != bash {
		t.Errorf("ancestors of the seeded holder: %+v, want bash %d", got, bash)
	}
}
