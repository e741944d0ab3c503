//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/bpf"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// fixture is one sandbox test environment: a read-only directory outside
// /tmp holding a copy of the test binary (the attacker), a workdir owned
// by the sandbox user, a state root and an events buffer.
type fixture struct {
	t        *testing.T
	viaExec  bool // attack runs the attacker by exec in a kept-alive sandbox
	roDir    string
	exe      string
	workdir  string
	stateDir string
	events   bytes.Buffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	testutil.RequireRoot(t)
	for _, f := range []string{"landlock", "seccomp", "ns:pid", "ns:net", "ns:mnt", "cgroup"} {
		testutil.RequireFeature(t, f)
	}
	f := &fixture{t: t}
	ro, err := os.MkdirTemp("/var/tmp", "palisade-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ro) })
	os.Chmod(ro, 0o755)
	f.roDir = ro
	f.exe = filepath.Join(ro, "attacker")
	copyFile(t, os.Args[0], f.exe, 0o755)
	// A setuid-root copy: under no_new_privs it must not raise the euid.
	suid := filepath.Join(ro, "suid")
	copyFile(t, os.Args[0], suid, 0o755)
	os.Chown(suid, 0, 0)
	os.Chmod(suid, 0o4755)
	// A file the sandbox user owns and may write by DAC: only Landlock
	// stops the write and the truncate.
	victim := filepath.Join(ro, "f")
	os.WriteFile(victim, []byte("keep me"), 0o666)
	os.Chown(victim, SandboxID, SandboxID)
	os.Chmod(victim, 0o666)

	f.workdir = t.TempDir()
	os.Chown(f.workdir, SandboxID, SandboxID)
	f.stateDir = filepath.Join(t.TempDir(), "state")
	return f
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) policy() PolicyInfo {
	return PolicyInfo{
		SHA256: strings.Repeat("ab", 32), Source: "flag", Path: "/test/policy.yaml",
		ReadOnly:       []string{"/usr", "/bin", "/lib", "/lib64", "/etc", f.roDir},
		ReadWrite:      []string{"/tmp"},
		IncludeWorkdir: true, HardRequirement: true, RunAsUser: "sandbox", RunAsGroup: "sandbox",
	}
}

func (f *fixture) options(args []string, env []string) Options {
	return Options{
		Kind: state.KindAdhoc, Args: args, Env: env, Workdir: f.workdir,
		StateRoot: f.stateDir, Policy: f.policy(), InitExe: f.exe,
		Events: NewOCSFEvents(ocsf.NewWriter(&f.events), "agent-test", "test", args),
	}
}

// run runs args in a fresh sandbox and returns stdout, stderr and result.
func (f *fixture) run(o Options) (string, string, Result) {
	f.t.Helper()
	var out, errb bytes.Buffer
	o.Stdout, o.Stderr = &out, &errb
	if o.Stdin == nil {
		o.Stdin = strings.NewReader("")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, o)
	if err != nil {
		f.t.Fatalf("Run: %v\nstderr: %s", err, errb.String())
	}
	if ev, ok := o.Events.(*OCSFEvents); ok && ev.Lost > 0 {
		f.t.Errorf("%d events were refused by the emitter", ev.Lost)
	}
	return out.String(), errb.String(), res
}

// bothPaths runs a confinement test twice: against a command that is a
// sandbox's main process (run) and against one exec'd into a running
// sandbox made from the same options. Both must be confined alike.
func bothPaths(t *testing.T, test func(t *testing.T, f *fixture)) {
	for _, path := range []string{"run", "exec"} {
		t.Run(path, func(t *testing.T) {
			f := newFixture(t)
			f.viaExec = path == "exec"
			test(t, f)
		})
	}
}

// exec creates a kept-alive sandbox from o (without its command), execs
// o's command into it directly (no login shell), and tears it down.
func (f *fixture) exec(o Options) (string, string, Result) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := o.Args
	o.Args, o.KeepAlive = nil, true
	// The sandbox's own stdio (its init's) and the exec's are separate
	// buffers: both are written concurrently.
	var out, errb, initOut bytes.Buffer
	o.Stdin, o.Stdout, o.Stderr = strings.NewReader(""), &initOut, &initOut
	s, err := Create(ctx, o)
	defer s.Destroy()
	if err != nil {
		f.t.Fatalf("Create: %v\nstderr: %s", err, initOut.String())
	}
	if err := s.Start(ctx); err != nil {
		f.t.Fatalf("Start: %v\nstderr: %s", err, initOut.String())
	}
	res, err := Exec(ctx, ExecOptions{StateRoot: o.StateRoot, Name: s.Name(), Args: args, NoLoginShell: true,
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	if err != nil {
		f.t.Fatalf("Exec: %v\nstderr: %s", err, errb.String())
	}
	return out.String(), errb.String(), res
}

func (f *fixture) attack(extraEnv []string, names ...string) map[string]string {
	f.t.Helper()
	env, err := BuildEnv(EnvInput{Host: os.Environ(), Workdir: f.workdir, Name: "t", Passthrough: nil})
	if err != nil {
		f.t.Fatal(err)
	}
	env = append(env, "PALISADE_T_RO="+f.roDir)
	env = append(env, extraEnv...)
	o := f.options(append([]string{f.exe, "attack"}, names...), env)
	var out, errs string
	var res Result
	if f.viaExec {
		out, errs, res = f.exec(o)
	} else {
		out, errs, res = f.run(o)
	}
	if res.ExitCode != 0 {
		f.t.Fatalf("attacker exited %d\nstdout: %s\nstderr: %s", res.ExitCode, out, errs)
	}
	got := map[string]string{}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		f.t.Fatalf("attacker output %q: %v (stderr %s)", out, err, errs)
	}
	return got
}

func (f *fixture) validateEvents() []map[string]any {
	f.t.Helper()
	var evs []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(f.events.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		ocsftest.Validate(f.t, line)
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			f.t.Fatalf("event is not JSON: %v: %s", err, line)
		}
		evs = append(evs, m)
	}
	return evs
}

