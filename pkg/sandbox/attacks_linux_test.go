//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// outcome names an error the way the assertions compare it.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return sysOutcome(0, 0, errno)
	}
	return "error: " + err.Error()
}

func sysOutcome(_, _ uintptr, errno syscall.Errno) string {
	if errno == 0 {
		return "ok"
	}
	if name := unix.ErrnoName(errno); name != "" {
		return name
	}
	return fmt.Sprintf("errno %d", int(errno))
}

// Attack environment: PALISADE_T_RO (a read-only test dir holding a file
// "f" owned by the sandbox user, mode 0666, and the setuid copy "suid"),
// PALISADE_T_HOSTPORT (a host loopback listener), PALISADE_T_HOSTSOCK (a
// host unix socket path), PALISADE_T_SECRET_NAME.
var attacks = map[string]func() string{
	"write_etc": func() string { return outcome(os.WriteFile("/etc/palisade-pwned", []byte("x"), 0o644)) },
	"write_usr": func() string { return outcome(os.WriteFile("/usr/palisade-pwned", []byte("x"), 0o644)) },
	"write_ro_dir": func() string {
		return outcome(os.WriteFile(filepath.Join(os.Getenv("PALISADE_T_RO"), "new"), nil, 0o644))
	},
	"read_root":     func() string { _, err := os.ReadDir("/root"); return outcome(err) },
	"read_home":     func() string { _, err := os.ReadDir("/home"); return outcome(err) },
	"read_var":      func() string { _, err := os.ReadDir("/var/log"); return outcome(err) },
	"read_shadow":   func() string { _, err := os.ReadFile("/etc/shadow"); return outcome(err) },
	"read_etc":      func() string { _, err := os.ReadFile("/etc/hostname"); return outcome(err) },
	"truncate_ro":   func() string { return outcome(os.Truncate(filepath.Join(os.Getenv("PALISADE_T_RO"), "f"), 0)) },
	"openwrite_ro":  func() string { return outcome(openWrite(filepath.Join(os.Getenv("PALISADE_T_RO"), "f"))) },
	"write_workdir": func() string { return outcome(os.WriteFile("wd-file", []byte("x"), 0o644)) },
	"write_tmp":     func() string { return outcome(os.WriteFile("/tmp/tmp-file", []byte("x"), 0o644)) },
	"symlink_read": func() string {
		os.Remove("link-secret")
		if err := os.Symlink("/root", "link-secret"); err != nil {
			return outcome(err)
		}
		_, err := os.ReadDir("link-secret")
		return outcome(err)
	},
	"symlink_write_etc": func() string {
		os.Remove("link-etc")
		if err := os.Symlink("/etc", "link-etc"); err != nil {
			return outcome(err)
		}
		return outcome(os.WriteFile("link-etc/palisade-pwned", nil, 0o644))
	},
	"hardlink_ro": func() string {
		return outcome(os.Link(filepath.Join(os.Getenv("PALISADE_T_RO"), "f"), "hl"))
	},
	"mknod_char":  func() string { return outcome(unix.Mknod("/tmp/nullx", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))) },
	"mknod_block": func() string { return outcome(unix.Mknod("/tmp/blk", unix.S_IFBLK|0o666, int(unix.Mkdev(8, 0)))) },
	"proc_sys":    func() string { return outcome(os.WriteFile("/proc/sys/kernel/hostname", []byte("pwned"), 0)) },
	"sys_write": func() string {
		return outcome(os.WriteFile("/sys/kernel/mm/transparent_hugepage/enabled", []byte("never"), 0))
	},
	"block_device": func() string { return outcome(openWrite("/dev/vda")) },
	"dev_create":   func() string { return outcome(os.WriteFile("/dev/pwned", nil, 0o644)) },
	"status": func() string {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return outcome(err)
		}
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			for _, k := range []string{"Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:", "Seccomp:"} {
				if strings.HasPrefix(l, k) {
					keep = append(keep, strings.Join(strings.Fields(l), " "))
				}
			}
		}
		return strings.Join(keep, "|")
	},
	"setuid0": func() string { return sysOutcome(unix.RawSyscall(unix.SYS_SETUID, 0, 0, 0)) },
	"setgid0": func() string { return sysOutcome(unix.RawSyscall(unix.SYS_SETGID, 0, 0, 0)) },
	"suid_bin": func() string {
		out, err := exec.Command(filepath.Join(os.Getenv("PALISADE_T_RO"), "suid"), "euid").Output()
		if err != nil {
			return outcome(err)
		}
		return strings.TrimSpace(string(out))
	},
	"unshare_user":  func() string { return outcome(unix.Unshare(unix.CLONE_NEWUSER)) },
	"unshare_net":   func() string { return outcome(unix.Unshare(unix.CLONE_NEWNET)) },
	"unshare_mount": func() string { return outcome(unix.Unshare(unix.CLONE_NEWNS)) },
	"clone_newuser": func() string {
		// Raw clone with CLONE_NEWUSER and no CLONE_VM: if it succeeded the
		// child exits at once.
		pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.CLONE_NEWUSER|unix.SIGCHLD), 0, 0, 0, 0, 0)
		if errno == 0 && pid == 0 {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		return sysOutcome(0, 0, errno)
	},
	"clone3": func() string {
		var args [11]uint64
		args[4] = uint64(unix.SIGCHLD)
		pid, _, errno := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args[0])), unsafe.Sizeof(args), 0)
		if errno == 0 && pid == 0 {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		return sysOutcome(0, 0, errno)
	},
	"ptrace_init": func() string { return sysOutcome(unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 1, 0, 0, 0, 0)) },
	"ptrace_sibling": func() string {
		c := exec.Command("/bin/sleep", "5")
		if err := c.Start(); err != nil {
			return outcome(err)
		}
		defer c.Process.Kill()
		return sysOutcome(unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(c.Process.Pid), 0, 0, 0, 0))
	},
	// procmem_sibling writes into another sandboxed process's memory
	// through /proc/<pid>/mem (same uid, same Landlock domain: what
	// ptrace's refusal does not cover), the way code would be injected
	// into an allowed binary after its checks.
	"procmem_sibling": func() string {
		c := exec.Command("/bin/sleep", "5")
		if err := c.Start(); err != nil {
			return outcome(err)
		}
		defer c.Process.Kill()
		return outcome(openWrite(fmt.Sprintf("/proc/%d/mem", c.Process.Pid)))
	},
	"procmem_self": func() string { return outcome(openWrite("/proc/self/mem")) },
	"bpf":          func() string { return sysOutcome(unix.RawSyscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, 0, 0)) },
	"io_uring":     func() string { return sysOutcome(unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)) },
	"keyctl":       func() string { return sysOutcome(unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, 0, 0)) },
	"tiocsti_hibits": func() string {
		c := []byte("x")
		return sysOutcome(unix.RawSyscall(unix.SYS_IOCTL, 0, uintptr(0xdeadbeef00000000|unix.TIOCSTI), uintptr(unsafe.Pointer(&c[0]))))
	},
	"mptcp": func() string {
		return sysOutcome(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 262))
	},
	"raw_socket": func() string {
		return sysOutcome(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP))
	},
	"packet_socket": func() string { return sysOutcome(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0)) },
	"packet_hibits": func() string {
		return sysOutcome(unix.RawSyscall(unix.SYS_SOCKET, 0xffffffff00000000|unix.AF_PACKET, unix.SOCK_DGRAM, 0))
	},
	"mount_tmpfs": func() string { return outcome(unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "")) },
	"procs": func() string {
		ents, _ := os.ReadDir("/proc")
		var pids []string
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, e.Name())
			}
		}
		return strings.Join(pids, ",")
	},
	"host_tcp": func() string {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+os.Getenv("PALISADE_T_HOSTPORT"), time.Second)
		if err == nil {
			c.Close()
		}
		return outcome(err)
	},
	"host_unix": func() string {
		c, err := net.DialTimeout("unix", os.Getenv("PALISADE_T_HOSTSOCK"), time.Second)
		if err == nil {
			c.Close()
		}
		return outcome(err)
	},
	"fds": func() string {
		ents, _ := os.ReadDir("/proc/self/fd")
		var fds []string
		for _, e := range ents {
			target, _ := os.Readlink("/proc/self/fd/" + e.Name())
			fds = append(fds, e.Name()+"="+target)
		}
		return strings.Join(fds, ",")
	},
	"env_secret": func() string {
		for _, kv := range os.Environ() {
			if strings.Contains(kv, "s3cr3t-palisade") {
				return "leaked: " + kv
			}
		}
		return "absent"
	},
	"hostname":    func() string { h, _ := os.Hostname(); return h },
	"signal_init": func() string { return outcome(unix.Kill(1, unix.SIGKILL)) },
	"interfaces": func() string {
		ifs, _ := net.Interfaces()
		var n []string
		for _, i := range ifs {
			n = append(n, i.Name)
		}
		return strings.Join(n, ",")
	},
	// The cgroup paths the command sees: "/" for every hierarchy inside
	// the sandbox's cgroup namespace; the supervisor's namespace shows
	// the host's paths (/palisade/NAME).
	"cgroup_paths": func() string {
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return err.Error()
		}
		var seen []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if p := l[strings.LastIndexByte(l, ':')+1:]; !slices.Contains(seen, p) {
				seen = append(seen, p)
			}
		}
		return strings.Join(seen, ",")
	},
	"ctty": func() string {
		fd, err := unix.Open("/dev/tty", unix.O_RDWR, 0)
		if err == nil {
			unix.Close(fd)
		}
		return outcome(err)
	},
}

