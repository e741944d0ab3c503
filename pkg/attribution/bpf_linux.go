//go:build linux

package attribution

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	palisadebpf "github.com/palisade-sandbox/palisade/bpf"
)

// BPFConfig configures the eBPF backend for one sandbox.
type BPFConfig struct {
	// CgroupPath is the sandbox's cgroup directory in the v2 hierarchy
	// (/sys/fs/cgroup/unified/palisade/<name> on a hybrid host). The
	// programs attach there. Required.
	CgroupPath string
	// Proc configures the /proc backend the eBPF backend uses for the
	// exhaustive check and for sockets it has no record of.
	Proc ProcConfig
	// MaxConns sizes this sandbox's connection-record and 4-tuple maps
	// (LRU: a flood evicts the oldest records, and a socket whose record
	// is gone is refused, ErrIncomplete) and the send guard's (a socket
	// it cannot hold is refused). 0 means BPFMaxConns.
	MaxConns int
	// MaxProcs sizes the process tree: at least the sandbox's pids limit
	// (an entry per live process; a process without one has no known
	// ancestry and its code counts as unknown). 0 means BPFMaxProcs.
	MaxProcs int
	// CodeHooks chooses how executable mappings are observed for code
	// identity: HooksTracepoints (the syscall tracepoints after mmap,
	// mprotect, pkey_mprotect and shmat; an error when they do not
	// attach), HooksOff (none: /proc/<pid>/maps at each lookup), or ""
	// (the tracepoints when they attach, else /proc).
	CodeHooks string
	// NoSendGuard leaves the send guard out (egress-proxy --send-guard
	// off): its sk_msg program is not attached and no socket is put
	// under it, so the sandbox's sockets keep the kernel's plain TCP
	// send and receive paths; GuardActive says it is off.
	NoSendGuard bool
}

// Code hook settings (BPFConfig.CodeHooks, BPFBackend.CodeHooks).
const (
	HooksTracepoints = "tracepoints"
	HooksOff         = "off"
)

// BPFBackend attributes connections by what eBPF programs on the
// sandbox's cgroup recorded when each socket connected (bpf/attr.c): the
// connecting process (tgid, thread, comm, executable dev+inode, cgroup
// id, start time) by socket cookie, the sandbox's process tree from the
// fork/exec/exit tracepoints, and a counter of system calls that may
// pass a descriptor to another process.
//
// A lookup finds the accepted connection's peer socket by an exact
// sock_diag query (inode and cookie) and its record by cookie, both O(1).
// The recorded connector is trusted alone (the fast path) only when the
// backend can show it is the holder the exhaustive check would find: no
// descriptor has been passed in the sandbox since the socket connected
// (so only the connector and its descendants can hold it), the connector
// still runs the executable it connected with (same dev+inode) and still
// holds the socket (one fd table read). What is read about an image
// (the executable's path and hash, an ancestor's path) is cached by
// tgid, start time and the image's exec_seq from the process-tree map,
// so a repeat connection from the same image reads /proc once (the fd
// link); an exec, even of the same file under another name, is a new
// image. Otherwise the /proc backend's
// exhaustive check names the holder, and a recorded connector that
// differs from it is reported as Identity.Connector. Ancestors come from
// the process-tree map, not a /proc walk. A socket without a record
// (evicted from the LRU map by a flood, or connected before the programs
// were attached) is ErrIncomplete: its holder alone never decides. Code
// identity (Identity.Code) comes from the marks the mapping tracepoints
// leave in the process tree (or /proc/<pid>/maps without them).
type BPFBackend struct {
	proc *ProcBackend
	objs attrObjects
	// skipped names the optional programs this kernel refused, and why.
	skipped map[string]error
	// codeHooks is the hook set attached for code identity ("": none,
	// codeHooksErr says why).
	codeHooks    string
	codeHooksErr error
	// guard is the send guard (guard.on false: guardErr says why).
	guard    sendGuard
	guardErr error
	links    []link.Link
	closed   atomic.Bool
	loaded   bool

	images imageCache
	// lookupCtx pools the lookup program's context (about 1 KiB).
	lookupCtx sync.Pool

	fast, exhaustive, unrecorded, handedOff, imageHits, byTupleHits, tupleMismatch, lookupRunErrors atomic.Uint64
	guardViolations                                                                                 atomic.Uint64
}