func expect(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
}

func TestFilesystemAttacksDenied(t *testing.T) {
	bothPaths(t, func(t *testing.T, f *fixture) {
		got := f.attack(nil, "write_etc", "write_usr", "write_ro_dir", "read_root", "read_home", "read_var",
			"read_shadow", "read_etc", "truncate_ro", "openwrite_ro", "write_workdir", "write_tmp",
			"symlink_read", "symlink_write_etc", "hardlink_ro", "mknod_char", "mknod_block",
			"proc_sys", "sys_write", "block_device", "dev_create", "mount_tmpfs",
			"procmem_sibling", "procmem_self")
		expect(t, got, map[string]string{
			"write_etc": "EACCES", "write_usr": "EACCES", "write_ro_dir": "EACCES",
			"read_root": "EACCES", "read_home": "EACCES", "read_var": "EACCES",
			"read_shadow": "EACCES", "read_etc": "ok",
			"truncate_ro": "EACCES", "openwrite_ro": "EACCES",
			"write_workdir": "ok", "write_tmp": "ok",
			"symlink_read": "EACCES", "symlink_write_etc": "EACCES", "hardlink_ro": "EXDEV",
			"mknod_char": "EPERM", "mknod_block": "EPERM",
			"proc_sys": "EROFS", "sys_write": "EROFS", "block_device": "ENOENT", "dev_create": "EROFS",
			"mount_tmpfs": "EPERM", "procmem_sibling": "EACCES", "procmem_self": "EACCES",
		})
		if b, _ := os.ReadFile(filepath.Join(f.roDir, "f")); string(b) != "keep me" {
			t.Fatalf("read-only file changed: %q", b)
		}
		if _, err := os.Stat(filepath.Join(f.workdir, "wd-file")); err != nil {
			t.Fatalf("workdir write did not reach the host: %v", err)
		}
	})
}

func TestPrivilegesDropped(t *testing.T) {
	bothPaths(t, func(t *testing.T, f *fixture) {
		got := f.attack(nil, "status", "setuid0", "setgid0", "suid_bin", "hostname", "signal_init")
		want := "Uid: 10001 10001 10001 10001|Gid: 10001 10001 10001 10001|Groups:|CapInh: 0000000000000000|CapPrm: 0000000000000000|CapEff: 0000000000000000|CapBnd: 0000000000000000|CapAmb: 0000000000000000|NoNewPrivs: 1|Seccomp: 2"
		if got["status"] != want {
			t.Errorf("status:\n got %s\nwant %s", got["status"], want)
		}
		expect(t, got, map[string]string{"setuid0": "EPERM", "setgid0": "EPERM", "suid_bin": "10001", "signal_init": "EPERM"})
		if !strings.HasPrefix(got["hostname"], "sbx-") {
			t.Errorf("hostname %q is not the sandbox name", got["hostname"])
		}
	})
}

