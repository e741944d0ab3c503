//go:build linux

package probe

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// checkFunc runs one check and reports what it saw and whether that is
// what the catalogue expects.
type checkFunc func(t Targets) (observed string, ok bool)

// Run runs every check of the catalogue in this process (which must be
// inside the sandbox under test) and returns the results in catalogue
// order. Checks that would change the process irreversibly or kill it run
// in a child copy of this binary (HelperCommand) or on a discarded
// thread. As root nothing is attempted and every check fails: the
// sandbox's command is never root, and the checks must not touch a host.
func Run(t Targets) []Result {
	if t.Writable == "" {
		t.Writable, _ = os.Getwd()
	}
	root := os.Geteuid() == 0
	var out []Result
	for _, s := range Catalog() {
		f := checks[s.Name]
		r := Result{Check: s.Name, Group: s.Group, Expected: s.Expected}
		if root {
			// A sandbox never runs its command as root; as root the
			// checks would prove nothing and could touch the host.
			r.Observed = "running as root (euid 0): check not attempted"
		} else if f == nil {
			r.Observed = "no implementation in this build"
		} else {
			r.Observed, r.OK = f(t)
		}
		out = append(out, r)
	}
	return out
}

// errName names an error by its errno when it has one.
func errName(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func sysName(errno syscall.Errno) string {
	if errno == 0 {
		return "ok"
	}
	return unix.ErrnoName(errno)
}

// wantErrno checks that a raw syscall failed with exactly want.
func wantErrno(errno syscall.Errno, want syscall.Errno) (string, bool) {
	return sysName(errno), errno == want
}

// socketCheck tries to create a socket; it must fail with EPERM.
func socketCheck(domain, typ, proto int) checkFunc {
	return func(Targets) (string, bool) {
		fd, _, errno := unix.RawSyscall(unix.SYS_SOCKET, uintptr(domain), uintptr(typ), uintptr(proto))
		if errno == 0 {
			unix.Close(int(fd))
		}
		return wantErrno(errno, unix.EPERM)
	}
}

// statusFields reads the named lines of /proc/self/status.
func statusFields() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return m, nil
}

func statusCheck(f func(m map[string]string) (string, bool)) checkFunc {
	return func(Targets) (string, bool) {
		m, err := statusFields()
		if err != nil {
			return "read /proc/self/status: " + errName(err), false
		}
		return f(m)
	}
}

func tryCreate(dir string) error {
	p := filepath.Join(dir, fmt.Sprintf(".palisade-probe-%d", os.Getpid()))
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		f.Close()
		os.Remove(p)
	}
	return err
}

