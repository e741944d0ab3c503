//go:build linux

package attribution

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeProc is a directory laid out like procfs: <pid>/stat, <pid>/exe
// (a symlink to a real file), <pid>/fd/<n> (symlinks whose targets are
// "socket:[inode]" strings, as in procfs) and <pid>/net/tcp{,6}.
type fakeProc struct {
	t    *testing.T
	root string
	bins string
	// starts overrides a pid's start time (default: the pid).
	starts map[int]int
}

func newFakeProc(t *testing.T) *fakeProc {
	dir := t.TempDir()
	fp := &fakeProc{t: t, root: filepath.Join(dir, "proc"), bins: filepath.Join(dir, "bin")}
	os.MkdirAll(fp.root, 0o755)
	os.MkdirAll(fp.bins, 0o755)
	return fp
}

// bin creates an executable named name and returns its path and sha256.
func (fp *fakeProc) bin(name string) (string, string) {
	p := filepath.Join(fp.bins, name)
	content := "#!/bin/false\n# " + name + "\n"
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		fp.t.Fatal(err)
	}
	return p, hexSum(content)
}

// started is pid's start time in the fake stat: pids are handed out
// in order, so a parent (lower pid) started before its children, unless
// the test says otherwise (starts).
func (fp *fakeProc) started(pid int) int {
	if t, ok := fp.starts[pid]; ok {
		return t
	}
	return pid
}

// restat rewrites pid's stat with its current start time (starts).
func (fp *fakeProc) restat(pid int) {
	path := filepath.Join(fp.root, fmt.Sprint(pid), "stat")
	b, err := os.ReadFile(path)
	must(fp.t, err)
	f := strings.Fields(string(b))
	f[21] = fmt.Sprint(fp.started(pid))
	must(fp.t, os.Chmod(path, 0o644))
	must(fp.t, os.WriteFile(path, []byte(strings.Join(f, " ")+"\n"), 0o444))
}

