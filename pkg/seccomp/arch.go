package seccomp

// archInfo is what the compiler needs to know about one architecture.
type archInfo struct {
	audit uint32 // AUDIT_ARCH_* value seen in seccomp_data.arch
	x32   bool   // syscall numbers with the x32 bit are a second ABI
	// nr maps syscall names to numbers; absent marks a syscall the
	// architecture does not have. A name missing from the map is a bug.
	nr map[string]int
}

const absent = -1

// The tables hold every syscall the profile names plus a few the tests
// use. They are written out rather than taken from golang.org/x/sys/unix
// because unix only defines the numbers of the architecture being built;
// per-architecture tests compare them with unix.SYS_*.
var arches = map[string]archInfo{
	"amd64": {audit: 0xc000003e, x32: true, nr: map[string]int{ // AUDIT_ARCH_X86_64
		"read": 0, "getpid": 39, "memfd_create": 319, "socketpair": 53,
		"name_to_handle_at": 303, "kcmp": 312,
		"ioctl": 16, "socket": 41, "clone": 56, "clone3": 435, "unshare": 272,
		"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
		"bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
		"keyctl": 250, "add_key": 248, "request_key": 249,
		"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
		"kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
		"mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
		"fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
		"open_tree": 428, "open_tree_attr": 467, "move_mount": 429, "mount_setattr": 442,
		"setns": 308, "open_by_handle_at": 304,
		"swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163, "quotactl": 179, "quotactl_fd": 443,
		"clock_settime": 227, "clock_adjtime": 305, "settimeofday": 164, "adjtimex": 159,
		"syslog": 103, "iopl": 172, "ioperm": 173,
		"lookup_dcookie": 212, "nfsservctl": 180, "uselib": 134,
	}},
	"arm64": {audit: 0xc00000b7, nr: map[string]int{ // AUDIT_ARCH_AARCH64
		"read": 63, "getpid": 172, "memfd_create": 279, "socketpair": 199,
		"name_to_handle_at": 264, "kcmp": 272,
		"ioctl": 29, "socket": 198, "clone": 220, "clone3": 435, "unshare": 97,
		"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
		"bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
		"keyctl": 219, "add_key": 217, "request_key": 218,
		"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
		"kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
		"mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
		"fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
		"open_tree": 428, "open_tree_attr": 467, "move_mount": 429, "mount_setattr": 442,
		"setns": 268, "open_by_handle_at": 265,
		"swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89, "quotactl": 60, "quotactl_fd": 443,
		"clock_settime": 112, "clock_adjtime": 266, "settimeofday": 170, "adjtimex": 171,
		"syslog": 116, "iopl": absent, "ioperm": absent,
		"lookup_dcookie": 18, "nfsservctl": 42, "uselib": absent,
	}},
}