var checks = map[string]checkFunc{
	"write_outside_allowlist": func(t Targets) (string, bool) {
		dir := t.WritableOutside
		if dir == "" {
			if len(t.Protected) == 0 {
				return "no directory outside the policy to try", false
			}
			dir = t.Protected[0]
		}
		err := tryCreate(dir)
		return dir + ": " + errName(err), errors.Is(err, unix.EACCES)
	},
	"write_readonly_path": func(t Targets) (string, bool) {
		if t.ReadOnly == "" {
			return "the policy grants no read-only directory to try", false
		}
		err := tryCreate(t.ReadOnly)
		return t.ReadOnly + ": " + errName(err), errors.Is(err, unix.EACCES)
	},
	"read_protected_path": func(t Targets) (string, bool) {
		if len(t.Protected) == 0 {
			return "no directory outside the policy on this host to try", false
		}
		var obs []string
		ok := true
		for _, p := range t.Protected {
			_, err := os.ReadDir(p)
			obs = append(obs, p+": "+errName(err))
			ok = ok && errors.Is(err, unix.EACCES)
		}
		return strings.Join(obs, ", "), ok
	},
	"symlink_escape": func(t Targets) (string, bool) {
		if len(t.Protected) == 0 {
			return "no directory outside the policy on this host to try", false
		}
		link := filepath.Join(t.Writable, fmt.Sprintf(".palisade-probe-link-%d", os.Getpid()))
		os.Remove(link)
		if err := os.Symlink(t.Protected[0], link); err != nil {
			return "symlink in " + t.Writable + ": " + errName(err), false
		}
		defer os.Remove(link)
		_, err := os.ReadDir(link)
		return link + " -> " + t.Protected[0] + ": " + errName(err), errors.Is(err, unix.EACCES)
	},
	"proc_sys_readonly": func(Targets) (string, bool) {
		// Opened for writing, never written: run unconfined by mistake,
		// the probe must not change the host.
		fd, err := unix.Open("/proc/sys/kernel/hostname", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			return "opened for writing", false
		}
		return errName(err), errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES)
	},
	"no_block_devices": func(Targets) (string, bool) {
		var blocks []string
		filepath.WalkDir("/dev", func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type()&os.ModeDevice != 0 && d.Type()&os.ModeCharDevice == 0 {
				blocks = append(blocks, p)
			}
			return nil
		})
		dev := filepath.Join(t0(), fmt.Sprintf(".palisade-probe-blk-%d", os.Getpid()))
		err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0)))
		if err == nil {
			os.Remove(dev)
		}
		obs := fmt.Sprintf("block devices in /dev: %d; mknod: %s", len(blocks), errName(err))
		if len(blocks) > 0 {
			obs += " (" + strings.Join(blocks, ",") + ")"
		}
		return obs, len(blocks) == 0 && errors.Is(err, unix.EPERM)
	},
	"workdir_writable": func(t Targets) (string, bool) {
		e1 := tryCreate(t.Writable)
		e2 := tryCreate("/tmp")
		return fmt.Sprintf("%s: %s, /tmp: %s", t.Writable, errName(e1), errName(e2)), e1 == nil && e2 == nil
	},

	"direct_tcp_connect":      directConnect("tcp4", DirectAddr),
	"ipv6_connect":            directConnect("tcp6", V6Addr),
	"proxy_connect_denied":    proxyDenied("CONNECT", DeniedHost+":443"),
	"proxy_forward_denied":    proxyDenied("GET", "http://"+DeniedHost+"/"),
	"proxy_literal_ip_denied": proxyDenied("CONNECT", DeniedIP+":443"),
	"external_dns": func(Targets) (string, bool) {
		query := []byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01")
		obs, answered := udpExchange(DNSAddr, query)
		return obs, !answered
	},
	"udp_egress": func(Targets) (string, bool) {
		obs, answered := udpExchange(UDPAddr, []byte("palisade-probe"))
		// A datagram the fence rejects errors on send or on the next
		// receive; one with no route errors on send. Silence is a pass
		// only when no route exists (nothing was sent).
		return obs, !answered && !strings.HasPrefix(obs, "sent, no reply")
	},

	"uid_not_root": statusCheck(func(m map[string]string) (string, bool) {
		f := strings.Fields(m["Uid"])
		ok := len(f) == 4
		for _, v := range f {
			ok = ok && v != "0"
		}
		return "Uid: " + m["Uid"], ok
	}),
	"gid_not_root": statusCheck(func(m map[string]string) (string, bool) {
		f := strings.Fields(m["Gid"])
		ok := len(f) == 4 && m["Groups"] == ""
		for _, v := range f {
			ok = ok && v != "0"
		}
		return fmt.Sprintf("Gid: %s; Groups: %q", m["Gid"], m["Groups"]), ok
	}),
	"capabilities_empty": statusCheck(func(m map[string]string) (string, bool) {
		var obs []string
		ok := true
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			obs = append(obs, k+": "+m[k])
			ok = ok && m[k] == "0000000000000000"
		}
		return strings.Join(obs, ", "), ok
	}),
	"no_new_privs": statusCheck(func(m map[string]string) (string, bool) {
		return "NoNewPrivs: " + m["NoNewPrivs"], m["NoNewPrivs"] == "1"
	}),
	"setuid_root_denied": func(Targets) (string, bool) {
		_, _, errno := unix.RawSyscall(unix.SYS_SETUID, 0, 0, 0)
		return wantErrno(errno, unix.EPERM)
	},
	"signal_init_denied": func(Targets) (string, bool) {
		err := unix.Kill(1, 0)
		return errName(err), errors.Is(err, unix.EPERM)
	},

	"seccomp_filter_mode": statusCheck(func(m map[string]string) (string, bool) {
		return "Seccomp: " + m["Seccomp"], m["Seccomp"] == "2"
	}),
	"process_vm_readv_denied": func(Targets) (string, bool) {
		var src, dst [8]byte
		local := unix.Iovec{Base: &dst[0], Len: 8}
		remote := unix.Iovec{Base: &src[0], Len: 8}
		_, _, errno := unix.Syscall6(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()),
			uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
		return wantErrno(errno, unix.EPERM)
	},
	"keyctl_denied": func(Targets) (string, bool) {
		_, _, errno := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(2), 0) // KEY_SPEC_SESSION_KEYRING (-3)
		return wantErrno(errno, unix.EPERM)
	},
	"io_uring_denied": func(Targets) (string, bool) {
		fd, _, errno := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)
		if errno == 0 {
			unix.Close(int(fd))
		}
		return wantErrno(errno, unix.EPERM)
	},
	"tiocsti_high_bits_denied": func(Targets) (string, bool) {
		// On /dev/null, never a terminal: without the filter this is
		// ENOTTY, and nothing is ever injected into a real terminal.
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "open /dev/null: " + errName(err), false
		}
		defer unix.Close(fd)
		c := []byte("x")
		_, _, errno := unix.RawSyscall(unix.SYS_IOCTL, uintptr(fd), uintptr(uint64(0xdeadbeef00000000)|unix.TIOCSTI), uintptr(unsafe.Pointer(&c[0])))
		return wantErrno(errno, unix.EPERM)
	},

	"unshare_user": onThrowawayThread(func(Targets) (string, bool) {
		err := unix.Unshare(unix.CLONE_NEWUSER)
		return errName(err), errors.Is(err, unix.EPERM)
	}),
	"clone_newuser": func(Targets) (string, bool) {
		return rawClone(unix.CLONE_NEWUSER)
	},
	"clone3_enosys": func(Targets) (string, bool) {
		var args [11]uint64
		args[4] = uint64(unix.SIGCHLD) // exit_signal
		pid, _, errno := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args[0])), unsafe.Sizeof(args), 0)
		reapForked(pid, errno)
		return wantErrno(errno, unix.ENOSYS)
	},
	"unshare_mount": onThrowawayThread(func(Targets) (string, bool) {
		err := unix.Unshare(unix.CLONE_NEWNS)
		return errName(err), errors.Is(err, unix.EPERM)
	}),
	"unshare_net": onThrowawayThread(func(Targets) (string, bool) {
		err := unix.Unshare(unix.CLONE_NEWNET)
		return errName(err), errors.Is(err, unix.EPERM)
	}),
	"setns_denied": onThrowawayThread(func(Targets) (string, bool) {
		fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "open /proc/self/ns/net: " + errName(err), false
		}
		defer unix.Close(fd)
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		return errName(err), errors.Is(err, unix.EPERM)
	}),

	"af_packet":      socketCheck(unix.AF_PACKET, unix.SOCK_RAW, 0),
	"sock_raw_inet":  socketCheck(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP),
	"sock_raw_inet6": socketCheck(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6),
	"mptcp":          socketCheck(unix.AF_INET, unix.SOCK_STREAM, 262), // IPPROTO_MPTCP
	"af_alg":         socketCheck(unix.AF_ALG, unix.SOCK_SEQPACKET, 0),
	"af_vsock":       socketCheck(unix.AF_VSOCK, unix.SOCK_STREAM, 0),
	"netlink_audit":  socketCheck(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT),
}