var _ Backend = (*BPFBackend)(nil)

// Map sizes of bpf/attr.c (LRU maps: the oldest entries go first).
const (
	BPFMaxConns = 65536
	BPFMaxProcs = 32768
	// BPFMaxTuples bounds the 4-tuple index of connecting sockets.
	BPFMaxTuples = 65536
)

// NewBPFBackend loads the programs, attaches them to the sandbox's
// cgroup and the tracepoints, and seeds the process tree with the
// cgroup's current processes. Errors name what failed to load or attach;
// callers that may fall back to NewProcBackend do so on any error.
func NewBPFBackend(cfg BPFConfig) (_ *BPFBackend, err error) {
	if cfg.CgroupPath == "" {
		return nil, errors.New("attribution: BPFConfig.CgroupPath: required")
	}
	proc, err := NewProcBackend(cfg.Proc)
	if err != nil {
		return nil, err
	}
	b := &BPFBackend{proc: proc}
	b.lookupCtx.New = func() any { return new(palisadebpf.AttrLookupCtx) }
	defer func() {
		if err != nil {
			b.Close() // what was loaded and attached so far
		}
	}()
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("attribution: bpf: memlock limit: %w", err)
	}
	spec, err := palisadebpf.LoadAttr()
	if err != nil {
		return nil, fmt.Errorf("attribution: bpf: %w", err)
	}
	if err := sizeMaps(spec, cfg); err != nil {
		return nil, err
	}
	if b.skipped, err = loadAttrObjects(spec, &b.objs); err != nil {
		return nil, err
	}
	b.loaded = true
	cg, err := os.Open(cfg.CgroupPath)
	if err != nil {
		return nil, fmt.Errorf("attribution: bpf: sandbox cgroup: %w", err)
	}
	err = b.objs.SandboxCgroup.Put(uint32(0), uint32(cg.Fd()))
	cg.Close()
	if err != nil {
		return nil, fmt.Errorf("attribution: bpf: sandbox cgroup map: %w", err)
	}
	if err := ensureTracefs(); err != nil {
		return nil, err
	}
	// The tree first, so no process forked after the seed is missed.
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"sched_process_fork", b.objs.ProcFork}, {"sched_process_exec", b.objs.ProcExec}, {"sched_process_exit", b.objs.ProcExit}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp.name, Program: tp.prog})
		if err != nil {
			return nil, fmt.Errorf("attribution: bpf: raw tracepoint %s: %w", tp.name, err)
		}
		b.links = append(b.links, l)
	}
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"sys_enter_sendmsg", b.objs.PassSendmsg}, {"sys_enter_sendmmsg", b.objs.PassSendmmsg},
		{"sys_enter_pidfd_getfd", b.objs.PassPidfdGetfd}, {"sys_enter_connect", b.objs.ConnectFd}} {
		l, err := link.Tracepoint("syscalls", tp.name, tp.prog, nil)
		if err != nil {
			return nil, fmt.Errorf("attribution: bpf: tracepoint syscalls/%s: %w", tp.name, err)
		}
		b.links = append(b.links, l)
	}
	// Before the seed: a mapping made after it is seen by the hooks, one
	// made before by the seed's /proc reading.
	if err := b.attachCodeHooks(cfg); err != nil {
		return nil, err
	}
	// Before sock_ops, which puts established sockets under it.
	if err := b.attachGuard(cfg.NoSendGuard); err != nil {
		return nil, err
	}
	for _, at := range []struct {
		what string
		typ  ebpf.AttachType
		prog *ebpf.Program
	}{{"connect4", ebpf.AttachCGroupInet4Connect, b.objs.Connect4}, {"connect6", ebpf.AttachCGroupInet6Connect, b.objs.Connect6}, {"sock_ops", ebpf.AttachCGroupSockOps, b.objs.SockOps}} {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cfg.CgroupPath, Attach: at.typ, Program: at.prog})
		if err != nil {
			return nil, fmt.Errorf("attribution: bpf: attach %s to %s: %w", at.what, cfg.CgroupPath, err)
		}
		b.links = append(b.links, l)
	}
	if err := b.seed(); err != nil {
		return nil, err
	}
	return b, nil
}

