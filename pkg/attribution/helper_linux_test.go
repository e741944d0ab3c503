//go:build linux

package attribution

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// childHelper is the testutil.ChildEnv value under which the test binary
// acts as one of the sandbox processes below instead of running tests.
const childHelper = "attribution"

// helperLife bounds every helper process, should a test die without
// cleaning up.
const helperLife = 2 * time.Minute

func TestMain(m *testing.M) {
	if testutil.IsChild(childHelper) && len(os.Args) > 1 {
		if err := runHelper(os.Args[1], os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "helper %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runHelper:
//
//	init: the sandbox init. Reads "shell <tag> <script>" (bash -c script)
//	  and "spawn <bin> <mode> <tag> <dial>" lines on
//	  stdin; each starts bash -c '"$0" "$@"; true' <bin> <mode> <tag> <dial>
//	  (so every client's parent is a bash). "sleepers <tag> <n>" starts n
//	  sleep processes and prints "ready <tag> <n>". Exits when stdin closes
//	  and its children are gone.
//	client <tag> <dial>: connects and prints "ready <tag> <pid> <ppid> <local>".
//	share <tag> <dial>: connects, starts a holder child that inherits the
//	  socket, prints "ready ... <holder pid>".
//	sibling <tag> <dial>: connects, starts two holder children, closes its
//	  own copy, prints "ready ... <holder1> <holder2>".
//	holder: holds fd 3 and waits.
//	exechand <tag> <dial> <bin>: connects, prints its ready line, then
//	  execs "<bin> holder" with the socket as fd 3 (same pid, new binary).
//	forkhand <tag> <dial> <bin>: connects, starts "<bin> holder" with the
//	  socket, closes its own copy, prints "ready ... <holder pid>".
//	forkexit <tag> <dial> <bin>: forkhand, then exits.
//	exit <tag> <dial> -: connects, prints its ready line and exits.
//	recv <tag> <path>: listens on the Unix socket path, prints
//	  "ready <tag> <pid>", receives one descriptor (SCM_RIGHTS), holds it
//	  and prints "got <tag>.got <fd>".
//	scmsend <tag> <dial> <path> keep|close: connects, sends the socket to
//	  the recv listening on path, keeps or closes its own copy, prints its
//	  ready line.
//	orphan <tag> <dial>: starts "<self> client <tag> <dial>", passes on
//	  its ready line (naming this process as its parent) and exits: the
//	  client is left an orphan.
//	code <tag> <dial> <how> <file>: connects, then maps file executable
//	  (how: mmap, PROT_EXEC; mprotect, read-only then PROT_EXEC; implies,
//	  PROT_READ under the READ_IMPLIES_EXEC personality; deleted, opened
//	  and unlinked first; memfd, its bytes copied into a memfd; exec, maps
//	  it then execs "<self> client <tag> <dial>", which connects) and
//	  prints its ready line.
//	reconnect <tag> <dial>: connects, prints its ready line, waits for
//	  SIGUSR1, then disconnects the socket (connect with AF_UNSPEC),
//	  connects it to the same address again and prints
//	  "reconnected <tag>.re <local>".
//	blast <tag> <dial> <n> <size>: connects, prints its ready line, waits
//	  for SIGUSR1, then writes n messages of size bytes and prints
//	  "blasted <tag> <cpu ns>" (its own user+system time for the writes).
//	poke <tag> <pid>: opens /proc/<pid>/mem for writing (what a debugger
//	  or an injector does) and prints "poked <tag>".
//	flood <tag> <n>: n TCP connects to 224.0.0.1:80 on each CPU, each
//	  refused by the kernel after the cgroup connect hook recorded it (so
//	  the record is never removed), then prints "flooded <tag> <refused>".
//
// dial is "4|ip:port", "6|[ip]:port" or "mapped|ip:port" (an AF_INET6
// socket connecting to the IPv4-mapped address).
func runHelper(mode string, args []string) error {
	switch mode {
	case "init":
		return helperInit()
	case "holder":
		time.Sleep(helperLife)
		return nil
	case "recv":
		return helperRecv(args)
	case "flood":
		return helperFlood(args)
	case "orphan":
		return helperOrphan(args)
	case "code":
		return helperCode(args)
	case "blast":
		return helperBlast(args)
	case "reconnect":
		return helperReconnect(args)
	case "poke":
		return helperPoke(args)
	case "exechand", "execwait", "forkhand", "forkexit", "exit", "scmsend":
		return helperHandOff(mode, args)
	case "client", "share", "sibling":
	default:
		return fmt.Errorf("unknown mode")
	}
	if len(args) != 2 {
		return fmt.Errorf("want <tag> <dial>")
	}
	tag, dial := args[0], args[1]
	fd, local, err := helperDial(dial)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("ready %s %d %d %s", tag, os.Getpid(), os.Getppid(), local)
	n := map[string]int{"client": 0, "share": 1, "sibling": 2}[mode]
	sock := os.NewFile(uintptr(fd), "socket")
	for i := 0; i < n; i++ {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cmd := exec.Command(self, "holder")
		cmd.ExtraFiles = []*os.File{sock}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		line += fmt.Sprintf(" %d", cmd.Process.Pid)
	}
	if mode == "sibling" {
		sock.Close()
	}
	fmt.Println(line)
	time.Sleep(helperLife)
	return nil
}

func helperInit() error {
	in := bufio.NewScanner(os.Stdin)
	var kids []*exec.Cmd
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) >= 4 && f[0] == "spawn":
			// bash's own stderr is discarded (it reports clients the
			// tests kill); the client's goes to fd 3, the real stderr.
			cmd := exec.Command("bash", append([]string{"-c", `"$0" "$@" 2>&3 3>&-; true`}, f[1:]...)...)
			cmd.Stdout = os.Stdout
			cmd.ExtraFiles = []*os.File{os.Stderr}
			if err := cmd.Start(); err != nil {
				return err
			}
			kids = append(kids, cmd)
		case len(f) >= 3 && f[0] == "shell":
			// shell <tag> <script>: bash -c script, its output to ours.
			script := strings.SplitN(in.Text(), " ", 3)[2]
			cmd := exec.Command("bash", "-c", script)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Start(); err != nil {
				return err
			}
			kids = append(kids, cmd)
		case len(f) == 3 && f[0] == "sleepers":
			n, err := strconv.Atoi(f[2])
			if err != nil {
				return err
			}
			for i := 0; i < n; i++ {
				cmd := exec.Command("sleep", "600") // the benchmark outlives helperLife
				if err := cmd.Start(); err != nil {
					return fmt.Errorf("sleeper %d: %w", i, err)
				}
				kids = append(kids, cmd)
			}
			fmt.Printf("ready %s %d\n", f[1], n)
		default:
			return fmt.Errorf("bad command %q", in.Text())
		}
	}
	for _, k := range kids {
		k.Wait()
	}
	return nil
}

