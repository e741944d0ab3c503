//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The init's after-the-fact check refuses, and kills, a command that is
// not confined: here an ordinary child of the (root) test process.
func TestVerifyConfinedKillsAnUnconfinedCommand(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	err := verifyConfined(cmd.Process.Pid, SandboxID, SandboxID, true, cgroupNS{})
	if err == nil || !strings.Contains(err.Error(), "uid[0]=0") || !strings.Contains(err.Error(), "CapEff") || !strings.Contains(err.Error(), "NoNewPrivs") {
		t.Fatalf("verifyConfined = %v, want a refusal naming uid, capabilities and no_new_privs", err)
	}
	select {
	case werr := <-done:
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("command ended with %v, want SIGKILL", werr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("unconfined command still running after the refusal")
	}
}

// The cgroup namespace check refuses a process in the namespace the init
// was started in, and passes one whose namespaces are gone (exited and
// reaped here; a command in do_exit has released them too): a command
// that exits at once must not fail its start.
func TestCgroupNSCheck(t *testing.T) {
	testutil.RequireFeature(t, "ns:cgroup")
	own, err := cgroupNSOf("self")
	if err != nil {
		t.Fatal(err)
	}
	if err := (cgroupNS{outer: own}).check(os.Getpid()); err == nil {
		t.Fatal("check passed a process in the outer namespace")
	}
	if err := (cgroupNS{outer: own + 1}).check(os.Getpid()); err != nil {
		t.Fatalf("check refused a process outside the outer namespace: %v", err)
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := (cgroupNS{outer: own}).check(cmd.Process.Pid); err != nil {
		t.Fatalf("check refused a process that is gone: %v", err)
	}
}

// weakenInitEnv names the drop step the init copy of the test binary
// skips (weakenForTest).
const weakenInitEnv = "PALISADE_TEST_WEAKEN_DROP"

// Through the real init path, a drop that missed a step is noticed after
// the fact: the init's verifyConfined kills the command before it can act
// and the start fails with 125. The init is this test binary started
// through a wrapper that sets weakenInitEnv (the supervisor gives the init
// a fixed environment). Deleting the init's verifyConfined call fails
// this test: the command would run, unconfined, and exit 0. The same
// holds for a command exec'd into a running sandbox. "cgroupns" is a
// spawner that did not unshare the sandbox's cgroup namespace: before
// the spawner unshared it itself, the init's main goroutine did, on
// whatever thread it ran, and about one command in thirty was forked
// from a thread that was still in the supervisor's namespace.
func TestInitKillsACommandTheDropMissed(t *testing.T) {
	f := newFixture(t)
	for _, step := range []string{"seccomp", "identity", "cgroupns"} {
		t.Run(step, func(t *testing.T) {
			wrapper := filepath.Join(t.TempDir(), "init-weaken-"+step)
			script := "#!/bin/sh\n" + weakenInitEnv + "=" + step + " exec " + f.exe + " \"$@\"\n"
			if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			marker := "ran-" + step
			env, err := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t"})
			if err != nil {
				t.Fatal(err)
			}
			// Were the command not killed, it would leave the marker in
			// the working directory (the host's, bind-mounted).
			o := f.options([]string{"/bin/sh", "-c", "sleep 1; echo unconfined > " + marker}, env)
			o.InitExe = wrapper
			var out, errb bytes.Buffer
			o.Stdout, o.Stderr, o.Stdin = &out, &errb, strings.NewReader("")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := Run(ctx, o)
			if err == nil || res.ExitCode != ExitSandboxFailed {
				t.Fatalf("Run = %+v, %v; want exit %d (stderr %s)", res, err, ExitSandboxFailed, errb.String())
			}
			if !strings.Contains(err.Error(), "verify") {
				t.Errorf("error %q does not say the after-the-fact check refused", err)
			}
			// The same command exec'd into a kept-alive sandbox whose
			// init has the same weakness is refused the same way.
			args := o.Args
			o.Args, o.KeepAlive = nil, true
			var initOut bytes.Buffer
			o.Stdout, o.Stderr = &initOut, &initOut
			s, err := Create(ctx, o)
			defer s.Destroy()
			if err == nil {
				err = s.Start(ctx)
			}
			if err != nil {
				t.Fatalf("kept-alive sandbox: %v (stderr %s)", err, initOut.String())
			}
			var execOut bytes.Buffer
			res, err = Exec(ctx, ExecOptions{StateRoot: o.StateRoot, Name: s.Name(), Args: args, NoLoginShell: true,
				Stdin: strings.NewReader(""), Stdout: &execOut, Stderr: &execOut})
			if err == nil || res.ExitCode != ExitSandboxFailed || !strings.Contains(err.Error(), "verify") {
				t.Errorf("Exec = %+v, %v; want exit %d from the after-the-fact check", res, err, ExitSandboxFailed)
			}
			time.Sleep(1500 * time.Millisecond)
			if _, err := os.Stat(filepath.Join(f.workdir, marker)); err == nil {
				t.Fatalf("the weakened command ran to completion")
			}
		})
	}
}