// sizeMaps applies the configured map sizes to spec: the maps are this
// sandbox's alone, so their size is chosen per sandbox.
func sizeMaps(spec *ebpf.CollectionSpec, cfg BPFConfig) error {
	for _, sz := range []struct {
		field string
		n     int
		maps  []string
	}{
		{"MaxConns", cfg.MaxConns, []string{"conns", "tuples", "guarded", "decided"}},
		{"MaxProcs", cfg.MaxProcs, []string{"procs"}},
	} {
		if sz.n < 0 || sz.n > 1<<24 {
			return fmt.Errorf("attribution: BPFConfig.%s %d: want 0 (default) to %d", sz.field, sz.n, 1<<24)
		}
		if sz.n == 0 {
			continue
		}
		for _, name := range sz.maps {
			m := spec.Maps[name]
			if m == nil {
				return fmt.Errorf("attribution: bpf: no map %q", name)
			}
			m.MaxEntries = uint32(sz.n)
		}
	}
	return nil
}

// ensureTracefs mounts tracefs at /sys/kernel/tracing when no tracefs is
// reachable: attaching a tracepoint reads its id there.
func ensureTracefs() error {
	for _, d := range []string{"/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"} {
		if _, err := os.Stat(d); err == nil {
			return nil
		}
	}
	if err := unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("attribution: bpf: tracefs is not mounted and mounting it at /sys/kernel/tracing failed: %w", err)
	}
	return nil
}

// seed adds the sandbox's current processes to the process tree (those
// that forked before the tracepoints were attached): from their tasks
// through the seed program, or, on a kernel that refused it, from /proc
// without start times (no ancestor chain then passes through them).
func (b *BPFBackend) seed() error {
	pids, err := b.proc.cfg.Procs()
	if err != nil {
		return fmt.Errorf("attribution: bpf: sandbox processes: %w", err)
	}
	if b.objs.Seed != nil {
		for _, pid := range pids {
			sc := palisadebpf.AttrSeedCtx{Pid: uint32(pid)}
			// What it mapped before the hooks existed is read from /proc.
			if b.codeHooks != "" {
				if fc, err := b.proc.code.check(pid); err == nil && fc != nil {
					for _, r := range fc.Reasons {
						sc.Code |= codeBit(r)
					}
					sc.CodeDev, sc.CodeIno = kernelDev(fc.dev), fc.ino
				}
			}
			if err := progRunCtx(b.objs.Seed.FD(), unsafe.Pointer(&sc), uint32(unsafe.Sizeof(sc))); err != nil {
				return fmt.Errorf("attribution: bpf: seed process %d: %w", pid, err)
			}
		}
		return nil
	}
	for _, pid := range pids {
		ppid, err := b.proc.parentPID(pid)
		if err != nil {
			continue // exited
		}
		var st unix.Stat_t
		if err := unix.Stat(b.procPath(pid, "exe"), &st); err != nil {
			continue
		}
		info := palisadebpf.AttrProcInfo{Tgid: uint32(pid), Ppid: uint32(ppid), ExeIno: st.Ino, ExeDev: kernelDev(st.Dev)}
		// A fresher entry from the tracepoints wins.
		if err := b.objs.Procs.Update(uint32(pid), &info, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("attribution: bpf: seed process %d: %w", pid, err)
		}
	}
	return nil
}

// kernelDev converts a stat(2) device number to the kernel's internal
// dev_t (major << 20 | minor), as super_block.s_dev holds it.
func kernelDev(dev uint64) uint32 {
	return unix.Major(dev)<<20 | unix.Minor(dev)
}

func (b *BPFBackend) procPath(pid int, name string) string {
	return b.proc.cfg.ProcRoot + "/" + strconv.Itoa(pid) + "/" + name
}

// Prepare opens the sock_diag socket before capabilities are dropped
// (see ProcBackend.Prepare).
func (b *BPFBackend) Prepare() error { return b.proc.Prepare() }

// Close detaches the programs and frees the maps.
func (b *BPFBackend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	for _, l := range b.links {
		l.Close()
	}
	b.closeGuard()
	if b.loaded {
		b.objs.close()
	}
	return b.proc.Close()
}