// onThrowawayThread runs f on a locked OS thread that is discarded
// afterwards: a namespace change that succeeds (the probe run unconfined
// by mistake) dies with the thread instead of leaking into the process.
func onThrowawayThread(f checkFunc) checkFunc {
	return func(t Targets) (string, bool) {
		type res struct {
			obs string
			ok  bool
		}
		ch := make(chan res, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			o, ok := f(t)
			ch <- res{o, ok}
		}()
		r := <-ch
		return r.obs, r.ok
	}
}

// t0 is the sandbox's private /tmp.
func t0() string { return "/tmp" }

// rawClone tries clone(flags) without CLONE_VM; a child that exists exits
// at once.
func rawClone(flags int) (string, bool) {
	pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, uintptr(flags|int(unix.SIGCHLD)), 0, 0, 0, 0, 0)
	reapForked(pid, errno)
	return wantErrno(errno, unix.EPERM)
}

// reapForked handles a raw clone that succeeded: the child exits at once
// (it is a copy of a multi-threaded Go process and must run no Go code),
// the parent reaps it.
func reapForked(pid uintptr, errno syscall.Errno) {
	if errno != 0 {
		return
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	unix.Wait4(int(pid), &ws, 0, nil)
}

// refusal reports whether err is an immediate refusal of a connection.
func refusal(err error) bool {
	for _, e := range []syscall.Errno{unix.ECONNREFUSED, unix.ECONNRESET, unix.ENETUNREACH, unix.EHOSTUNREACH, unix.EPERM, unix.EACCES, unix.EADDRNOTAVAIL, unix.EAFNOSUPPORT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// directConnect connects around the proxy. With a fence the connection is
// redirected to the proxy's fence listener, which resets it: connect may
// succeed, but the first read must fail at once with no byte received.
func directConnect(network, addr string) checkFunc {
	return func(Targets) (string, bool) {
		start := time.Now()
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		if err != nil {
			return fmt.Sprintf("connect: %s after %d ms", errName(err), time.Since(start).Milliseconds()), refusal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		n, err := c.Read(make([]byte, 64))
		ms := time.Since(start).Milliseconds()
		if n > 0 {
			return fmt.Sprintf("connected and received %d bytes", n), false
		}
		return fmt.Sprintf("connected, then %s after %d ms", errName(err), ms), refusal(err) || errors.Is(err, io.EOF)
	}
}

// proxyURL is the sandbox's proxy, from the reserved environment.
func proxyURL() string {
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}

// onlyLoopback reports whether the network namespace has no interface
// but lo (then nothing can leave it, proxy or not).
func onlyLoopback() (bool, string) {
	ifs, err := net.Interfaces()
	if err != nil {
		return false, err.Error()
	}
	var names []string
	only := true
	for _, i := range ifs {
		names = append(names, i.Name)
		if i.Flags&net.FlagLoopback == 0 {
			only = false
		}
	}
	return only, strings.Join(names, ",")
}

// proxyDenied sends one request for a target outside any policy through
// the sandbox's proxy and expects 403 with the policy_denied JSON body.
func proxyDenied(method, target string) checkFunc {
	return func(Targets) (string, bool) {
		pu := proxyURL()
		if pu == "" {
			only, names := onlyLoopback()
			if only {
				return "no proxy and no route out (interfaces: " + names + ")", true
			}
			return "no HTTP_PROXY in the sandbox but interfaces " + names + " exist", false
		}
		u, err := url.Parse(pu)
		if err != nil || u.Host == "" {
			return fmt.Sprintf("HTTP_PROXY %q is not a URL", pu), false
		}
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			return "proxy " + u.Host + ": " + errName(err), false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		host := target
		if method != "CONNECT" {
			tu, _ := url.Parse(target)
			host = tu.Host
		}
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", method, target, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
		if err != nil {
			return "proxy answer: " + err.Error(), false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var d struct {
			Error  string `json:"error"`
			Reason string `json:"reason"`
		}
		jerr := json.Unmarshal(body, &d)
		obs := fmt.Sprintf("%d error=%q reason=%q", resp.StatusCode, d.Error, d.Reason)
		return obs, resp.StatusCode == http.StatusForbidden && jerr == nil && d.Error == "policy_denied"
	}
}

// udpExchange sends one datagram and waits 2 s for an answer. answered is
// true only when a reply arrived.
func udpExchange(addr string, payload []byte) (obs string, answered bool) {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return "dial: " + errName(err), false
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		return "send: " + errName(err), false
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(make([]byte, 512))
	if n > 0 {
		return fmt.Sprintf("answered with %d bytes", n), true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "sent, no reply in 2 s", false
	}
	return "receive: " + errName(err), false
}

// HelperCommand is the hidden first argument that makes confinement-probe
// a helper child for checks that must not run in the reporting process.
const HelperCommand = "__palisade_probe_helper"

// helperResult runs this binary again as the named helper and describes
// how it ended.
func helperResult(name string) (ws syscall.WaitStatus, obs string, err error) {
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	cmd := exec.Command(exe, HelperCommand, name)
	err = cmd.Run()
	if cmd.ProcessState == nil {
		return 0, "", err
	}
	ws = cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return ws, "killed by " + unix.SignalName(ws.Signal()), nil
	}
	return ws, fmt.Sprintf("exited %d", ws.ExitStatus()), nil
}

// RunHelper runs the named helper (the process's whole job) and returns
// its exit status.
func RunHelper(name string) int {
	h := helpers[name]
	if h == nil {
		fmt.Fprintf(os.Stderr, "confinement-probe: unknown helper %q\n", name)
		return 2
	}
	return h()
}

var helpers = map[string]func() int{}
