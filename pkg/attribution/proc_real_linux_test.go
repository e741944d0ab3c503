//go:build linux

package attribution

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Addresses of the test topology: a veth pair between a "proxy" network
// namespace and a "sandbox" one, both created by the test.
const (
	proxyV4 = "198.51.100.1"
	sbxV4   = "198.51.100.2"
	proxyV6 = "2001:db8::1"
	sbxV6   = "2001:db8::2"
)

// testSandbox is a real miniature sandbox: its own network namespace
// joined by a veth to a proxy namespace that holds the listeners, an init
// process (the test binary) in its own cgroup, and clients it spawns
// through bash on request.
type testSandbox struct {
	t        testing.TB
	cg       *cgroup.Group
	init     *exec.Cmd
	initPID  int
	stdin    io.WriteCloser
	lines    chan string
	pending  map[string]string
	ln4, ln6 net.Listener
	proxyNS  netns.NsHandle // where the listeners are
}

// inNS runs fn on a locked OS thread inside the namespace h.
func inNS(h netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(h); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("restore netns: %w", err) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func newTestSandbox(t testing.TB, pidsLimit int64) *testSandbox {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "ns:net")
	testutil.RequireFeature(t, "cgroup:pids")
	testutil.RequireCommand(t, "bash")

	_, proxyNS := testutil.NamedNetns(t, "atp")
	_, sbxNS := testutil.NamedNetns(t, "ats")
	setupVeth(t, proxyNS, sbxNS)

	s := &testSandbox{t: t, lines: make(chan string, 64), pending: map[string]string{}, proxyNS: proxyNS}
	if err := inNS(proxyNS, func() error {
		var err error
		if s.ln4, err = net.Listen("tcp4", proxyV4+":0"); err != nil {
			return err
		}
		s.ln6, err = net.Listen("tcp6", "["+proxyV6+"]:0")
		return err
	}); err != nil {
		t.Fatalf("listen in proxy namespace: %v", err)
	}
	t.Cleanup(func() { s.ln4.Close(); s.ln6.Close() })

	cg, err := cgroup.New(testutil.UniqueName("attr"), cgroup.Limits{Pids: pidsLimit})
	if err != nil {
		t.Fatal(err)
	}
	s.cg = cg
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s.init = exec.Command(self, "init")
	s.init.Env = append(os.Environ(), testutil.ChildEnv+"="+childHelper)
	s.init.Stderr = testutil.LogWriter(t, "init")
	if s.stdin, err = s.init.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := s.init.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The init starts in the sandbox namespace (forked from a thread in
	// it) and joins the cgroup before it is told to spawn anything.
	if err := inNS(sbxNS, s.init.Start); err != nil {
		cg.Destroy()
		t.Fatalf("start init: %v", err)
	}
	s.initPID = s.init.Process.Pid
	t.Cleanup(func() {
		s.stdin.Close()
		if err := s.cg.Destroy(); err != nil {
			t.Errorf("destroy cgroup: %v", err)
		}
		s.init.Wait()
	})
	if err := cg.AddPID(s.initPID); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	return s
}

func setupVeth(t testing.TB, proxyNS, sbxNS netns.NsHandle) {
	t.Helper()
	ph, err := netlink.NewHandleAt(proxyNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ph.Close()
	sh, err := netlink.NewHandleAt(sbxNS)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	la := netlink.NewLinkAttrs()
	la.Name = "p" + testutil.UniqueName("")
	peer := "s" + testutil.UniqueName("")
	if err := ph.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: peer, PeerNamespace: netlink.NsFd(sbxNS)}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	for _, side := range []struct {
		h      *netlink.Handle
		name   string
		v4, v6 string
	}{{ph, la.Name, proxyV4, proxyV6}, {sh, peer, sbxV4, sbxV6}} {
		l, err := side.h.LinkByName(side.name)
		if err != nil {
			t.Fatal(err)
		}
		a4, _ := netlink.ParseAddr(side.v4 + "/30")
		a6, _ := netlink.ParseAddr(side.v6 + "/64")
		a6.Flags = unix.IFA_F_NODAD
		for _, a := range []*netlink.Addr{a4, a6} {
			if err := side.h.AddrAdd(l, a); err != nil {
				t.Fatalf("add %v to %s: %v", a, side.name, err)
			}
		}
		if err := side.h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
}

// client is one connection from a sandbox process, as the proxy sees it.
type client struct {
	tag           string
	pid, ppid     int
	holders       []int
	conn          net.Conn
	client, proxy netip.AddrPort
}

// spawn asks the init to start bin in mode (client, share, sibling)
// connecting over family (4, 6, mapped), waits for it to connect, and
// accepts the connection on the proxy side.
func (s *testSandbox) spawn(bin, mode, family string) *client {
	s.t.Helper()
	return s.spawnArgs(bin, mode, family)
}

// spawnArgs is spawn with extra arguments after the dial spec.
func (s *testSandbox) spawnArgs(bin, mode, family string, extra ...string) *client {
	t := s.t
	t.Helper()
	ln, host := s.ln4, proxyV4
	if family == "6" {
		ln, host = s.ln6, proxyV6
	}
	port := ln.Addr().(*net.TCPAddr).Port
	tag := testutil.UniqueName(mode)
	dial := family + "|" + netip.AddrPortFrom(netip.MustParseAddr(host), uint16(port)).String()
	if _, err := fmt.Fprintf(s.stdin, "spawn %s %s %s %s\n", bin, mode, tag, strings.Join(append([]string{dial}, extra...), " ")); err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(s.waitLine(tag, 20*time.Second))
	// ready <tag> <pid> <ppid> <local> [holders...]
	if len(f) < 5 {
		t.Fatalf("bad ready line %q", f)
	}
	c := &client{tag: tag}
	c.pid, _ = strconv.Atoi(f[2])
	c.ppid, _ = strconv.Atoi(f[3])
	for _, h := range f[5:] {
		p, _ := strconv.Atoi(h)
		c.holders = append(c.holders, p)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept %s: %v", tag, err)
	}
	t.Cleanup(func() { conn.Close() })
	c.conn = conn
	c.client = conn.RemoteAddr().(*net.TCPAddr).AddrPort()
	c.proxy = conn.LocalAddr().(*net.TCPAddr).AddrPort()
	if local := netip.MustParseAddrPort(f[4]); normAddr(local) != normAddr(c.client) {
		t.Fatalf("%s: client says its address is %v, proxy accepted %v", tag, local, c.client)
	}
	return c
}

func (s *testSandbox) waitLine(tag string, wait time.Duration) string {
	s.t.Helper()
	if l, ok := s.pending[tag]; ok {
		delete(s.pending, tag)
		return l
	}
	timeout := time.After(wait)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("sandbox init exited before %s was ready", tag)
			}
			f := strings.Fields(l)
			if len(f) > 1 && f[1] == tag {
				return l
			}
			if len(f) > 1 {
				s.pending[f[1]] = l
			}
		case <-timeout:
			s.t.Fatalf("%s never became ready", tag)
		}
	}
}

