//go:build linux

package attribution

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ProcConfig configures the /proc backend for one sandbox.
type ProcConfig struct {
	// NetnsPID returns the host pid of a process in the sandbox's network
	// namespace, such as the sandbox init. Required.
	NetnsPID func() int
	// Procs returns the host pids of the sandbox's processes, such as
	// (*cgroup.Group).Procs. Only these are searched. Required.
	Procs func() ([]int, error)
	// InitPID is the host pid of the sandbox's PID 1. Ancestor chains stop
	// before it. 0: chains stop only at processes outside Procs.
	InitPID int
	// ProcRoot is where procfs is mounted; "" means /proc.
	ProcRoot string
	// Hashes caches executable hashes; nil gets a private cache with the
	// defaults. Backends of several sandboxes may share one.
	Hashes *HashCache
	// Workers bounds how many goroutines search fd tables in parallel for
	// one lookup; 0 means GOMAXPROCS (at most 8).
	Workers int
	// Writable lists the paths the sandbox may write (its workdir and
	// read_write paths, as the host names them). A process that maps
	// executable code from under one of them (or from a writable tmpfs,
	// a memfd, a deleted or world-writable file) loses its binary's
	// identity (Identity.Code). Paths that do not exist are skipped.
	Writable []string
	// NoSockDiag skips the sock_diag fast path and always reads
	// /proc/<pid>/net/tcp{,6}. Without it the backend asks the kernel for
	// the exact 4-tuple over a NETLINK_SOCK_DIAG socket it creates in the
	// sandbox's network namespace (setns needs CAP_SYS_ADMIN), and reads
	// the /proc tables only when that is refused or finds nothing.
	NoSockDiag bool
}

// ProcBackend attributes connections by reading /proc: the sandbox
// network namespace's TCP tables for the socket's inode, then the fd
// tables of the sandbox's processes for its holder.
type ProcBackend struct {
	cfg    ProcConfig
	hashes *HashCache
	order  binary.ByteOrder
	diag   *sockDiag
	code   *codeChecker
	// kernelCode is set by an eBPF backend whose hooks mark foreign
	// code: resolve then leaves Identity.Code to it.
	kernelCode bool

	lookups    atomic.Uint64
	notFound   atomic.Uint64
	scanned    atomic.Uint64
	diagHits   atomic.Uint64
	procTables atomic.Uint64
}

var _ Backend = (*ProcBackend)(nil)

// ProcStats counts a ProcBackend's work.
type ProcStats struct {
	Lookups  uint64 `json:"lookups"`
	NotFound uint64 `json:"not_found"`
	// Scanned counts processes whose fd tables were searched.
	Scanned uint64 `json:"processes_scanned"`
	// SockDiag counts sockets found through sock_diag, ProcTables reads
	// of /proc/<pid>/net/tcp{,6} tables.
	SockDiag   uint64    `json:"sock_diag"`
	ProcTables uint64    `json:"proc_tables"`
	Hashes     HashStats `json:"hashes"`
}