// What the agent sees for each syscall attack: EPERM (ENOSYS for clone3,
// so that libcs fall back to clone). For the calls the kernel also refuses
// without capabilities this proves only the end result;
// TestSyscallAttacksDeniedByTheFilter proves the filter gave it.
func TestSyscallAttacksDenied(t *testing.T) {
	bothPaths(t, func(t *testing.T, f *fixture) {
		got := f.attack(nil, "unshare_user", "unshare_net", "unshare_mount", "clone_newuser", "clone3",
			"ptrace_init", "ptrace_sibling", "bpf", "io_uring", "keyctl", "tiocsti_hibits",
			"mptcp", "raw_socket", "packet_socket", "packet_hibits")
		expect(t, got, map[string]string{
			"unshare_user": "EPERM", "unshare_net": "EPERM", "unshare_mount": "EPERM", "clone_newuser": "EPERM",
			"clone3": "ENOSYS", "ptrace_init": "EPERM", "ptrace_sibling": "EPERM", "bpf": "EPERM",
			"io_uring": "EPERM", "keyctl": "EPERM", "tiocsti_hibits": "EPERM", "mptcp": "EPERM",
			"raw_socket": "EPERM", "packet_socket": "EPERM", "packet_hibits": "EPERM",
		})
	})
}

// The sandbox's syscall denials are the filter's answer, not the
// kernel's: without capabilities the kernel itself refuses bpf, raw and
// packet sockets, ptrace of the init and namespace creation with EPERM, so
// TestSyscallAttacksDenied alone would pass without seccomp. Here the
// filter's EPERM returns are rewritten to an errno no kernel path returns;
// every denied attack must come back with that marker.
func TestSyscallAttacksDeniedByTheFilter(t *testing.T) {
	bothPaths(t, func(t *testing.T, f *fixture) {
		const marker = 4000
		rewriteFilterForTest = func(prog []bpf.RawInstruction) []bpf.RawInstruction {
			const retK = 0x06 // BPF_RET | BPF_K
			out := slices.Clone(prog)
			n := 0
			for i, ins := range out {
				if ins.Op == retK && ins.K == 0x00050000|1 { // SECCOMP_RET_ERRNO | EPERM
					out[i].K = 0x00050000 | marker
					n++
				}
			}
			if n == 0 {
				t.Error("the compiled filter has no errno(EPERM) return to rewrite")
			}
			return out
		}
		t.Cleanup(func() { rewriteFilterForTest = nil })
		attacks := []string{"unshare_user", "unshare_net", "unshare_mount", "clone_newuser",
			"ptrace_init", "ptrace_sibling", "bpf", "io_uring", "keyctl", "tiocsti_hibits",
			"mptcp", "raw_socket", "packet_socket", "packet_hibits"}
		got := f.attack(nil, attacks...)
		want := map[string]string{}
		for _, a := range attacks {
			want[a] = fmt.Sprintf("errno %d", marker)
		}
		expect(t, got, want)
	})
}