func helperDial(spec string) (int, string, error) {
	kind, addr, ok := strings.Cut(spec, "|")
	if !ok {
		return -1, "", fmt.Errorf("dial %q: want kind|addr", spec)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return -1, "", err
	}
	var fd int
	var sa unix.Sockaddr
	switch kind {
	case "4":
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	case "6", "mapped":
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	default:
		return -1, "", fmt.Errorf("dial kind %q", kind)
	}
	if err != nil {
		return -1, "", err
	}
	if err := unix.Connect(fd, sa); err != nil {
		return -1, "", fmt.Errorf("connect %s: %w", spec, err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return -1, "", err
	}
	var local netip.AddrPort
	switch s := got.(type) {
	case *unix.SockaddrInet4:
		local = netip.AddrPortFrom(netip.AddrFrom4(s.Addr), uint16(s.Port))
	case *unix.SockaddrInet6:
		local = netip.AddrPortFrom(netip.AddrFrom16(s.Addr), uint16(s.Port))
	}
	return fd, local.String(), nil
}

// helperHandOff connects and hands the socket to another process: by
// exec (exechand), to a child that outlives its copy (forkhand), or over
// a Unix socket to an unrelated process (scmsend).
func helperHandOff(mode string, args []string) error {
	if len(args) < 3 || (mode == "scmsend" && len(args) != 4) {
		return fmt.Errorf("%s: wrong arguments %q", mode, args)
	}
	tag, dial, arg := args[0], args[1], args[2]
	fd, local, err := helperDial(dial)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("ready %s %d %d %s", tag, os.Getpid(), os.Getppid(), local)
	switch mode {
	case "execwait":
		// Like exechand, once SIGUSR1 arrives: the test names the
		// connector before and after its exec.
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		fmt.Println(line)
		select {
		case <-usr1:
		case <-time.After(helperLife):
			return nil
		}
		fallthrough
	case "exechand":
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return err
		}
		if fd != 3 {
			if err := unix.Dup2(fd, 3); err != nil {
				return err
			}
		}
		if mode == "exechand" {
			fmt.Println(line)
		}
		return unix.Exec(arg, []string{arg, "holder"}, os.Environ())
	case "exit":
		fmt.Println(line)
		return nil
	case "forkhand", "forkexit":
		sock := os.NewFile(uintptr(fd), "socket")
		cmd := exec.Command(arg, "holder")
		cmd.ExtraFiles = []*os.File{sock}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		sock.Close()
		line += fmt.Sprintf(" %d", cmd.Process.Pid)
		if mode == "forkexit" {
			fmt.Println(line)
			return nil
		}
	case "scmsend":
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: arg, Net: "unix"})
		if err != nil {
			return err
		}
		if _, _, err := c.WriteMsgUnix([]byte("x"), unix.UnixRights(fd), nil); err != nil {
			return err
		}
		c.Close()
		if args[3] == "close" {
			unix.Close(fd)
		}
	}
	fmt.Println(line)
	time.Sleep(helperLife)
	return nil
}

