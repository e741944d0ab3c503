//go:build linux && amd64

package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The hand-written amd64 table agrees with golang.org/x/sys/unix.
func TestSyscallTableAMD64(t *testing.T) {
	checkTable(t, "amd64", map[string]int{
		"read": unix.SYS_READ, "getpid": unix.SYS_GETPID, "memfd_create": unix.SYS_MEMFD_CREATE, "socketpair": unix.SYS_SOCKETPAIR,
		"name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT, "kcmp": unix.SYS_KCMP,
		"ioctl": unix.SYS_IOCTL, "socket": unix.SYS_SOCKET, "clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3, "unshare": unix.SYS_UNSHARE,
		"ptrace": unix.SYS_PTRACE, "process_vm_readv": unix.SYS_PROCESS_VM_READV, "process_vm_writev": unix.SYS_PROCESS_VM_WRITEV, "pidfd_getfd": unix.SYS_PIDFD_GETFD,
		"bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "userfaultfd": unix.SYS_USERFAULTFD,
		"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
		"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "init_module": unix.SYS_INIT_MODULE,
		"finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
		"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT, "chroot": unix.SYS_CHROOT,
		"fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK,
		"open_tree": unix.SYS_OPEN_TREE, "open_tree_attr": unix.SYS_OPEN_TREE_ATTR, "move_mount": unix.SYS_MOVE_MOUNT, "mount_setattr": unix.SYS_MOUNT_SETATTR,
		"setns": unix.SYS_SETNS, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
		"swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF, "reboot": unix.SYS_REBOOT, "acct": unix.SYS_ACCT,
		"quotactl": unix.SYS_QUOTACTL, "quotactl_fd": unix.SYS_QUOTACTL_FD,
		"clock_settime": unix.SYS_CLOCK_SETTIME, "clock_adjtime": unix.SYS_CLOCK_ADJTIME, "settimeofday": unix.SYS_SETTIMEOFDAY, "adjtimex": unix.SYS_ADJTIMEX,
		"syslog": unix.SYS_SYSLOG, "iopl": unix.SYS_IOPL, "ioperm": unix.SYS_IOPERM,
		"lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE, "nfsservctl": unix.SYS_NFSSERVCTL, "uselib": unix.SYS_USELIB,
	})
	if arches["amd64"].audit != unix.AUDIT_ARCH_X86_64 {
		t.Errorf("amd64 audit arch %#x", arches["amd64"].audit)
	}
}