func TestIsolationFromHost(t *testing.T) {
	bothPaths(t, func(t *testing.T, f *fixture) {
		// A host loopback service and a host unix socket under /run.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		sockDir, err := os.MkdirTemp("/run", "palisade-test-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(sockDir)
		os.Chmod(sockDir, 0o777)
		sock := filepath.Join(sockDir, "host.sock")
		ul, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		os.Chmod(sock, 0o777)
		// A secret in the supervisor's environment and an fd it leaks
		// without close-on-exec.
		t.Setenv("PALISADE_TEST_SECRET", "s3cr3t-palisade")
		leak, err := syscall.Open("/etc/hostname", syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(leak)

		_, port, _ := net.SplitHostPort(ln.Addr().String())
		got := f.attack([]string{"PALISADE_T_HOSTPORT=" + port, "PALISADE_T_HOSTSOCK=" + sock},
			"fds", "procs", "host_tcp", "host_unix", "env_secret", "interfaces", "ctty", "cgroup_paths")
		expect(t, got, map[string]string{
			"host_tcp": "ECONNREFUSED", "host_unix": "ENOENT", "env_secret": "absent",
			"interfaces": "lo", "ctty": "ENXIO", "cgroup_paths": "/",
		})
		// Only the init and the attacker (and its threads' process) are visible.
		pids := strings.Split(got["procs"], ",")
		if len(pids) > 3 || pids[0] != "1" {
			t.Errorf("visible pids %v: want the sandbox's own only", pids)
		}
		// fds (checked first, before the attacker opens sockets): 0, 1, 2 and
		// the /proc/self/fd directory being read; never the leaked one.
		fds := strings.Split(got["fds"], ",")
		if len(fds) != 4 || !strings.HasPrefix(fds[3], "3=") || strings.Contains(got["fds"], "hostname") {
			t.Errorf("open fds in the sandbox: %v, want 0,1,2 and the directory being read", fds)
		}
		// Reverse check: the fixture's secret is in this process's env, so
		// "absent" is a real observation.
		if os.Getenv("PALISADE_TEST_SECRET") == "" {
			t.Fatal("secret not set in the supervisor's environment")
		}
	})
}

func TestExitStatusAndEvents(t *testing.T) {
	f := newFixture(t)
	env, _ := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t"})
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{f.exe, "exit", "0"}, 0},
		{[]string{f.exe, "exit", "3"}, 3},
		{[]string{f.exe, "selfkill"}, 128 + 15},
		{[]string{"/nonexistent/palisade-cmd"}, ExitNotFound},
		{[]string{"no-such-command-palisade"}, ExitNotFound},
		{[]string{filepath.Join(f.roDir, "f")}, ExitNotExecutable},
	} {
		_, errs, res := f.run(f.options(c.args, env))
		if res.ExitCode != c.want {
			t.Errorf("%v: exit %d, want %d (stderr %s)", c.args, res.ExitCode, c.want, errs)
		}
	}
	evs := f.validateEvents()
	classes := map[float64]int{}
	for _, e := range evs {
		classes[e["class_uid"].(float64)]++
	}
	// Per run: policy load + confinement (5019), launch (+ terminate) (1007).
	if classes[5019] < 6 || classes[1007] < 6 {
		t.Fatalf("event classes %v", classes)
	}
	var sawExit3 bool
	for _, e := range evs {
		if e["class_uid"].(float64) == 1007 && e["activity_id"].(float64) == 2 && e["exit_code"] == float64(3) {
			sawExit3 = true
		}
	}
	if !sawExit3 {
		t.Error("no Process Activity Terminate with exit_code 3")
	}
	// The three launches that could not happen are recorded as failed
	// launches naming the exec stage.
	var failed int
	for _, e := range evs {
		if e["class_uid"].(float64) == 1007 && e["activity_id"].(float64) == 1 && e["status"] == "Failure" &&
			strings.HasPrefix(e["status_detail"].(string), "exec: ") {
			failed++
		}
	}
	if failed != 3 {
		t.Errorf("%d failed-launch events, want 3", failed)
	}
	// Teardown: no state left behind.
	if ents, _ := os.ReadDir(f.stateDir); len(ents) != 0 {
		t.Errorf("state left after runs: %v", ents)
	}
}

func TestResourceLimits(t *testing.T) {
	f := newFixture(t)
	env, _ := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t"})
	o := f.options([]string{f.exe, "forkbomb", "500"}, env)
	o.PidsLimit = 40
	start := time.Now()
	stop := make(chan struct{})
	worst := make(chan time.Duration, 1)
	go func() {
		// The host stays responsive: a tiny host-side operation keeps
		// completing quickly while the bomb runs.
		var max time.Duration
		for {
			select {
			case <-stop:
				worst <- max
				return
			default:
			}
			t0 := time.Now()
			os.ReadFile("/proc/self/stat")
			if d := time.Since(t0); d > max {
				max = d
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	out, errs, res := f.run(o)
	close(stop)
	if res.ExitCode != 0 {
		t.Fatalf("forkbomb exit %d: %s", res.ExitCode, errs)
	}
	var n int
	if _, err := fmt.Sscan(out, &n); err != nil || n >= 40 || n < 5 {
		t.Fatalf("forkbomb started %q children with a pids limit of 40", out)
	}
	if w := <-worst; w > time.Second {
		t.Errorf("host stalled for %v during the fork bomb", w)
	}
	t.Logf("fork bomb: %d of 500 children under pids=40, %v", n, time.Since(start))

	o = f.options([]string{f.exe, "eatmem", "512"}, env)
	o.Memory = 64 << 20
	_, _, res = f.run(o)
	if res.ExitCode != 128+9 {
		t.Fatalf("allocating 512 MiB under a 64 MiB limit ended with %d, want 137 (OOM kill)", res.ExitCode)
	}
}

// An exec given one writer for stdout and stderr gets one stream, in the
// order the command wrote it (as os/exec does), and nothing is written to
// it after Exec returns.
func TestExecSharedWriterKeepsOrder(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env, err := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	_, exec := f.keptAlive(ctx, f.options(nil, env))
	out, res, err := exec("/bin/sh", "-c", `i=0; while [ $i -lt 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done`)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	var want strings.Builder
	for i := range 300 {
		fmt.Fprintf(&want, "out%d\nerr%d\n", i, i)
	}
	if out != want.String() {
		t.Fatalf("stdout and stderr into one writer came out of order or incomplete (%d bytes, want %d)", len(out), want.Len())
	}
}