// proc adds a process with the given parent, executable and sockets
// (inodes, as fds 3, 4, ...; fds 0-2 are a tty).
func (fp *fakeProc) proc(pid, ppid int, exe string, sockets ...uint64) {
	d := filepath.Join(fp.root, fmt.Sprint(pid))
	must(fp.t, os.MkdirAll(filepath.Join(d, "fd"), 0o755))
	must(fp.t, os.WriteFile(filepath.Join(d, "stat"),
		[]byte(fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 %d 1024 1\n", pid, filepath.Base(exe), ppid, pid, pid, fp.started(pid))), 0o444))
	must(fp.t, os.Symlink(exe, filepath.Join(d, "exe")))
	// Its executable mapped (code identity reads maps through root).
	must(fp.t, os.Symlink("/", filepath.Join(d, "root")))
	var st unix.Stat_t
	must(fp.t, unix.Stat(exe, &st))
	must(fp.t, os.WriteFile(filepath.Join(d, "maps"), []byte(fmt.Sprintf(
		"55d0c0a08000-55d0c0a2b000 r-xp 00008000 %02x:%02x %d %s\n", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino, exe)), 0o444))
	for fd := 0; fd < 3; fd++ {
		must(fp.t, os.Symlink("/dev/pts/0", filepath.Join(d, "fd", fmt.Sprint(fd))))
	}
	for i, ino := range sockets {
		must(fp.t, os.Symlink(fmt.Sprintf("socket:[%d]", ino), filepath.Join(d, "fd", fmt.Sprint(3+i))))
	}
}

func (fp *fakeProc) tables(pid int) {
	d := filepath.Join(fp.root, fmt.Sprint(pid), "net")
	must(fp.t, os.MkdirAll(d, 0o755))
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("testdata/" + f + ".golden")
		must(fp.t, err)
		must(fp.t, os.WriteFile(filepath.Join(d, f), b, 0o444))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Tuples present in testdata/tcp{,6}.golden.
var (
	tupleV4     = [2]string{"198.51.100.2:40000", "198.51.100.1:3128"}   // inode 900001
	tupleMapped = [2]string{"127.0.0.1:45498", "127.0.0.1:8080"}         // inode 893511 (tcp6)
	tupleV6     = [2]string{"[2001:db8::1]:41328", "[2001:db8::1]:8080"} // inode 893512
	tupleTW     = [2]string{"198.51.100.2:40001", "198.51.100.1:3128"}   // TIME_WAIT, inode 0
)

func lookupTuple(b Backend, tu [2]string) (*Identity, error) {
	return b.Lookup(context.Background(), netip.MustParseAddrPort(tu[0]), netip.MustParseAddrPort(tu[1]))
}

// fakeSandbox: init 100 (sh) -> 101 (bash) -> 102 (curl, holds the v4
// socket) and 103 (python, holds the v6 and v4-mapped sockets), plus
// unrelated 110..(110+extra) with other sockets.
type fakeSandbox struct {
	fp                 *fakeProc
	sh, bash, curl, py [2]string // path, sha256
	pids               []int
}

func newFakeSandbox(t *testing.T, extra int) *fakeSandbox {
	fp := newFakeProc(t)
	s := &fakeSandbox{fp: fp}
	s.sh[0], s.sh[1] = fp.bin("sh")
	s.bash[0], s.bash[1] = fp.bin("bash")
	s.curl[0], s.curl[1] = fp.bin("curl")
	s.py[0], s.py[1] = fp.bin("python3")
	fp.tables(100)
	fp.proc(100, 1, s.sh[0])
	fp.proc(101, 100, s.bash[0])
	fp.proc(103, 101, s.py[0], 893512, 893511)
	for i := 0; i < extra; i++ {
		fp.proc(110+i, 101, s.bash[0], uint64(5000000+i))
	}
	fp.proc(102, 101, s.curl[0], 777, 900001)
	s.pids = []int{100, 101, 103}
	for i := 0; i < extra; i++ {
		s.pids = append(s.pids, 110+i)
	}
	s.pids = append(s.pids, 102) // the v4 socket's holder is searched last
	return s
}

func (s *fakeSandbox) backend(t *testing.T, mod func(*ProcConfig)) *ProcBackend {
	cfg := ProcConfig{
		NetnsPID: func() int { return 100 },
		Procs:    func() ([]int, error) { return slices.Clone(s.pids), nil },
		InitPID:  100,
		ProcRoot: s.fp.root,
	}
	if mod != nil {
		mod(&cfg)
	}
	b, err := NewProcBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProcBackendFakeProc(t *testing.T) {
	s := newFakeSandbox(t, 0)
	b := s.backend(t, nil)

	id, err := lookupTuple(b, tupleV4)
	if err != nil {
		t.Fatal(err)
	}
	want := Identity{PID: 102, Exe: s.curl[0], SHA256: s.curl[1], Ancestors: []Process{{PID: 101, Exe: s.bash[0]}}}
	if !identityEqual(*id, want) {
		t.Errorf("v4:\n got %+v\nwant %+v", *id, want)
	}
	for _, tu := range [][2]string{tupleV6, tupleMapped} {
		id, err := lookupTuple(b, tu)
		if err != nil {
			t.Fatalf("%v: %v", tu, err)
		}
		if id.PID != 103 || id.Exe != s.py[0] || id.SHA256 != s.py[1] {
			t.Errorf("%v: got %+v, want pid 103 python3", tu, *id)
		}
	}
	// The proxy's conn may report an IPv4 peer as IPv4-mapped IPv6.
	mapped := netip.AddrPortFrom(netip.AddrFrom16(netip.MustParseAddr("198.51.100.2").As16()), 40000)
	if id, err := b.Lookup(context.Background(), mapped, netip.MustParseAddrPort(tupleV4[1])); err != nil || id.PID != 102 {
		t.Errorf("v4-mapped client argument: %+v, %v", id, err)
	}

	// Without an init pid the chain runs up to the sandbox boundary.
	b0 := s.backend(t, func(c *ProcConfig) { c.InitPID = 0 })
	id, err = lookupTuple(b0, tupleV4)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Process{{PID: 101, Exe: s.bash[0]}, {PID: 100, Exe: s.sh[0]}}; !slices.Equal(id.Ancestors, want) {
		t.Errorf("no init pid: ancestors %+v, want %+v", id.Ancestors, want)
	}
	// A parent that started after its child is another process that
	// took a dead parent's pid: the chain stops below it.
	s.fp.starts = map[int]int{100: 103}
	s.fp.restat(100)
	id, err = lookupTuple(b0, tupleV4)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Process{{PID: 101, Exe: s.bash[0]}}; !slices.Equal(id.Ancestors, want) {
		t.Errorf("grandparent started after its child: ancestors %+v, want %+v", id.Ancestors, want)
	}
}

func identityEqual(a, b Identity) bool {
	return a.PID == b.PID && a.Exe == b.Exe && a.SHA256 == b.SHA256 && slices.Equal(a.Ancestors, b.Ancestors)
}

func TestProcBackendNotFound(t *testing.T) {
	s := newFakeSandbox(t, 0)
	b := s.backend(t, nil)
	if _, err := lookupTuple(b, tupleV4); err != nil {
		t.Fatal(err)
	}
	cases := map[string][2]string{
		"unknown port":  {"198.51.100.2:40002", "198.51.100.1:3128"},
		"unknown proxy": {"198.51.100.2:40000", "198.51.100.1:3129"},
		"reversed":      {tupleV4[1], tupleV4[0]},
		"time-wait":     tupleTW,
	}
	for name, tu := range cases {
		if _, err := lookupTuple(b, tu); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: err %v, want ErrNotFound", name, err)
		}
	}
	if _, err := lookupTuple(b, tupleTW); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("time-wait: err %v, want it to say closed", err)
	}

	// Only the sandbox's processes are searched: with the holder left out
	// of Procs the socket has no owner, although it is in the fake /proc.
	calls := 0
	bx := s.backend(t, func(c *ProcConfig) {
		c.Procs = func() ([]int, error) {
			calls++
			return []int{100, 101, 103}, nil
		}
	})
	if _, err := lookupTuple(bx, tupleV4); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "inode 900001") {
		t.Errorf("holder outside the sandbox: err %v, want ErrNotFound naming the inode", err)
	}
	if calls != 2 {
		t.Errorf("Procs called %d times on a miss, want 2 (one retry)", calls)
	}

	// The sandbox's network namespace is gone.
	bg := s.backend(t, func(c *ProcConfig) { c.NetnsPID = func() int { return 999 } })
	if _, err := lookupTuple(bg, tupleV4); !errors.Is(err, ErrNotFound) {
		t.Errorf("netns pid gone: %v, want ErrNotFound", err)
	}
	bz := s.backend(t, func(c *ProcConfig) { c.NetnsPID = func() int { return 0 } })
	if _, err := lookupTuple(bz, tupleV4); !errors.Is(err, ErrNotFound) {
		t.Errorf("no netns pid: %v, want ErrNotFound", err)
	}
	if st := b.Stats(); st.Lookups != 6 || st.NotFound != 5 {
		t.Errorf("stats %+v, want 6 lookups 5 not found", st)
	}

	// Procs failing is an error, not a quiet miss.
	be := s.backend(t, func(c *ProcConfig) {
		c.Procs = func() ([]int, error) { return nil, errors.New("cgroup gone") }
	})
	if _, err := lookupTuple(be, tupleV4); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "cgroup gone") {
		t.Errorf("Procs error: %v", err)
	}
}

func TestProcBackendSharedSockets(t *testing.T) {
	// A descendant of the holder holds it too (bash's /dev/tcp inherited
	// by a child, or fork before exec): the topmost holder is reported.
	s := newFakeSandbox(t, 0)
	s.fp.proc(104, 102, s.py[0], 900001)
	s.fp.proc(105, 104, s.bash[0], 900001)
	s.pids = append([]int{105, 104}, s.pids...)
	id, err := lookupTuple(s.backend(t, nil), tupleV4)
	if err != nil {
		t.Fatal(err)
	}
	if id.PID != 102 || id.Exe != s.curl[0] {
		t.Errorf("descendants hold the socket: got pid %d %s, want the topmost holder 102", id.PID, id.Exe)
	}

	// An unrelated process (a sibling, or one that received the fd over
	// a Unix socket) holds it too: no single binary, refuse.
	s.fp.proc(106, 101, s.py[0], 900001)
	s.pids = append(s.pids, 106)
	_, err = lookupTuple(s.backend(t, nil), tupleV4)
	var se *SharedError
	if !errors.As(err, &se) || !errors.Is(err, ErrShared) {
		t.Fatalf("sibling holds the socket: err %v, want *SharedError", err)
	}
	if se.Inode != 900001 || !slices.Equal(se.PIDs, []int{102, 106}) {
		t.Errorf("shared error %+v, want inode 900001 pids [102 106]", se)
	}
}

// The parallel search (many processes, several workers) finds the holder
// wherever it is, including last.
func TestProcBackendParallelSearch(t *testing.T) {
	s := newFakeSandbox(t, 500)
	for _, workers := range []int{1, 4} {
		b := s.backend(t, func(c *ProcConfig) { c.Workers = workers })
		id, err := lookupTuple(b, tupleV4)
		if err != nil || id.PID != 102 {
			t.Errorf("workers=%d: %+v, %v", workers, id, err)
		}
		if st := b.Stats(); st.Scanned != uint64(len(s.pids)) {
			t.Errorf("workers=%d: scanned %d processes, want all %d", workers, st.Scanned, len(s.pids))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.backend(t, nil).Lookup(ctx, netip.MustParseAddrPort(tupleV4[0]), netip.MustParseAddrPort(tupleV4[1]))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

func TestProcBackendBadArguments(t *testing.T) {
	s := newFakeSandbox(t, 0)
	b := s.backend(t, nil)
	ap := netip.MustParseAddrPort
	for _, c := range []struct {
		client, proxy netip.AddrPort
		want          string
	}{
		{netip.AddrPort{}, ap(tupleV4[1]), "client"},
		{ap("198.51.100.2:0"), ap(tupleV4[1]), "client"},
		{ap(tupleV4[0]), netip.AddrPort{}, "proxy"},
		{ap(tupleV4[0]), ap("[2001:db8::1]:3128"), "families"},
	} {
		_, err := b.Lookup(context.Background(), c.client, c.proxy)
		if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Lookup(%v, %v): err %v, want one naming %s", c.client, c.proxy, err, c.want)
		}
	}
	for _, c := range []struct {
		cfg  ProcConfig
		want string
	}{
		{ProcConfig{Procs: s.backend(t, nil).cfg.Procs}, "NetnsPID"},
		{ProcConfig{NetnsPID: func() int { return 1 }}, "Procs"},
		{ProcConfig{NetnsPID: func() int { return 1 }, Procs: func() ([]int, error) { return nil, nil }, InitPID: -1}, "InitPID"},
		{ProcConfig{NetnsPID: func() int { return 1 }, Procs: func() ([]int, error) { return nil, nil }, Workers: -1}, "Workers"},
	} {
		if _, err := NewProcBackend(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config missing %s: err %v", c.want, err)
		}
	}
}