// Counters returns the backend's counters: how lookups were answered
// (fast: the recorded connector; exhaustive: the /proc search;
// unrecorded: no record for the socket, refused; handed_off: holder and recorded
// connector differ; image_cached: fast-path answers whose executable was
// named from the image cache; by_tuple: sockets found by 4-tuple, without
// a sock_diag query; tuple_mismatch: exhaustive searches where sock_diag
// named another socket than the record did), and the /proc backend's own.
func (b *BPFBackend) Counters() map[string]uint64 {
	c := b.proc.Counters()
	c["bpf_fast"] = b.fast.Load()
	c["bpf_exhaustive"] = b.exhaustive.Load()
	c["bpf_unrecorded"] = b.unrecorded.Load()
	c["bpf_handed_off"] = b.handedOff.Load()
	c["bpf_image_cached"] = b.imageHits.Load()
	c["bpf_by_tuple"] = b.byTupleHits.Load()
	c["bpf_lookup_run_errors"] = b.lookupRunErrors.Load()
	c["bpf_tuple_mismatch"] = b.tupleMismatch.Load()
	c["bpf_guard_violations"] = b.guardViolations.Load()
	return c
}

// Lookup implements Backend.
func (b *BPFBackend) Lookup(ctx context.Context, client, proxy netip.AddrPort) (*Identity, error) {
	c, p, err := checkTuple(client, proxy)
	if err != nil {
		return nil, err
	}
	b.proc.lookups.Add(1)
	var rec palisadebpf.AttrConnInfo
	inode, cookie, recorded, pre := b.byTupleRun(c, p, &rec)
	if pre != nil {
		defer b.lookupCtx.Put((*palisadebpf.AttrLookupCtx)(pre))
	}
	fromTuple := recorded
	if !recorded {
		inode, cookie, err = b.proc.socketID(c, p)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				b.proc.notFound.Add(1)
			}
			return nil, err
		}
		recorded = cookie != 0 && b.objs.Conns.Lookup(cookie, &rec) == nil
	}
	if !recorded {
		return nil, b.incomplete(ctx, client, proxy, inode)
	}
	if id := b.fastPath(ctx, &rec, inode, pre); id != nil {
		id.cookie = cookie
		b.fast.Add(1)
		return id, nil
	}
	b.exhaustive.Add(1)
	if fromTuple {
		// The search names whichever process holds the inode, so it must
		// be this connection's socket: the connect hook's reading is
		// checked against sock_diag before anyone is named by it.
		di, dc, err := b.proc.socketID(c, p)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				b.proc.notFound.Add(1)
			}
			return nil, err
		}
		if di != inode || dc != cookie {
			b.tupleMismatch.Add(1)
			inode = di
			if dc == 0 || b.objs.Conns.Lookup(dc, &rec) != nil {
				return nil, b.incomplete(ctx, client, proxy, inode)
			}
			cookie = dc
		}
	}
	id, err := b.proc.holderOf(ctx, client, proxy, inode)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			b.proc.notFound.Add(1)
		}
		return nil, err
	}
	id.Backend = BackendBPF
	id.cookie = cookie
	var holder palisadebpf.AttrProcInfo
	if b.objs.Procs.Lookup(uint32(id.PID), &holder) == nil {
		id.start = holder.StartTime
	}
	// The holder's parents as the process tree recorded them at fork
	// (the /proc walk names a live parent, which may be the sandbox init
	// or a subreaper that adopted an orphan).
	id.Ancestors = b.ancestors(id.PID, nil, nil)
	if id.Code, err = b.codeOf(id.PID, nil); err != nil {
		return nil, err
	}
	tgid := int(rec.Proc.Tgid)
	if tgid != id.PID || !b.sameExe(tgid, &rec.Proc) {
		b.handedOff.Add(1)
		id.Connector = &Process{PID: tgid, Exe: b.exeOf(tgid, &rec.Proc)}
	}
	return id, nil
}

// incomplete counts and reports a socket without a connect record, an
// *IncompleteError naming the holder the exhaustive search finds (for
// the refusal's record; it is never decided on).
func (b *BPFBackend) incomplete(ctx context.Context, client, proxy netip.AddrPort, inode uint64) error {
	b.unrecorded.Add(1)
	ie := &IncompleteError{Inode: inode}
	if id, err := b.proc.holderOf(ctx, client, proxy, inode); err == nil {
		id.Backend = BackendBPF
		ie.Holder = id
	}
	return ie
}

