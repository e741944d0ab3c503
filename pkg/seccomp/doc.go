// Package seccomp builds and installs the sandbox's seccomp-bpf filter: a
// deny-list hardening layer that the supervisor installs as the very last
// step before it execs the sandboxed command.
//
// # Policy
//
// The filter is a deny list with default action ALLOW. An allow list would
// break the unpredictable tool chains an AI coding agent runs (compilers,
// JITs, package managers, CUDA); the sandbox's real walls are namespaces,
// Landlock, the capability drop and the egress proxy. Seccomp closes the
// kernel entry points that could be used to step around those walls or to
// attack the kernel itself:
//
//   - arch: a syscall made through a foreign ABI (for example i386 "int
//     0x80" on x86_64, AArch32 on arm64) kills the whole process
//     (SECCOMP_RET_KILL_PROCESS): its syscall numbers mean something else,
//     so no number-based rule could hold.
//   - x32: on x86_64, a syscall number with the x32 bit (0x40000000) set is
//     denied with EPERM. The x32 ABI reaches the same kernel entry points
//     under different numbers; nothing legitimate on these hosts uses it.
//     Every number with that bit set is denied, including -1, which
//     therefore gets EPERM instead of the kernel's ENOSYS.
//   - clone3 returns ENOSYS: its flags live in a struct in memory that
//     seccomp cannot read, and ENOSYS makes glibc and musl fall back to
//     clone, whose flags are a register the filter can inspect.
//   - clone with any CLONE_NEW* flag and unshare with any namespace flag
//     (including CLONE_NEWTIME) are denied with EPERM; unshare(CLONE_FILES)
//     and ordinary fork/thread creation stay allowed. Config.
//     AllowNamespaceClone lifts exactly these two rules.
//   - socket: AF_PACKET, AF_VSOCK, AF_BLUETOOTH, AF_ALG, AF_NETLINK with any
//     protocol other than NETLINK_ROUTE, SOCK_RAW (for every family except
//     AF_NETLINK, whose route sockets are SOCK_RAW by convention and are
//     needed by getaddrinfo and ip(8); AF_UNIX SOCK_RAW is denied too, the
//     kernel would silently turn it into SOCK_DGRAM) and IPPROTO_MPTCP
//     (MPTCP bypasses Landlock's TCP rules). socketpair is not filtered:
//     only local families such as AF_UNIX implement it, and for the denied
//     families the kernel creates no pair (EOPNOTSUPP, or EAFNOSUPPORT
//     when the family is not built in); the kernel test checks this.
//   - ioctl TIOCSTI and TIOCLINUX (terminal input injection) and TIOCSETD
//     (line-discipline switching, a long history of kernel bugs).
//   - EPERM for: debugging other processes (ptrace, process_vm_readv,
//     process_vm_writev, pidfd_getfd), bpf, perf_event_open, the key
//     management calls, io_uring, userfaultfd, kexec, kernel modules, the
//     whole mount family (including the new mount API and open_tree_attr),
//     chroot, setns, open_by_handle_at, swap, reboot, acct, quotas, every
//     clock and time setter, syslog, iopl/ioperm and the obsolete
//     lookup_dcookie, nfsservctl and uselib.
//
// memfd_create stays allowed (JITs and CUDA need it), and so does
// name_to_handle_at: it only names files the caller can already reach and
// is harmless without open_by_handle_at, which is denied.
// DefaultProfile().Rules() lists every rule with a stable name for events
// and documentation.
//
// # Why only the low 32 bits of arguments are compared
//
// The kernel declares socket's domain, type and protocol as int and ioctl's
// request as unsigned int, and clone takes only lower_32_bits of its flags,
// so the syscall entry code discards the high half of those 64-bit
// registers. A filter that compares all 64 bits (as go-seccomp-bpf does)
// lets socket(0xffffffff00000011, ...) — AF_PACKET with junk in the high
// half — slip past an "equals 17" rule while the kernel still creates a
// packet socket. This package therefore loads only the low 32-bit word of
// each argument (seccomp_data.args[i] at offset 16+8*i; both supported
// architectures are little-endian) and ignores the high word. unshare's
// flags are unsigned long, but the kernel rejects any high bit with EINVAL,
// so the low word is again all that matters.
//
// # Cost
//
// The program checks the architecture, then the x32 bit, then walks a
// balanced binary search over the syscall numbers that have rules; the
// argument checks run only for those syscalls. An ordinary syscall such as
// read executes about a dozen instructions, and because those paths read
// nothing but the architecture and the syscall number, Linux >= 5.11 caches
// them as "always allow" and skips the filter entirely.
//
// # Installing
//
// Install requires no_new_privs to be set already on the calling thread
// (the caller's privilege drop does that on a locked OS thread) and loads
// the filter with SECCOMP_FILTER_FLAG_TSYNC, so every thread of the process
// is covered; a thread that cannot be synchronised is reported as a
// *TSYNCError. Other platforms get a stub that returns
// feature.ErrNotSupported. Build itself is pure Go and works anywhere.
package seccomp
