package seccomp

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/net/bpf"
)

// The case table below is run twice: in golang.org/x/net/bpf's userspace
// VM against synthetic seccomp_data (vm_test.go, no privileges) and as
// real syscalls in a child of the test binary that installed the filter
// (kernel_linux_test.go).
//
// Arguments of denied cases are chosen so that the kernel would fail the
// call harmlessly even if the filter let it through: reboot with a bad
// magic (EINVAL), kexec_load with a foreign arch in its flags (EINVAL),
// acct with the bad pointer 1 (EFAULT; acct(NULL) would switch host
// accounting off), syslog with an unknown action (EINVAL; action 5 would
// clear the host's kernel log), clone with CLONE_THREAD but without
// CLONE_SIGHAND (EINVAL before any process is created), and so on. The
// kernel test builds the filter with a deny errno no kernel path returns,
// so a denial by the filter is never confused with the kernel's own EPERM.

type outcome int

const (
	allow  outcome = iota
	deny           // errno(EPERM), or the test's marker errno
	enosys         // errno(ENOSYS)
	kill           // kill_process
)

func (o outcome) String() string {
	return [...]string{"allow", "deny", "enosys", "kill"}[o]
}

// action is the filter action the outcome stands for under cfg.
func (o outcome) action(cfg Config) Action {
	switch o {
	case deny:
		return ActionErrno(cfg.errno())
	case enosys:
		return ActionErrno(ENOSYS)
	case kill:
		return ActionKillProcess
	}
	return ActionAllow
}

// anyKernelErrno marks an allowed case whose exact kernel answer depends on
// the host (IPv6 disabled, capabilities); the kernel test then only checks
// that the filter did not deny it.
const anyKernelErrno = -1

// kernelFails marks an allowed case the kernel must refuse, with any errno.
const kernelFails = -2

type tcase struct {
	name string
	rule string // profile rule the case exercises; "" for allowed cases
	sys  string // syscall name from the arch tables; "" when rawNr is set
	// x32 adds the x32 bit to sys's number; rawNr replaces the number.
	// Both are x86_64-only cases.
	x32   bool
	rawNr uint32
	raw   bool
	args  [6]uint64
	want  outcome
	// kerr is what the real kernel returns for an allowed case: 0 for
	// success, an errno, anyKernelErrno or kernelFails.
	kerr int
	// bufArg, when non-zero, makes the kernel test pass a pointer to an
	// 8-byte buffer as argument bufArg-1 (socketpair's sv[2]).
	bufArg int
	// vmOnly cases would do something real if the filter failed (create a
	// process or a namespace); they run only in the VM.
	vmOnly bool
}

func (c tcase) amd64Only() bool { return c.x32 || c.raw }

// nr returns the syscall number on arch, or false when the syscall does not
// exist there.
func (c tcase) nr(arch string) (uint32, bool) {
	if c.raw {
		return c.rawNr, arch == "amd64"
	}
	if c.x32 && arch != "amd64" {
		return 0, false
	}
	n, ok := arches[arch].nr[c.sys]
	if !ok {
		panic(fmt.Sprintf("case %s: syscall %q not in the %s table", c.name, c.sys, arch))
	}
	if n == absent {
		return 0, false
	}
	if c.x32 {
		return uint32(n) | x32SyscallBit, true
	}
	return uint32(n), true
}

const (
	minus1 = ^uint64(0)               // -1 as a 64-bit register (fd -1)
	ones   = uint64(0xffffffff) << 32 // every high bit set, low word 0
	junk   = uint64(0xdeadbeef) << 32 // junk in the high word, low word 0

	sockDgram     = 2
	sockStream    = 1
	sockSeqpacket = 5
	sockNonblock  = 0x800
	sockCloexec   = 0x80000
	afInet        = 2
	afInet6       = 10

	cloneThread  = 0x10000 // without CLONE_SIGHAND: clone fails with EINVAL
	cloneFiles   = 0x400
	cloneSysvsem = 0x40000
	sigchld      = 17

	// errnos the kernel returns for allowed cases (Linux generic values).
	eBADF  = 9
	eFAULT = 14
	eINVAL = 22
)