// prefetch is the lookup program's context after a run that found the
// record: what bpf/attr.c read in the same call, namely the pass
// counter, the connector's process-tree entry (Self, when selfOK) and
// its ancestors' entries, parent first, as far as the program followed
// the chain (anc). It is pooled: valid until Lookup returns.
type prefetch palisadebpf.AttrLookupCtx

func (p *prefetch) selfOK() bool { return p.Found&lookupSelf != 0 }

func (p *prefetch) anc() []palisadebpf.AttrProcInfo {
	return p.Anc[:min(int(p.N_anc), lookupAncestors)]
}

// lookupAncestors is how many ancestors the lookup program reads.
const lookupAncestors = len(palisadebpf.AttrLookupCtx{}.Anc)

// bpf/attr.c's lookup_ctx.found bits.
const (
	lookupConn = 1
	lookupSelf = 2
)

// byTupleRun is byTuple in one BPF_PROG_RUN of the lookup program, which
// also reads what the fast path needs next (prefetch) instead of four
// more map lookups. When the program cannot run it falls back to
// byTuple (pre nil). A record without the socket's inode is not one.
// The caller returns pre to b.lookupCtx when done with it.
func (b *BPFBackend) byTupleRun(client, proxy netip.AddrPort, rec *palisadebpf.AttrConnInfo) (inode, cookie uint64, ok bool, pre *prefetch) {
	if b.objs.Lookup == nil {
		inode, cookie, ok = b.byTuple(client, proxy, rec)
		return inode, cookie, ok, nil
	}
	lk := b.lookupCtx.Get().(*palisadebpf.AttrLookupCtx)
	*lk = palisadebpf.AttrLookupCtx{Key: tupleKey(client, proxy)}
	// BPF_PROG_TEST_RUN straight on the struct's memory: through
	// cilium/ebpf's Program.Run the context is copied into fresh slices
	// in and out (1 KiB each way, allocated per call), which in the
	// proxy cost more than the six map reads this replaces.
	if err := progRunCtx(b.objs.Lookup.FD(), unsafe.Pointer(lk), uint32(unsafe.Sizeof(*lk))); err != nil {
		b.lookupCtx.Put(lk)
		b.lookupRunErrors.Add(1)
		inode, cookie, ok = b.byTuple(client, proxy, rec)
		return inode, cookie, ok, nil
	}
	if lk.Found&lookupConn == 0 || lk.Conn.SockIno == 0 {
		b.lookupCtx.Put(lk)
		return 0, 0, false, nil
	}
	*rec = lk.Conn
	b.byTupleHits.Add(1)
	return rec.SockIno, lk.Cookie, true, (*prefetch)(lk)
}

// progRunAttr is the part of the kernel's union bpf_attr that
// BPF_PROG_TEST_RUN reads (struct { ... } test in
// include/uapi/linux/bpf.h), through batch_size.
type progRunAttr struct {
	progFD      uint32
	retval      uint32
	dataSizeIn  uint32
	dataSizeOut uint32
	dataIn      uint64
	dataOut     uint64
	repeat      uint32
	duration    uint32
	ctxSizeIn   uint32
	ctxSizeOut  uint32
	ctxIn       uint64
	ctxOut      uint64
	flags       uint32
	cpu         uint32
	batchSize   uint32
	_           uint32
}