func (s *testSandbox) backend(t testing.TB, mod func(*ProcConfig)) *ProcBackend {
	cfg := ProcConfig{
		NetnsPID: func() int { return s.initPID },
		Procs:    s.cg.Procs,
		InitPID:  s.initPID,
	}
	if mod != nil {
		mod(&cfg)
	}
	b, err := NewProcBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func fileSHA256(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func realPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProcBackendRealProcesses(t *testing.T) {
	testutil.CheckFDLeaks(t)
	s := newTestSandbox(t, 128)
	self, _ := os.Executable()
	selfSum := fileSHA256(t, self)
	bash := realPath(t, "bash")

	v4 := s.spawn(self, "client", "4")
	v6 := s.spawn(self, "client", "6")
	mapped := s.spawn(self, "client", "mapped")
	b := s.backend(t, nil)
	procOnly := s.backend(t, func(c *ProcConfig) { c.NoSockDiag = true })
	ctx := context.Background()

	// Both ways of finding the socket: sock_diag and the /proc tables.
	for _, be := range []*ProcBackend{b, procOnly} {
		for _, c := range []*client{v4, v6, mapped} {
			id, err := be.Lookup(ctx, c.client, c.proxy)
			if err != nil {
				t.Fatalf("NoSockDiag=%v %s (%v -> %v): %v", be.cfg.NoSockDiag, c.tag, c.client, c.proxy, err)
			}
			want := Identity{PID: c.pid, Exe: self, SHA256: selfSum, Ancestors: []Process{{PID: c.ppid, Exe: bash}}}
			if !identityEqual(*id, want) {
				t.Errorf("NoSockDiag=%v %s:\n got %+v\nwant %+v", be.cfg.NoSockDiag, c.tag, *id, want)
			}
		}
		// One binary, three processes, three lookups: hashed once.
		if st := be.Stats(); st.Hashes.Hashed != 1 || st.Hashes.Hits != 2 {
			t.Errorf("NoSockDiag=%v: hash stats %+v, want 1 hashed and 2 hits", be.cfg.NoSockDiag, st.Hashes)
		}
	}
	if st := b.Stats(); st.SockDiag != 3 || st.ProcTables != 0 {
		t.Errorf("default backend: %d sock_diag and %d /proc table lookups, want 3 and 0", st.SockDiag, st.ProcTables)
	}
	if st := procOnly.Stats(); st.SockDiag != 0 || st.ProcTables != 3 {
		t.Errorf("NoSockDiag backend: %d sock_diag and %d /proc table lookups, want 0 and 3", st.SockDiag, st.ProcTables)
	}

	// Without the init pid the chain continues to the init (the test
	// binary) and stops at the sandbox boundary (this test process).
	id, err := s.backend(t, func(c *ProcConfig) { c.InitPID = 0 }).Lookup(ctx, v4.client, v4.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Process{{PID: v4.ppid, Exe: bash}, {PID: s.initPID, Exe: self}}; !identityEqual(Identity{Ancestors: id.Ancestors}, Identity{Ancestors: want}) {
		t.Errorf("ancestors without init pid: %+v, want %+v", id.Ancestors, want)
	}

	// Unknown tuples.
	for _, tu := range [][2]netip.AddrPort{
		{netip.AddrPortFrom(v4.client.Addr(), 1), v4.proxy},
		{v4.proxy, v4.client},
		{v4.client, netip.AddrPortFrom(v4.proxy.Addr(), v4.proxy.Port()+1)},
	} {
		if _, err := b.Lookup(ctx, tu[0], tu[1]); !errorIsNotFound(err) {
			t.Errorf("%v -> %v: err %v, want ErrNotFound", tu[0], tu[1], err)
		}
	}

	// Only the sandbox's processes are searched: the holder is a real
	// process with the socket, but not in the given set.
	others := s.backend(t, func(c *ProcConfig) {
		c.Procs = func() ([]int, error) {
			all, err := s.cg.Procs()
			var out []int
			for _, p := range all {
				if p != v4.pid {
					out = append(out, p)
				}
			}
			return out, err
		}
	})
	if _, err := others.Lookup(ctx, v4.client, v4.proxy); !errorIsNotFound(err) {
		t.Errorf("holder left out of Procs: err %v, want ErrNotFound", err)
	}

	// Concurrent lookups from many goroutines all get the right answer.
	errc := make(chan error, 64)
	for g := 0; g < 16; g++ {
		go func() {
			for i := 0; i < 10; i++ {
				c := []*client{v4, v6, mapped}[(g+i)%3]
				id, err := b.Lookup(ctx, c.client, c.proxy)
				if err == nil && (id.PID != c.pid || id.SHA256 != selfSum) {
					err = fmt.Errorf("%s: got pid %d sha %s", c.tag, id.PID, id.SHA256)
				}
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for g := 0; g < 16; g++ {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	if st := b.Stats(); st.Hashes.Hashed != 1 {
		t.Errorf("concurrent lookups rehashed: %+v", st.Hashes)
	}

	// The client dies: its socket closes and the lookup says so.
	if err := unix.Kill(v4.pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := b.Lookup(ctx, v4.client, v4.proxy)
		if errorIsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the client was killed: err %v, want ErrNotFound", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func errorIsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// Sockets held by several processes: a holder's descendants are folded
// into it; unrelated holders make the lookup refuse.
func TestProcBackendRealSharedSockets(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, _ := os.Executable()
	b := s.backend(t, nil)
	ctx := context.Background()

	share := s.spawn(self, "share", "4")
	id, err := b.Lookup(ctx, share.client, share.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if id.PID != share.pid {
		t.Errorf("socket shared with a child (%v): attributed to %d, want the parent %d", share.holders, id.PID, share.pid)
	}

	sib := s.spawn(self, "sibling", "4")
	_, err = b.Lookup(ctx, sib.client, sib.proxy)
	var se *SharedError
	if !errors.As(err, &se) {
		t.Fatalf("socket held by two siblings: err %v, want *SharedError", err)
	}
	if se.PIDs == nil || len(se.PIDs) != 2 || !sameSet(se.PIDs, sib.holders) {
		t.Errorf("shared error pids %v, want the holders %v", se.PIDs, sib.holders)
	}
}

func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[int]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// Trust on first use with real binaries: a binary replaced at the same
// path is caught, and a process still running the old (deleted) file is
// hashed as what it runs, not as what the path now holds.
func TestProcBackendRealTOFU(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, _ := os.Executable()
	dir := t.TempDir()
	agent := filepath.Join(dir, "agent")
	copyFile(t, self, agent, nil)
	oldSum := fileSHA256(t, agent)

	b := s.backend(t, nil)
	pins, err := NewPinner(filepath.Join(dir, "pins.json"), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first := s.spawn(agent, "client", "4")
	id, err := b.Lookup(ctx, first.client, first.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if id.Exe != agent || id.SHA256 != oldSum {
		t.Fatalf("first agent: %s %s, want %s %s", id.Exe, id.SHA256, agent, oldSum)
	}
	if err := pins.Pin(id.Exe, id.SHA256); err != nil {
		t.Fatal(err)
	}

	// Replace the binary (a different build: extra bytes) at the same path.
	tmp := agent + ".new"
	copyFile(t, self, tmp, []byte("a different build"))
	if err := os.Rename(tmp, agent); err != nil {
		t.Fatal(err)
	}
	newSum := fileSHA256(t, agent)
	second := s.spawn(agent, "client", "4")
	id, err = b.Lookup(ctx, second.client, second.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if id.Exe != agent || id.SHA256 != newSum {
		t.Fatalf("replaced agent: %s %s, want %s %s", id.Exe, id.SHA256, agent, newSum)
	}
	err = pins.Pin(id.Exe, id.SHA256)
	var me *MismatchError
	if !errors.As(err, &me) || me.Path != agent || me.Pinned != oldSum || me.Seen != newSum {
		t.Fatalf("replaced binary: Pin err %v, want a mismatch %s -> %s", err, oldSum, newSum)
	}

	// The first process still runs the old, now unlinked, file.
	id, err = b.Lookup(ctx, first.client, first.proxy)
	if err != nil {
		t.Fatal(err)
	}
	if id.Exe != agent+" (deleted)" || id.SHA256 != oldSum {
		t.Errorf("process running the replaced file: %s %s, want %s (deleted) with the old sum", id.Exe, id.SHA256, agent)
	}
}

func copyFile(t testing.TB, from, to string, extra []byte) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, append(b, extra...), 0o755); err != nil {
		t.Fatal(err)
	}
}