func openWrite(p string) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err == nil {
		f.Close()
	}
	return err
}

// helpers are other roles of the test binary inside the sandbox.
var helpers = map[string]func(args []string) int{
	// euid prints the effective uid (run as a setuid-root copy).
	"euid": func([]string) int { fmt.Println(os.Geteuid()); return 0 },
	// forkbomb tries to start up to N sleeping children and prints how
	// many started; it kills them before exiting.
	"forkbomb": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		var started []*exec.Cmd
		for i := 0; i < n; i++ {
			c := exec.Command("/bin/sleep", "10")
			if err := c.Start(); err != nil {
				continue
			}
			started = append(started, c)
		}
		fmt.Println(len(started))
		for _, c := range started {
			c.Process.Kill()
			c.Wait()
		}
		return 0
	},
	// eatmem touches N MiB.
	"eatmem": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		var keep [][]byte
		for i := 0; i < n; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				if j%4096 == 0 {
					b[j] = 1
				}
			}
			keep = append(keep, b)
		}
		fmt.Println(len(keep))
		return 0
	},
	// trap exits 42 on SIGTERM after saying it is ready.
	"trap": func([]string) int {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, unix.SIGTERM)
		fmt.Println("ready")
		select {
		case <-ch:
			return 42
		case <-time.After(20 * time.Second):
			return 1
		}
	},
	"selfkill": func([]string) int { unix.Kill(os.Getpid(), unix.SIGTERM); time.Sleep(5 * time.Second); return 1 },
}

func init() {
	attacks["storage"] = func() string {
		var st unix.Statfs_t
		if err := unix.Statfs("/tmp/mac-test-storage", &st); err != nil {
			return outcome(err)
		}
		fi, _ := os.Stat("/tmp/mac-test-storage")
		err := os.WriteFile("/tmp/mac-test-storage/probe", []byte("x"), 0o600)
		return fmt.Sprintf("tmpfs=%v mode=%v size=%d write=%s", st.Type == unix.TMPFS_MAGIC, fi.Mode(), st.Blocks*uint64(st.Bsize), outcome(err))
	}
	attacks["env"] = func() string {
		return strings.Join([]string{os.Getenv("MAC_TEST_JOBS"), os.Getenv("MAC_TEST_PG_DATADIR"), os.Getenv("TMPDIR")}, "|")
	}
	attacks["isatty"] = func() string {
		_, err := unix.IoctlGetTermios(0, unix.TCGETS)
		return outcome(err)
	}
}