func cases() []tcase {
	cs := []tcase{
		// Ordinary syscalls stay allowed.
		{name: "read-badfd", sys: "read", args: [6]uint64{minus1}, want: allow, kerr: eBADF},
		{name: "getpid", sys: "getpid", want: allow},
		{name: "memfd_create-allowed", sys: "memfd_create", want: allow, kerr: eFAULT},
		{name: "name_to_handle_at-allowed", sys: "name_to_handle_at", args: [6]uint64{minus1}, want: allow, kerr: anyKernelErrno},
		{name: "kcmp-allowed", sys: "kcmp", args: [6]uint64{0, 0, 0xffff}, want: allow, kerr: anyKernelErrno},

		// x32 ABI and odd numbers (x86_64 only).
		{name: "x32-getpid", rule: "x32", sys: "getpid", x32: true, want: deny},
		{name: "x32-socket-inet", rule: "x32", sys: "socket", x32: true, args: [6]uint64{afInet, sockStream}, want: deny},
		{name: "x32-ptrace-521", rule: "x32", raw: true, rawNr: x32SyscallBit | 521, args: [6]uint64{16}, want: deny},
		{name: "nr-minus-one", rule: "x32", raw: true, rawNr: 0xffffffff, want: deny},
		{name: "nr-unknown-1000", raw: true, rawNr: 1000, want: allow, kerr: 38},

		// clone3 makes libc fall back to clone.
		{name: "clone3-null", rule: "clone3", sys: "clone3", want: enosys},
		{name: "clone3-highbits", rule: "clone3", sys: "clone3", args: [6]uint64{ones, ones | 88}, want: enosys},

		// clone: plain threads and forks pass; namespace flags do not.
		{name: "clone-thread-only", sys: "clone", args: [6]uint64{cloneThread}, want: allow, kerr: eINVAL},
		{name: "clone-highbits-only", sys: "clone", args: [6]uint64{ones | cloneThread}, want: allow, kerr: eINVAL},
		{name: "clone-exit-signal-bit-0x80", sys: "clone", args: [6]uint64{cloneNewTime | cloneThread}, want: allow, kerr: eINVAL},
		{name: "clone-newuser-highbits", rule: "clone-namespace", sys: "clone", args: [6]uint64{ones | cloneNewUser | cloneThread}, want: deny},
		{name: "clone-newnet-junk", rule: "clone-namespace", sys: "clone", args: [6]uint64{junk | cloneNewNet | cloneThread, junk}, want: deny},
		{name: "clone-newuser-sigchld", rule: "clone-namespace", sys: "clone", args: [6]uint64{cloneNewUser | sigchld}, want: deny, vmOnly: true},

		// unshare.
		{name: "unshare-zero", sys: "unshare", want: allow, kerr: 0},
		{name: "unshare-files", sys: "unshare", args: [6]uint64{cloneFiles}, want: allow, kerr: 0},
		{name: "unshare-sysvsem", sys: "unshare", args: [6]uint64{cloneSysvsem}, want: allow, kerr: 0},
		{name: "unshare-highbits-only", sys: "unshare", args: [6]uint64{ones}, want: allow, kerr: eINVAL},
		{name: "unshare-newuser-highbits", rule: "unshare-namespace", sys: "unshare", args: [6]uint64{ones | cloneNewUser}, want: deny},
		{name: "unshare-files-newnet", rule: "unshare-namespace", sys: "unshare", args: [6]uint64{cloneFiles | cloneNewNet}, want: deny},

		// socket: allowed families and types.
		{name: "socket-inet-stream", sys: "socket", args: [6]uint64{afInet, sockStream}, want: allow},
		{name: "socket-inet-stream-flags", sys: "socket", args: [6]uint64{afInet, sockStream | sockNonblock | sockCloexec}, want: allow},
		{name: "socket-inet-tcp", sys: "socket", args: [6]uint64{afInet, sockStream, 6}, want: allow},
		{name: "socket-inet6-dgram", sys: "socket", args: [6]uint64{afInet6, sockDgram}, want: allow, kerr: anyKernelErrno},
		{name: "socket-unix-stream", sys: "socket", args: [6]uint64{afUnix, sockStream}, want: allow},
		{name: "socket-netlink-route-raw", sys: "socket", args: [6]uint64{afNetlink, sockRaw, netlinkRoute}, want: allow},
		{name: "socket-netlink-route-dgram-cloexec", sys: "socket", args: [6]uint64{afNetlink, sockDgram | sockCloexec, netlinkRoute}, want: allow},
		{name: "socket-netlink-route-proto-highbits", sys: "socket", args: [6]uint64{afNetlink, sockRaw, ones}, want: allow},
		{name: "socket-inet-family-highbits", sys: "socket", args: [6]uint64{ones | afInet, sockStream}, want: allow},
		{name: "socket-stream-raw-in-high-half", sys: "socket", args: [6]uint64{afInet, uint64(sockRaw)<<32 | sockStream}, want: allow},
		{name: "socket-mptcp-in-high-half", sys: "socket", args: [6]uint64{afInet, sockStream, uint64(ipprotoMPTCP) << 32}, want: allow},
		// socketpair is not filtered (see the package doc).
		{name: "socketpair-unix", sys: "socketpair", args: [6]uint64{afUnix, sockStream}, bufArg: 4, want: allow},
		{name: "socketpair-unix-null", sys: "socketpair", args: [6]uint64{afUnix, sockStream}, want: allow, kerr: eFAULT},
		{name: "socketpair-packet", sys: "socketpair", args: [6]uint64{afPacket, sockRaw}, bufArg: 4, want: allow, kerr: kernelFails},
		{name: "socketpair-vsock", sys: "socketpair", args: [6]uint64{afVsock, sockStream}, bufArg: 4, want: allow, kerr: kernelFails},
		{name: "socketpair-alg", sys: "socketpair", args: [6]uint64{afAlg, sockSeqpacket}, bufArg: 4, want: allow, kerr: kernelFails},
		{name: "socketpair-inet-raw", sys: "socketpair", args: [6]uint64{afInet, sockRaw, 1}, bufArg: 4, want: allow, kerr: kernelFails},
		{name: "socketpair-netlink-audit", sys: "socketpair", args: [6]uint64{afNetlink, sockRaw, 9}, bufArg: 4, want: allow, kerr: kernelFails},

		// socket: denied families.
		{name: "socket-af-packet-raw", rule: "socket-af-packet", sys: "socket", args: [6]uint64{afPacket, sockRaw, 0x300}, want: deny},
		{name: "socket-af-packet-dgram", rule: "socket-af-packet", sys: "socket", args: [6]uint64{afPacket, sockDgram}, want: deny},
		{name: "socket-af-packet-highbits", rule: "socket-af-packet", sys: "socket", args: [6]uint64{ones | afPacket, sockRaw}, want: deny},
		{name: "socket-af-packet-junk-everywhere", rule: "socket-af-packet", sys: "socket", args: [6]uint64{junk | afPacket, junk | sockDgram, junk | 0x300}, want: deny},
		{name: "socket-af-vsock", rule: "socket-af-vsock", sys: "socket", args: [6]uint64{afVsock, sockStream}, want: deny},
		{name: "socket-af-vsock-highbits", rule: "socket-af-vsock", sys: "socket", args: [6]uint64{junk | afVsock, sockStream}, want: deny},
		{name: "socket-af-bluetooth", rule: "socket-af-bluetooth", sys: "socket", args: [6]uint64{afBluetooth, sockRaw, 1}, want: deny},
		{name: "socket-af-bluetooth-highbits", rule: "socket-af-bluetooth", sys: "socket", args: [6]uint64{ones | afBluetooth, sockSeqpacket}, want: deny},
		{name: "socket-af-alg", rule: "socket-af-alg", sys: "socket", args: [6]uint64{afAlg, sockSeqpacket}, want: deny},
		{name: "socket-af-alg-highbits", rule: "socket-af-alg", sys: "socket", args: [6]uint64{junk | afAlg, sockSeqpacket}, want: deny},
		{name: "socket-netlink-audit", rule: "socket-netlink-non-route", sys: "socket", args: [6]uint64{afNetlink, sockRaw, 9}, want: deny},
		{name: "socket-netlink-sock-diag", rule: "socket-netlink-non-route", sys: "socket", args: [6]uint64{afNetlink, sockDgram | sockCloexec, 4}, want: deny},
		{name: "socket-netlink-family-highbits", rule: "socket-netlink-non-route", sys: "socket", args: [6]uint64{junk | afNetlink, sockRaw, 9}, want: deny},
		{name: "socket-netlink-uevent-proto-highbits", rule: "socket-netlink-non-route", sys: "socket", args: [6]uint64{afNetlink, sockRaw, ones | 15}, want: deny},
		{name: "socket-inet-raw-icmp", rule: "socket-raw", sys: "socket", args: [6]uint64{afInet, sockRaw, 1}, want: deny},
		{name: "socket-inet6-raw-icmpv6", rule: "socket-raw", sys: "socket", args: [6]uint64{afInet6, sockRaw, 58}, want: deny},
		{name: "socket-inet-raw-flags", rule: "socket-raw", sys: "socket", args: [6]uint64{afInet, sockRaw | sockNonblock | sockCloexec, 255}, want: deny},
		{name: "socket-inet-raw-type-highbits", rule: "socket-raw", sys: "socket", args: [6]uint64{afInet, ones | sockRaw, 1}, want: deny},
		{name: "socket-inet-raw-junk-everywhere", rule: "socket-raw", sys: "socket", args: [6]uint64{ones | afInet, junk | sockRaw, junk | 6}, want: deny},
		{name: "socket-unix-raw", rule: "socket-raw", sys: "socket", args: [6]uint64{afUnix, sockRaw}, want: deny},
		{name: "socket-inet-mptcp", rule: "socket-mptcp", sys: "socket", args: [6]uint64{afInet, sockStream, ipprotoMPTCP}, want: deny},
		{name: "socket-inet6-mptcp", rule: "socket-mptcp", sys: "socket", args: [6]uint64{afInet6, sockStream, ipprotoMPTCP}, want: deny},
		{name: "socket-mptcp-highbits", rule: "socket-mptcp", sys: "socket", args: [6]uint64{afInet, sockStream, ones | ipprotoMPTCP}, want: deny},
		{name: "socket-mptcp-junk-everywhere", rule: "socket-mptcp", sys: "socket", args: [6]uint64{junk | afInet, junk | sockStream | sockCloexec, junk | ipprotoMPTCP}, want: deny},

		// ioctl.
		{name: "ioctl-tcgets", sys: "ioctl", args: [6]uint64{minus1, 0x5401}, want: allow, kerr: eBADF},
		{name: "ioctl-fionread", sys: "ioctl", args: [6]uint64{minus1, 0x541b}, want: allow, kerr: eBADF},
		{name: "ioctl-tcgets-highbits", sys: "ioctl", args: [6]uint64{minus1, ones | 0x5401}, want: allow, kerr: eBADF},
		{name: "ioctl-tiocsti-in-high-half", sys: "ioctl", args: [6]uint64{minus1, uint64(tiocsti) << 32}, want: allow, kerr: eBADF},
		{name: "ioctl-tiocsti", rule: "ioctl-tiocsti", sys: "ioctl", args: [6]uint64{minus1, tiocsti}, want: deny},
		{name: "ioctl-tiocsti-highbits", rule: "ioctl-tiocsti", sys: "ioctl", args: [6]uint64{minus1, junk | tiocsti}, want: deny},
		{name: "ioctl-tiocsti-fd0-ones", rule: "ioctl-tiocsti", sys: "ioctl", args: [6]uint64{0, ones | tiocsti}, want: deny, vmOnly: true},
		{name: "ioctl-tioclinux", rule: "ioctl-tioclinux", sys: "ioctl", args: [6]uint64{minus1, tioclinux}, want: deny},
		{name: "ioctl-tioclinux-highbits", rule: "ioctl-tioclinux", sys: "ioctl", args: [6]uint64{minus1, ones | tioclinux}, want: deny},
		{name: "ioctl-tiocsetd", rule: "ioctl-tiocsetd", sys: "ioctl", args: [6]uint64{minus1, tiocsetd}, want: deny},
		{name: "ioctl-tiocsetd-highbits", rule: "ioctl-tiocsetd", sys: "ioctl", args: [6]uint64{minus1, junk | tiocsetd}, want: deny},
	}
	for flag, name := range map[uint64]string{
		cloneNewNS: "newns", cloneNewCgroup: "newcgroup", cloneNewUTS: "newuts", cloneNewIPC: "newipc",
		cloneNewUser: "newuser", cloneNewPID: "newpid", cloneNewNet: "newnet",
	} {
		cs = append(cs, tcase{name: "clone-" + name, rule: "clone-namespace", sys: "clone", args: [6]uint64{flag | cloneThread}, want: deny})
	}
	for flag, name := range map[uint64]string{
		cloneNewNS: "newns", cloneNewCgroup: "newcgroup", cloneNewUTS: "newuts", cloneNewIPC: "newipc",
		cloneNewUser: "newuser", cloneNewPID: "newpid", cloneNewNet: "newnet", cloneNewTime: "newtime",
	} {
		cs = append(cs, tcase{name: "unshare-" + name, rule: "unshare-namespace", sys: "unshare", args: [6]uint64{flag}, want: deny})
	}
	// Every syscall the profile must deny whatever its arguments: the
	// hand-written list below, not the profile's own deniedSyscalls, so
	// that dropping a syscall from the profile fails its case.
	for _, s := range slices.Sorted(maps.Keys(deniedWhatever)) {
		cs = append(cs, tcase{name: s, rule: s, sys: s, args: deniedWhatever[s], want: deny})
	}
	return cs
}