// helperRecv receives one descriptor over a Unix socket and holds it.
func helperRecv(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("recv: want <tag> <path>")
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: args[1], Net: "unix"})
	if err != nil {
		return err
	}
	fmt.Printf("ready %s %d\n", args[0], os.Getpid())
	c, err := ln.AcceptUnix()
	if err != nil {
		return err
	}
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.ReadMsgUnix(make([]byte, 1), oob)
	if err != nil {
		return err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("recv: control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return fmt.Errorf("recv: rights: %v", err)
	}
	c.Close()
	ln.Close()
	fmt.Printf("got %s.got %d\n", args[0], fds[0])
	time.Sleep(helperLife)
	return nil
}

// helperFlood fills the connection-record map: a TCP connect to a
// multicast address passes the cgroup connect4 hook (which writes a
// record) and is then refused by the route lookup, before the socket
// reaches sock_ops, so nothing ever deletes the record.
func helperFlood(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("flood: want <tag> <n>")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n <= 0 || n > 1<<20 {
		return fmt.Errorf("flood: n %q", args[1])
	}
	// The LRU map keeps a per-CPU list of new entries that only that
	// CPU's next inserts hand to the shared list eviction works on: the
	// flood runs on every CPU in turn, as an attacker's would.
	runtime.LockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return err
	}
	refused := 0
	sa := &unix.SockaddrInet4{Port: 80, Addr: [4]byte{224, 0, 0, 1}}
	for cpu := range 1024 {
		if !all.IsSet(cpu) {
			continue
		}
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return err
		}
		for range n {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if unix.Connect(fd, sa) != nil {
				refused++
			}
			unix.Close(fd)
		}
	}
	fmt.Printf("flooded %s %d\n", args[0], refused)
	return nil
}

// helperOrphan starts a client and exits, orphaning it.
func helperOrphan(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("orphan: want <tag> <dial>")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "client", args[0], args[1])
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// The client's ready line (naming this process as its parent), then
	// exit: it is an orphan from then on.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return err
	}
	fmt.Print(line)
	return nil
}