// progRunCtx runs the syscall program fd once with ctx (size bytes) as
// its context; the kernel copies the context back to ctx_in (a syscall
// program takes no ctx_out). BenchmarkLookupProgramRun: 1.3 µs and no
// allocation per run, against 2.9 µs and 3 KiB in 4 allocations through
// cilium/ebpf's Program.Run on the same context (2.2x).
func progRunCtx(fd int, ctx unsafe.Pointer, size uint32) error {
	attr := progRunAttr{progFD: uint32(fd), ctxSizeIn: size, ctxIn: uint64(uintptr(ctx))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(ctx)
	if errno != 0 {
		return fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
	}
	return nil
}

// tupleKey is the tuples map's key of the sandbox socket client -> proxy.
func tupleKey(client, proxy netip.AddrPort) palisadebpf.AttrTuple {
	key := palisadebpf.AttrTuple{LocalPort: client.Port(), RemotePort: proxy.Port()}
	l, r := client.Addr().As16(), proxy.Addr().As16()
	for i := range 4 {
		key.Local[i] = binary.NativeEndian.Uint32(l[4*i:])
		key.Remote[i] = binary.NativeEndian.Uint32(r[4*i:])
	}
	return key
}

// byTuple finds the record of the sandbox socket client -> proxy by its
// 4-tuple (the tuples map sock_ops fills) and returns the socket's inode
// and cookie as the connect hook read them; ok is false when either map
// has no entry or the inode was not read, and the caller asks sock_diag.
// A tuple names at most one live socket of the sandbox's namespace, and
// its entry goes when that socket reaches TCP_CLOSE. The fast path may
// trust the inode (the recorded connector must hold it); the exhaustive
// search checks it against sock_diag first.
func (b *BPFBackend) byTuple(client, proxy netip.AddrPort, rec *palisadebpf.AttrConnInfo) (inode, cookie uint64, ok bool) {
	key := tupleKey(client, proxy)
	if b.objs.Tuples.Lookup(&key, &cookie) != nil || b.objs.Conns.Lookup(cookie, rec) != nil || rec.SockIno == 0 {
		return 0, 0, false
	}
	b.byTupleHits.Add(1)
	return rec.SockIno, cookie, true
}

// fastPath returns the recorded connector's identity when it provably
// is the socket's topmost holder, else nil. When the connector's
// process-tree entry shows it still runs the image it connected with
// (image), what is read about that image — the executable's name and
// hash, ancestors' names — comes from the image cache, so a repeat
// connection costs map lookups and one fd readlink; the entry is read
// again after the holder check, and an exec in between (a new exec_seq)
// falls back. Otherwise the executable is stat'ed and read, and the
// descriptor is read again at the end (not closed and its number reused
// meanwhile).
func (b *BPFBackend) fastPath(ctx context.Context, rec *palisadebpf.AttrConnInfo, inode uint64, pre *prefetch) *Identity {
	var passes uint64
	if pre != nil {
		passes = pre.Passes
	} else if err := b.objs.Passes.Lookup(uint32(0), &passes); err != nil {
		return nil
	}
	if passes != rec.Passes {
		return nil // a descriptor may have been passed since the connect
	}
	tgid := int(rec.Proc.Tgid)
	var cur palisadebpf.AttrProcInfo
	var cacheable bool
	if pre != nil {
		cur, cacheable = pre.Self, pre.selfOK() && imageOf(&pre.Self, &rec.Proc)
	} else {
		cur, cacheable = b.image(tgid, &rec.Proc)
	}
	if !cacheable && !b.sameExe(tgid, &rec.Proc) {
		return nil // exec'd (or exited, or the pid was reused)
	}
	want := socketLink(inode)
	fd := b.holdingFD(tgid, rec, want)
	if fd < 0 {
		return nil // handed to a descendant and closed here
	}
	var key imageKey
	var img imageInfo
	var cached bool
	var self *palisadebpf.AttrProcInfo
	if cacheable {
		key, self = imageKeyOf(&cur), &cur
		img, cached = b.images.get(key)
		cached = cached && img.sum != "" // named before only as an ancestor
	}
	if !cached {
		var err error
		if img.exe, err = os.Readlink(b.procPath(tgid, "exe")); err != nil {
			return nil
		}
		if img.sum, err = b.proc.hashes.Sum(ctx, b.procPath(tgid, "exe")); err != nil || !b.sameExe(tgid, &rec.Proc) {
			return nil
		}
	}
	var chain []palisadebpf.AttrProcInfo
	if pre != nil && self != nil {
		chain = pre.anc()
	}
	ancestors := b.ancestors(tgid, self, chain)
	if testHookNamed != nil {
		testHookNamed(tgid)
	}
	// The entry read last says whether the image has mapped foreign
	// code (as late as possible: a mark made meanwhile counts).
	var again palisadebpf.AttrProcInfo
	if cacheable {
		if err := b.objs.Procs.Lookup(uint32(tgid), &again); err != nil || imageKeyOf(&again) != key {
			return nil // exec'd or exited while being named
		}
		if cached {
			b.imageHits.Add(1)
		} else {
			b.images.put(key, img)
		}
	} else if link, err := os.Readlink(b.procPath(tgid, "fd/"+strconv.Itoa(fd))); err != nil || link != string(want) {
		return nil
	}
	id := &Identity{PID: tgid, Exe: img.exe, SHA256: img.sum, Backend: BackendBPFFast, Ancestors: ancestors, start: cur.StartTime}
	var entry *palisadebpf.AttrProcInfo
	if cacheable {
		entry = &again
	}
	var err error
	if id.Code, err = b.codeOf(tgid, entry); err != nil {
		return nil
	}
	return id
}

// codeOf says whether process tgid has lost its binary's identity (nil:
// it has not). With the code hooks attached, from the process-tree
// entry (entry, when the caller just read it, else read now; a process
// without one is CodeUnknown); without them, from /proc/<pid>/maps.
func (b *BPFBackend) codeOf(tgid int, entry *palisadebpf.AttrProcInfo) (*ForeignCode, error) {
	if b.codeHooks == "" {
		return b.proc.code.check(tgid)
	}
	var e palisadebpf.AttrProcInfo
	if entry == nil {
		if err := b.objs.Procs.Lookup(uint32(tgid), &e); err != nil {
			return &ForeignCode{Reasons: []string{CodeUnknown}}, nil
		}
		entry = &e
	}
	if entry.Code == 0 {
		return nil, nil
	}
	fc := &ForeignCode{Reasons: codeReasons(entry.Code)}
	if entry.CodeIno != 0 {
		fc.File = nameMapped(b.proc.cfg.ProcRoot, tgid, entry.CodeDev, entry.CodeIno)
	}
	return fc, nil
}

// testHookNamed, when set by a test, runs in fastPath after the
// connector was named and before the end's re-check: where an exec or an
// fd swap would race with the lookup.
var testHookNamed func(tgid int)

// image returns the process-tree entry of tgid when it is the process
// that connected (same start time) running the image it connected with
// (same executable dev+inode) and that image's exec_seq is cacheable.
func (b *BPFBackend) image(tgid int, connected *palisadebpf.AttrProcInfo) (palisadebpf.AttrProcInfo, bool) {
	var cur palisadebpf.AttrProcInfo
	if err := b.objs.Procs.Lookup(uint32(tgid), &cur); err != nil {
		return cur, false
	}
	return cur, imageOf(&cur, connected)
}

// imageOf reports whether the process-tree entry cur is the process that
// connected (same start time) running the image it connected with (same
// executable dev+inode), with a cacheable exec_seq.
func imageOf(cur, connected *palisadebpf.AttrProcInfo) bool {
	return cur.StartTime != 0 && cur.StartTime == connected.StartTime && cur.ExecSeq != execSeqUnknown &&
		cur.ExeIno == connected.ExeIno && cur.ExeDev == connected.ExeDev
}

// holdingFD returns a descriptor of pid that is the socket (want), or -1:
// the one it connected with when that still is (one readlink), else the
// first found by reading its fd table.
func (b *BPFBackend) holdingFD(pid int, rec *palisadebpf.AttrConnInfo, want []byte) int {
	if rec.FdPlus1 > 0 {
		fd := int(rec.FdPlus1 - 1)
		if link, err := os.Readlink(b.procPath(pid, "fd/"+strconv.Itoa(fd))); err == nil && link == string(want) {
			return fd
		}
	}
	s := scanners.Get().(*scanner)
	held := s.scanPid(b.proc.cfg.ProcRoot, pid, want, nil)
	scanners.Put(s)
	if len(held) == 0 {
		return -1
	}
	return held[0].fd
}

// sameExe reports whether pid runs the executable p recorded.
func (b *BPFBackend) sameExe(pid int, p *palisadebpf.AttrProcInfo) bool {
	var st unix.Stat_t
	if err := unix.Stat(b.procPath(pid, "exe"), &st); err != nil {
		return false
	}
	return st.Ino == p.ExeIno && kernelDev(st.Dev) == p.ExeDev
}

// exeOf names the executable recorded in p if pid still runs it, else "".
func (b *BPFBackend) exeOf(pid int, p *palisadebpf.AttrProcInfo) string {
	if !b.sameExe(pid, p) {
		return ""
	}
	exe, err := os.Readlink(b.procPath(pid, "exe"))
	if err != nil || !b.sameExe(pid, p) {
		return ""
	}
	return exe
}

// ancestors walks the process-tree map from pid's parent up, nearest
// first, stopping before the sandbox init, at a process the map does
// not know (outside the sandbox), at a parent whose entry no longer has
// the start time recorded at fork (it exited; its pid may be another
// process's now) and at MaxAncestors. self is pid's
// entry when the caller has it, and chain the entries the lookup
// program read from it up (parent first): they stand in for map lookups,
// and when there are fewer than lookupAncestors the program found no
// entry after the last. An ancestor's name comes from the image cache
// when its entry is cacheable, else from /proc (and is cached).
func (b *BPFBackend) ancestors(pid int, self *palisadebpf.AttrProcInfo, chain []palisadebpf.AttrProcInfo) []Process {
	var out []Process
	var info palisadebpf.AttrProcInfo
	if self != nil {
		info = *self
	} else if err := b.objs.Procs.Lookup(uint32(pid), &info); err != nil {
		return nil
	}
	for len(out) < MaxAncestors {
		ppid := info.Ppid
		if ppid == 0 || int(ppid) == b.proc.cfg.InitPID || ppid == uint32(pid) || info.Pstart == 0 {
			break
		}
		var pinfo palisadebpf.AttrProcInfo
		switch i := len(out); {
		case i < len(chain) && chain[i].Tgid == ppid:
			pinfo = chain[i]
		case chain != nil && i >= len(chain) && len(chain) < lookupAncestors:
			return out // the program found no entry for ppid: not a sandbox process
		default:
			if err := b.objs.Procs.Lookup(ppid, &pinfo); err != nil {
				return out // not a sandbox process
			}
		}
		// The parent recorded at fork, or nobody: an exited parent's pid
		// reused by another process has another start time.
		if pinfo.StartTime != info.Pstart {
			return out
		}
		cacheable := pinfo.ExecSeq != execSeqUnknown
		img, ok := b.images.get(imageKeyOf(&pinfo))
		if !ok || !cacheable {
			exe, err := os.Readlink(b.procPath(int(ppid), "exe"))
			if err != nil || !b.stillImage(&pinfo) {
				break // exited or exec'd: the chain above it is no longer knowable
			}
			img = imageInfo{exe: exe}
			if cacheable {
				b.images.put(imageKeyOf(&pinfo), img)
			}
		}
		p := Process{PID: int(ppid), Exe: img.exe}
		if code, err := b.codeOf(int(ppid), &pinfo); err != nil {
			p.Code = &ForeignCode{Reasons: []string{CodeUnknown}}
		} else {
			p.Code = code
		}
		out = append(out, p)
		info = pinfo
	}
	return out
}

// stillImage reports whether the process-tree entry of p's tgid is
// still p's image (same start time and exec_seq): what was just read
// from /proc/<tgid> was that image's, not a reused pid's.
func (b *BPFBackend) stillImage(p *palisadebpf.AttrProcInfo) bool {
	var now palisadebpf.AttrProcInfo
	return b.objs.Procs.Lookup(p.Tgid, &now) == nil && now.StartTime == p.StartTime && now.ExecSeq == p.ExecSeq
}

// execSeqUnknown is bpf/attr.c's EXEC_SEQ_UNKNOWN: an image not to cache.
const execSeqUnknown = 0xffffffff

// imageKey names one image of one process: an exec starts a new one
// (bpf/attr.c numbers them), a reused pid has another start time.
type imageKey struct {
	tgid    uint32
	execSeq uint32
	start   uint64
}

func imageKeyOf(p *palisadebpf.AttrProcInfo) imageKey {
	return imageKey{tgid: p.Tgid, execSeq: p.ExecSeq, start: p.StartTime}
}

// imageInfo is what was read once about an image: the executable's
// path (/proc/PID/exe when first asked) and its sha256 ("" when it was
// named only as an ancestor).
type imageInfo struct{ exe, sum string }

// maxImages bounds the image cache; when full it is emptied (entries of
// exited processes are never asked for again, and refilling costs one
// /proc read per live image).
const maxImages = 4096

// imageCache maps process images to what was read about them.
type imageCache struct {
	mu sync.Mutex
	m  map[imageKey]imageInfo
}

func (c *imageCache) get(k imageKey) (imageInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *imageCache) put(k imageKey, v imageInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxImages {
		c.m = make(map[imageKey]imageInfo)
	}
	c.m[k] = v
}