// NewProcBackend returns a /proc backend. Errors name the missing field.
func NewProcBackend(cfg ProcConfig) (*ProcBackend, error) {
	if cfg.NetnsPID == nil {
		return nil, errors.New("attribution: ProcConfig.NetnsPID: required")
	}
	if cfg.Procs == nil {
		return nil, errors.New("attribution: ProcConfig.Procs: required")
	}
	if cfg.InitPID < 0 {
		return nil, fmt.Errorf("attribution: ProcConfig.InitPID %d: must not be negative", cfg.InitPID)
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("attribution: ProcConfig.Workers %d: must not be negative", cfg.Workers)
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Workers == 0 {
		cfg.Workers = min(runtime.GOMAXPROCS(0), 8)
	}
	roots, err := resolveWritable(cfg.Writable)
	if err != nil {
		return nil, err
	}
	b := &ProcBackend{cfg: cfg, hashes: cfg.Hashes, order: binary.NativeEndian, diag: newSockDiag(),
		code: newCodeChecker(cfg.ProcRoot, roots)}
	if b.hashes == nil {
		b.hashes, _ = NewHashCache(0, 0)
	}
	return b, nil
}

// Stats returns the backend's counters.
func (b *ProcBackend) Stats() ProcStats {
	return ProcStats{
		Lookups:    b.lookups.Load(),
		NotFound:   b.notFound.Load(),
		Scanned:    b.scanned.Load(),
		SockDiag:   b.diagHits.Load(),
		ProcTables: b.procTables.Load(),
		Hashes:     b.hashes.Stats(),
	}
}

// Prepare opens the sock_diag socket in the sandbox's network namespace
// now. Call it before the process gives up CAP_SYS_ADMIN (as the egress
// proxy does after binding its listeners): the socket is kept, so exact
// lookups keep working afterwards instead of falling back to reading
// /proc/<pid>/net/tcp{,6} on every connection. An error (no such
// namespace, setns refused) leaves the backend working through the /proc
// tables; it names the namespace.
func (b *ProcBackend) Prepare() error {
	if b.cfg.NoSockDiag {
		return nil
	}
	pid := b.cfg.NetnsPID()
	if pid <= 0 {
		return fmt.Errorf("attribution: sock_diag: sandbox network namespace has no process (netns pid %d)", pid)
	}
	if err := b.diag.open(diagNsPath(b.cfg.ProcRoot, pid)); err != nil {
		return fmt.Errorf("attribution: sock_diag socket in %s: %w", diagNsPath(b.cfg.ProcRoot, pid), err)
	}
	return nil
}

// Counters returns Stats as flat counters, for the proxy's /status and
// /metrics: sock_diag and proc_tables say how sockets were found.
func (b *ProcBackend) Counters() map[string]uint64 {
	s := b.Stats()
	return map[string]uint64{
		"lookups":           s.Lookups,
		"not_found":         s.NotFound,
		"processes_scanned": s.Scanned,
		"sock_diag":         s.SockDiag,
		"proc_tables":       s.ProcTables,
	}
}

// Close releases the sock_diag socket. The backend stays usable (it
// reopens the socket when needed).
func (b *ProcBackend) Close() error {
	b.diag.close()
	return nil
}

// Lookup implements Backend.
func (b *ProcBackend) Lookup(ctx context.Context, client, proxy netip.AddrPort) (*Identity, error) {
	b.lookups.Add(1)
	id, err := b.lookup(ctx, client, proxy)
	if errors.Is(err, ErrNotFound) {
		b.notFound.Add(1)
	}
	return id, err
}

func (b *ProcBackend) lookup(ctx context.Context, client, proxy netip.AddrPort) (*Identity, error) {
	c, p, err := checkTuple(client, proxy)
	if err != nil {
		return nil, err
	}
	inode, _, err := b.socketID(c, p)
	if err != nil {
		return nil, err
	}
	return b.holderOf(ctx, client, proxy, inode)
}

// holderOf is the exhaustive check: the topmost sandbox process holding
// socket inode, found by searching the fd tables of all of them.
func (b *ProcBackend) holderOf(ctx context.Context, client, proxy netip.AddrPort, inode uint64) (*Identity, error) {
	var err error
	want := socketLink(inode)

	// A process that forked after the pid snapshot and whose parent then
	// closed its copy is missed by the first pass, so a miss is retried
	// once with a fresh snapshot.
	var holders []holder
	var pids []int
	for attempt := 0; attempt < 2 && len(holders) == 0; attempt++ {
		if pids, err = b.cfg.Procs(); err != nil {
			return nil, fmt.Errorf("attribution: sandbox processes: %w", err)
		}
		if holders, err = b.scan(ctx, pids, want); err != nil {
			return nil, err
		}
	}
	if len(holders) == 0 {
		return nil, fmt.Errorf("%w: socket %v -> %v (inode %d) is held by none of the sandbox's %d processes",
			ErrNotFound, client, proxy, inode, len(pids))
	}
	top, err := b.topHolder(holders, pids, inode)
	if err != nil {
		return nil, err
	}
	return b.resolve(ctx, top, pids, want)
}

// socketLink is what /proc/<pid>/fd/<n> links to for socket inode.
func socketLink(inode uint64) []byte {
	return []byte("socket:[" + strconv.FormatUint(inode, 10) + "]")
}

// socketID finds the inode of the socket client -> proxy in the sandbox
// namespace, and its cookie when sock_diag found it (0 otherwise): by an
// exact sock_diag query, else from the tcp table (IPv4 clients: then
// tcp6, for sockets of dual-stack programs with IPv4-mapped addresses).
func (b *ProcBackend) socketID(client, proxy netip.AddrPort) (inode, cookie uint64, err error) {
	netnsPID := b.cfg.NetnsPID()
	if netnsPID <= 0 {
		return 0, 0, fmt.Errorf("%w: sandbox network namespace has no process (netns pid %d)", ErrNotFound, netnsPID)
	}
	if !b.cfg.NoSockDiag {
		// A miss or any trouble falls through to the /proc tables, which
		// also see sockets bound to a device (the exact-match lookup asks
		// for unbound ones) and classify what is missing.
		inode, cookie, _, err := b.diag.lookup(diagNsPath(b.cfg.ProcRoot, netnsPID), client, proxy)
		if err == nil && inode != 0 {
			b.diagHits.Add(1)
			return inode, cookie, nil
		}
	}
	b.procTables.Add(1)
	files := []string{"tcp6"}
	if client.Addr().Is4() {
		files = []string{"tcp", "tcp6"}
	}
	bufp := tableBufs.Get().(*[]byte)
	defer tableBufs.Put(bufp)
	seen := false
	for _, name := range files {
		path := b.cfg.ProcRoot + "/" + strconv.Itoa(netnsPID) + "/net/" + name
		table, err := readAll(path, bufp)
		if errors.Is(err, os.ErrNotExist) && name == "tcp6" {
			continue // IPv6 disabled in the kernel
		}
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return 0, 0, fmt.Errorf("%w: sandbox network namespace gone: %v", ErrNotFound, err)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("attribution: read socket table: %w", err)
		}
		inode, found, err := findSocket(table, client, proxy, b.order)
		if err != nil {
			return 0, 0, fmt.Errorf("attribution: parse %s: %w", path, err)
		}
		if inode != 0 {
			return inode, 0, nil
		}
		seen = seen || found
	}
	if seen {
		return 0, 0, fmt.Errorf("%w: socket %v -> %v has no file any more (closed)", ErrNotFound, client, proxy)
	}
	return 0, 0, fmt.Errorf("%w: no socket %v -> %v in the sandbox network namespace (netns pid %d)", ErrNotFound, client, proxy, netnsPID)
}

var tableBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// readAll reads a whole procfs file into *bufp, growing it as needed.
func readAll(path string, bufp *[]byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := (*bufp)[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			*bufp = buf
			return buf, nil
		}
		if err != nil {
			*bufp = buf
			return nil, err
		}
	}
}

// holder is a process with the socket in its fd table.
type holder struct {
	pid, fd int
}

// scanner holds one worker's buffers.
type scanner struct {
	dents []byte
	link  []byte
	path  []byte
}

var scanners = sync.Pool{New: func() any {
	return &scanner{dents: make([]byte, 8<<10), link: make([]byte, 128), path: make([]byte, 0, 64)}
}}

// scan returns every process in pids holding want (socket:[inode]) in its
// fd table, searching all of them so that shared sockets are seen.
func (b *ProcBackend) scan(ctx context.Context, pids []int, want []byte) ([]holder, error) {
	b.scanned.Add(uint64(len(pids)))
	workers := min(b.cfg.Workers, (len(pids)+63)/64)
	if workers <= 1 {
		s := scanners.Get().(*scanner)
		defer scanners.Put(s)
		var out []holder
		for i, pid := range pids {
			if i&63 == 0 && ctx.Err() != nil {
				return nil, fmt.Errorf("attribution: %w", ctx.Err())
			}
			out = s.scanPid(b.cfg.ProcRoot, pid, want, out)
		}
		return out, nil
	}
	var (
		next atomic.Int64
		mu   sync.Mutex
		out  []holder
		wg   sync.WaitGroup
	)
	const chunk = 32
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := scanners.Get().(*scanner)
			defer scanners.Put(s)
			var mine []holder
			for ctx.Err() == nil {
				lo := int(next.Add(chunk)) - chunk
				if lo >= len(pids) {
					break
				}
				for _, pid := range pids[lo:min(lo+chunk, len(pids))] {
					mine = s.scanPid(b.cfg.ProcRoot, pid, want, mine)
				}
			}
			if len(mine) > 0 {
				mu.Lock()
				out = append(out, mine...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("attribution: %w", ctx.Err())
	}
	slices.SortFunc(out, func(a, b holder) int { return a.pid - b.pid })
	return out, nil
}

// scanPid appends pid's fds that link to want. A process that exited or
// whose fds cannot be read holds nothing we can see.
func (s *scanner) scanPid(root string, pid int, want []byte, out []holder) []holder {
	s.path = append(s.path[:0], root...)
	s.path = append(s.path, '/')
	s.path = strconv.AppendInt(s.path, int64(pid), 10)
	s.path = append(s.path, "/fd"...)
	dfd, err := unix.Open(string(s.path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return out
	}
	defer unix.Close(dfd)
	for {
		n, err := unix.Getdents(dfd, s.dents)
		if err != nil || n <= 0 {
			return out
		}
		// procfs fills the buffer until an entry does not fit, so a
		// buffer with room for more (an fd entry is at most 32 bytes)
		// holds the rest of the directory: skip the getdents that would
		// return 0.
		last := n < len(s.dents)-64
		buf := s.dents[:n]
		for len(buf) > 0 {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			if len(buf) < 19 {
				return out
			}
			reclen := int(binary.NativeEndian.Uint16(buf[16:18]))
			if reclen < 19 || reclen > len(buf) {
				return out
			}
			name := buf[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			buf = buf[reclen:]
			if len(name) == 0 || name[0] == '.' {
				continue
			}
			m, err := unix.Readlinkat(dfd, string(name), s.link)
			if err != nil || m != len(want) || !bytes.Equal(s.link[:m], want) {
				continue
			}
			fd, err := strconv.Atoi(string(name))
			if err != nil {
				continue
			}
			out = append(out, holder{pid: pid, fd: fd})
		}
		if last {
			return out
		}
	}
}

// parentPID reads the parent pid from /proc/<pid>/stat.
func (b *ProcBackend) parentPID(pid int) (int, error) {
	st, err := b.stat(pid)
	return st.ppid, err
}

// procStat is what the ancestor walk reads of /proc/<pid>/stat.
type procStat struct {
	ppid  int
	start uint64 // clock ticks since boot
}

// stat reads /proc/<pid>/stat.
func (b *ProcBackend) stat(pid int) (procStat, error) {
	var buf [512]byte
	f, err := os.Open(b.cfg.ProcRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	n, err := io.ReadFull(f, buf[:])
	f.Close()
	if err != nil && err != io.ErrUnexpectedEOF {
		return procStat{}, err
	}
	var st procStat
	if st.ppid, err = parseStatPPid(buf[:n]); err != nil {
		return st, err
	}
	st.start, err = parseStatStart(buf[:n])
	return st, err
}

// chain returns pid's ancestors' pids (ancestry without names).
func (b *ProcBackend) chain(pid int, pids []int) []int {
	var out []int
	for _, a := range b.ancestry(pid, pids, false) {
		out = append(out, a.PID)
	}
	return out
}

// ancestry walks pid's parents, nearest first, at most MaxAncestors,
// stopping before the init and before any process not in pids (the
// sandbox's); with exe, each is named by its /proc/<pid>/exe. Each link
// is one that pid reuse cannot forge (the rule bpf/attr.c keeps with
// fork-time start times, here with what /proc shows): the child's stat
// is read before and after its parent is read, and the link counts only
// when the child still has that parent and its start time then — a
// parent that exited in between would have left the child reparented,
// so what was read was the live parent, not a process that took its pid
// — and the parent did not start after the child. The walk stops at the
// first link that fails.
func (b *ProcBackend) ancestry(pid int, pids []int, exe bool) []Process {
	var out []Process
	cur, err := b.stat(pid)
	if err != nil {
		return nil
	}
	child := pid
	for len(out) < MaxAncestors {
		ppid := cur.ppid
		if ppid <= 0 || ppid == b.cfg.InitPID || ppid == pid || !slices.Contains(pids, ppid) {
			break
		}
		parent, err := b.stat(ppid)
		if err != nil || parent.start > cur.start {
			break
		}
		p := Process{PID: ppid}
		if exe {
			if p.Exe, err = os.Readlink(b.cfg.ProcRoot + "/" + strconv.Itoa(ppid) + "/exe"); err != nil {
				break // exited: the chain above it is no longer knowable
			}
		}
		again, err := b.stat(child)
		if err != nil || again != cur {
			break // reparented (its parent exited) or gone: the reads above may be another process's
		}
		out = append(out, p)
		child, cur = ppid, parent
	}
	return out
}

// topHolder reduces holders to those with no other holder among their
// ancestors. One left: it is the answer (its binary and ancestors are a
// subset of every descendant holder's). More: a *SharedError.
func (b *ProcBackend) topHolder(holders []holder, pids []int, inode uint64) (holder, error) {
	if len(holders) == 1 {
		return holders[0], nil
	}
	byPID := map[int]bool{}
	for _, h := range holders {
		byPID[h.pid] = true
	}
	var tops []holder
	var topPIDs []int
	for _, h := range holders {
		if slices.Contains(topPIDs, h.pid) {
			continue // the same process holding the socket twice (dup)
		}
		desc := false
		for _, a := range b.chain(h.pid, pids) {
			if byPID[a] {
				desc = true
				break
			}
		}
		if !desc {
			tops = append(tops, h)
			topPIDs = append(topPIDs, h.pid)
		}
	}
	switch len(tops) {
	case 0:
		// Every holder descends from another: only possible if the tree
		// changed under us. Refuse rather than guess.
		pids := make([]int, 0, len(byPID))
		for p := range byPID {
			pids = append(pids, p)
		}
		slices.Sort(pids)
		return holder{}, &SharedError{Inode: inode, PIDs: pids}
	case 1:
		return tops[0], nil
	default:
		return holder{}, &SharedError{Inode: inode, PIDs: topPIDs}
	}
}

// resolve builds the Identity of h, checking afterwards that the process
// still holds the socket (so a pid reused meanwhile is not attributed)
// and that its executable did not change during the lookup.
func (b *ProcBackend) resolve(ctx context.Context, h holder, pids []int, want []byte) (*Identity, error) {
	dir := b.cfg.ProcRoot + "/" + strconv.Itoa(h.pid)
	exe, err := os.Readlink(dir + "/exe")
	if err != nil {
		return nil, b.gone(h, "read exe", err)
	}
	sum, err := b.hashes.Sum(ctx, dir+"/exe")
	if err != nil {
		return nil, b.gone(h, "hash exe", err)
	}
	exe2, err := os.Readlink(dir + "/exe")
	if err != nil {
		return nil, b.gone(h, "read exe", err)
	}
	if exe2 != exe {
		return nil, fmt.Errorf("attribution: pid %d executed %s while being attributed (was %s)", h.pid, exe2, exe)
	}
	id := &Identity{PID: h.pid, Exe: exe, SHA256: sum, Backend: BackendProc}
	id.Ancestors = b.ancestry(h.pid, pids, true)
	if !b.kernelCode {
		if id.Code, err = b.code.check(h.pid); err != nil {
			return nil, err
		}
		for i := range id.Ancestors {
			if id.Ancestors[i].Code, err = b.code.check(id.Ancestors[i].PID); err != nil {
				id.Ancestors[i].Code = &ForeignCode{Reasons: []string{CodeUnknown}}
			}
		}
	}
	link, err := os.Readlink(dir + "/fd/" + strconv.Itoa(h.fd))
	if err != nil || link != string(want) {
		return nil, fmt.Errorf("%w: pid %d closed the socket during attribution", ErrNotFound, h.pid)
	}
	return id, nil
}

// gone maps an error about a holder's /proc entries: a process that
// exited is ErrNotFound, anything else is reported as is.
func (b *ProcBackend) gone(h holder, what string, err error) error {
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("%w: pid %d exited during attribution (%s: %v)", ErrNotFound, h.pid, what, err)
	}
	return fmt.Errorf("attribution: pid %d: %s: %w", h.pid, what, err)
}