// helperCode maps a file's code into this process in one of several
// ways (see runHelper), around its connect.
func helperCode(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("code: want <tag> <dial> <how> <file>")
	}
	tag, dial, how, file := args[0], args[1], args[2], args[3]
	if how == "exec" {
		if err := mapExec(file, unix.PROT_READ|unix.PROT_EXEC, false); err != nil {
			return err
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		return unix.Exec(self, []string{self, "client", tag, dial}, os.Environ())
	}
	fd, local, err := helperDial(dial)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	switch how {
	case "mmap":
		err = mapExec(file, unix.PROT_READ|unix.PROT_EXEC, false)
	case "mprotect":
		err = mapExec(file, unix.PROT_READ, true)
	case "implies":
		const readImpliesExec = 0x0400000
		if _, _, errno := unix.Syscall(unix.SYS_PERSONALITY, readImpliesExec, 0, 0); errno != 0 {
			return errno
		}
		err = mapExec(file, unix.PROT_READ, false)
	case "deleted":
		err = mapDeleted(file)
	case "memfd":
		err = mapMemfd(file)
	default:
		err = fmt.Errorf("code: how %q", how)
	}
	if err != nil {
		return err
	}
	fmt.Printf("ready %s %d %d %s\n", tag, os.Getpid(), os.Getppid(), local)
	time.Sleep(helperLife)
	return nil
}

// mapExec maps file's first page with prot (then adds PROT_EXEC with
// mprotect when protect is set), and leaves it mapped.
func mapExec(file string, prot int, protect bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, 4096, prot, unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("mmap %s: %w", file, err)
	}
	if protect {
		return unix.Mprotect(b, unix.PROT_READ|unix.PROT_EXEC)
	}
	return nil
}

// mapDeleted opens file, unlinks it, then maps it executable.
func mapDeleted(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Remove(file); err != nil {
		return err
	}
	_, err = unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
	return err
}

// mapMemfd copies file into a memfd and maps that executable.
func mapMemfd(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	fd, err := unix.MemfdCreate("code", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	if _, err := unix.Write(fd, b); err != nil {
		return err
	}
	_, err = unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
	return err
}

// helperPoke opens another process's memory for writing.
func helperPoke(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("poke: want <tag> <pid>")
	}
	f, err := os.OpenFile("/proc/"+args[1]+"/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	f.Close()
	fmt.Printf("poked %s\n", args[0])
	return nil
}

// helperBlast measures what its writes cost it.
func helperBlast(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("blast: want <tag> <dial> <n> <size>")
	}
	n, err1 := strconv.Atoi(args[2])
	size, err2 := strconv.Atoi(args[3])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("blast: n %q size %q", args[2], args[3])
	}
	fd, signalled, err := helperDialThenWait(args[0], args[1])
	if err != nil || !signalled {
		return err
	}
	runtime.LockOSThread()
	buf := make([]byte, size)
	var r0, r1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &r0)
	for range n {
		if _, err := unix.Write(fd, buf); err != nil {
			return err
		}
	}
	unix.Getrusage(unix.RUSAGE_THREAD, &r1)
	cpu := (r1.Utime.Nano() + r1.Stime.Nano()) - (r0.Utime.Nano() + r0.Stime.Nano())
	fmt.Printf("blasted %s %d\n", args[0], cpu)
	return nil
}

// helperDialThenWait connects as helperDial does, prints the ready line
// and waits for the test's SIGUSR1 (listened for before the line, so it
// cannot arrive unheard): signalled is false when helperLife passed first.
func helperDialThenWait(tag, dial string) (fd int, signalled bool, err error) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	fd, local, err := helperDial(dial)
	if err != nil {
		return -1, false, err
	}
	fmt.Printf("ready %s %d %d %s\n", tag, os.Getpid(), os.Getppid(), local)
	select {
	case <-usr1:
		return fd, true, nil
	case <-time.After(helperLife):
		return fd, false, nil
	}
}

func helperReconnect(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("reconnect: want <tag> <dial>")
	}
	fd, signalled, err := helperDialThenWait(args[0], args[1])
	if err != nil || !signalled {
		return err
	}
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return err
	}
	var unspec unix.RawSockaddr // Family 0: AF_UNSPEC
	if _, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&unspec)), unsafe.Sizeof(unspec)); e != 0 {
		return fmt.Errorf("disconnect: %w", e)
	}
	if err := unix.Connect(fd, sa); err != nil {
		return fmt.Errorf("connect again: %w", err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return err
	}
	s, ok := got.(*unix.SockaddrInet4)
	if !ok {
		return fmt.Errorf("reconnect: IPv4 only")
	}
	fmt.Printf("reconnected %s.re %s\n", args[0], netip.AddrPortFrom(netip.AddrFrom4(s.Addr), uint16(s.Port)))
	time.Sleep(helperLife)
	return nil
}