// seccompData is struct seccomp_data.
type seccompData struct {
	nr   uint32
	arch uint32
	ip   uint64
	args [6]uint64
}

// words lays seccomp_data out as the sixteen 32-bit words the kernel's
// loads see on a little-endian machine: a 64-bit field is its low word
// followed by its high word.
func (d seccompData) words() [16]uint32 {
	var w [16]uint32
	w[0], w[1] = d.nr, d.arch
	w[2], w[3] = uint32(d.ip), uint32(d.ip>>32)
	for i, a := range d.args {
		w[4+2*i], w[5+2*i] = uint32(a), uint32(a>>32)
	}
	return w
}

// kernelBytes is seccomp_data in the kernel's (little-endian) memory.
func (d seccompData) kernelBytes() []byte {
	b := make([]byte, 64)
	for i, w := range d.words() {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// vmBytes is seccomp_data for golang.org/x/net/bpf's VM. That VM is a
// packet filter and loads words in network (big-endian) order, while the
// kernel loads seccomp_data in native order; writing each 32-bit word
// big-endian at its little-endian position makes every 4-byte load of the
// VM return what the kernel's would. The filter only ever loads whole
// words, so this is exact.
func (d seccompData) vmBytes() []byte {
	b := make([]byte, 64)
	for i, w := range d.words() {
		binary.BigEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// trace is one run of the counting interpreter.
type trace struct {
	ret   uint32
	steps int            // instructions executed
	loads map[uint32]int // seccomp_data offsets read
}

// interpret runs a seccomp cBPF program the way the kernel does, over
// little-endian seccomp_data, counting instructions. It understands only
// the opcodes this package emits and fails on any other, so it doubles as
// a check of the instruction set the compiler uses. It is independent of
// golang.org/x/net/bpf's VM; the tests require both to agree.
func interpret(prog []bpf.RawInstruction, data []byte) (trace, error) {
	tr := trace{loads: map[uint32]int{}}
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		tr.steps++
		if tr.steps > len(prog) {
			return tr, fmt.Errorf("loop at pc %d", pc)
		}
		ins := prog[pc]
		switch ins.Op {
		case 0x20: // BPF_LD|BPF_W|BPF_ABS
			if ins.K%4 != 0 || ins.K+4 > uint32(len(data)) {
				return tr, fmt.Errorf("pc %d: load at offset %d", pc, ins.K)
			}
			a = binary.LittleEndian.Uint32(data[ins.K:])
			tr.loads[ins.K]++
		case 0x54: // BPF_ALU|BPF_AND|BPF_K
			a &= ins.K
		case 0x05: // BPF_JMP|BPF_JA
			pc += int(ins.K)
		case 0x15, 0x25, 0x35, 0x45: // JEQ, JGT, JGE, JSET with K
			var t bool
			switch ins.Op {
			case 0x15:
				t = a == ins.K
			case 0x25:
				t = a > ins.K
			case 0x35:
				t = a >= ins.K
			case 0x45:
				t = a&ins.K != 0
			}
			if t {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		case 0x06: // BPF_RET|BPF_K
			tr.ret = ins.K
			return tr, nil
		default:
			return tr, fmt.Errorf("pc %d: opcode %#x not expected in a seccomp filter from this package", pc, ins.Op)
		}
	}
	return tr, fmt.Errorf("ran off the end of the program")
}

// deniedWhatever lists, by hand and independently of profile.go, every
// syscall the default profile must deny (errno EPERM, or the test's
// marker errno) whatever its arguments, each with arguments the kernel
// rejects harmlessly should the filter ever let the call through.
// TestProfileMatchesTheDenyList checks it against the profile both ways.
var deniedWhatever = map[string][6]uint64{
	"ptrace":            {16 /* PTRACE_ATTACH */, 0 /* pid 0: ESRCH */},
	"process_vm_readv":  {0, 0, 0, 0, 0, 1 /* flags must be 0: EINVAL */},
	"process_vm_writev": {0, 0, 0, 0, 0, 1},
	"pidfd_getfd":       {minus1, 0, 0},
	"bpf":               {minus1 /* no such command */},
	"perf_event_open":   {0 /* NULL attr: EFAULT */, 0, minus1, minus1},
	"userfaultfd":       {0xffffffff /* unknown flags */},
	"keyctl":            {0xffff /* unknown operation */},
	"add_key":           {},
	"request_key":       {},
	"io_uring_setup":    {0, 0},
	"io_uring_enter":    {minus1},
	"io_uring_register": {minus1},
	"kexec_load":        {0, 0, 0, 0x00ff0000 /* foreign KEXEC_ARCH: EINVAL; never 0 segments + flags 0 (unload) */},
	"kexec_file_load":   {minus1, minus1, 0, 0, 0xffff0000 /* unknown flags; never KEXEC_FILE_UNLOAD */},
	"init_module":       {0, 0, 0},
	"finit_module":      {minus1, 0, 0xffffffff},
	"delete_module":     {0 /* NULL name: EFAULT */, 0},
	"mount":             {0, 0 /* NULL target: EFAULT */, 0, 0, 0},
	"umount2":           {0, 0x80 /* unknown flag: EINVAL */},
	"pivot_root":        {0, 0},
	"chroot":            {0},
	"fsopen":            {0, 0},
	"fsconfig":          {minus1, 0xffff},
	"fsmount":           {minus1, 0xffffffff},
	"fspick":            {minus1, 0, 0xffffffff},
	"open_tree":         {minus1, 0, 0xffffffff},
	"open_tree_attr":    {minus1, 0, 0xffffffff},
	"move_mount":        {minus1, 0, minus1, 0, 0xffffffff},
	"mount_setattr":     {minus1, 0, 0xffffffff},
	"setns":             {minus1, 0},
	"open_by_handle_at": {minus1, 0, 0},
	"swapon":            {0, 0},
	"swapoff":           {0},
	"reboot":            {0, 0, 0, 0 /* bad magic: EINVAL */},
	"acct":              {1 /* bad pointer: EFAULT; acct(NULL) would stop accounting */},
	"quotactl":          {0, 0 /* NULL device, not Q_SYNC: ENODEV */},
	"quotactl_fd":       {minus1},
	"clock_settime":     {12345 /* no such clock */, 0},
	"clock_adjtime":     {12345, 0},
	"settimeofday":      {1, 1 /* bad pointers: EFAULT */},
	"adjtimex":          {0 /* NULL: EFAULT */},
	"syslog":            {100 /* unknown action: EINVAL */},
	"iopl":              {4 /* level > 3: EINVAL */},
	"ioperm":            {0x10000, 1, 1 /* beyond the I/O bitmap: EINVAL */},
	"lookup_dcookie":    {0, 0, 0},
	"nfsservctl":        {},
	"uselib":            {0},
}
