//go:build linux

package sandbox

import (
	"bufio"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/console"

	"github.com/palisade-sandbox/palisade/pkg/feature"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// missing simulates kernels without the named features through the
// preflight seam; every other probe is real.
func missing(names ...string) Prober {
	return func(n string) error {
		for _, m := range names {
			if n == m {
				return &feature.MissingError{Feature: n, MinKernel: "9.9", Reason: "simulated by test"}
			}
		}
		return feature.Check(n)
	}
}

func TestHardRequirementAbortsOnMissingFeature(t *testing.T) {
	f := newFixture(t)
	env, _ := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t"})
	for _, c := range []struct {
		name     string
		missing  string
		hard     bool
		required bool
		degraded bool
	}{
		{"landlock under hard_requirement", "landlock", true, false, false},
		{"landlock under MAC_OPENSHELL_REQUIRED", "landlock", false, true, false},
		{"seccomp without --allow-degraded", "seccomp", false, false, false},
		{"seccomp under hard_requirement even with --allow-degraded", "seccomp", true, false, true},
		{"pid namespace even with --allow-degraded", "ns:pid", false, false, true},
		{"cgroups", "cgroup", false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := f.options([]string{f.exe, "exit", "0"}, env)
			o.Policy.HardRequirement = c.hard
			o.Required = c.required
			o.AllowDegraded = c.degraded
			o.Probe = missing(c.missing)
			res, err := Run(context.Background(), o)
			if err == nil || res.ExitCode != ExitSandboxFailed {
				t.Fatalf("Run = %+v, %v; want exit 125", res, err)
			}
			if !strings.Contains(err.Error(), c.missing) || !strings.Contains(err.Error(), "9.9") {
				t.Fatalf("error %q does not name the feature and kernel", err)
			}
			if ents, _ := os.ReadDir(f.stateDir); len(ents) != 0 {
				t.Fatalf("a failed preflight left state: %v", ents)
			}
		})
	}
}

func TestDegradedRunsOnlyWithOptInAndSaysSo(t *testing.T) {
	f := newFixture(t)
	// best_effort without Landlock: runs, emits a Detection Finding.
	o := f.options([]string{f.exe, "attack", "status", "read_etc"}, []string{"PATH=/usr/bin:/bin"})
	o.Policy.HardRequirement = false
	o.Probe = missing("landlock")
	out, _, res := f.run(o)
	if res.ExitCode != 0 || !strings.Contains(out, "Seccomp: 2") {
		t.Fatalf("best_effort run: exit %d, %s", res.ExitCode, out)
	}
	// --allow-degraded without seccomp: runs, Seccomp 0, and a finding.
	o = f.options([]string{f.exe, "attack", "status"}, []string{"PATH=/usr/bin:/bin"})
	o.AllowDegraded = true
	o.Policy.HardRequirement = false
	o.Probe = missing("seccomp")
	out, _, res = f.run(o)
	if res.ExitCode != 0 || !strings.Contains(out, "Seccomp: 0") || !strings.Contains(out, "NoNewPrivs: 1") {
		t.Fatalf("allow-degraded run: exit %d, %s", res.ExitCode, out)
	}
	evs := f.validateEvents()
	var findings []string
	for _, e := range evs {
		if e["class_uid"].(float64) == 2004 {
			fi := e["finding_info"].(map[string]any)
			findings = append(findings, fi["title"].(string)+" / "+fi["desc"].(string))
		}
	}
	if len(findings) != 2 || !strings.Contains(findings[0], "landlock") || !strings.Contains(findings[0], "best_effort") ||
		!strings.Contains(findings[1], "seccomp") || !strings.Contains(findings[1], "--allow-degraded") {
		t.Fatalf("findings %q", findings)
	}
}

func TestBoundedTmpfsProfile(t *testing.T) {
	f := newFixture(t)
	env, err := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t", Profile: ProfileBoundedTmpfs})
	if err != nil {
		t.Fatal(err)
	}
	o := f.options([]string{f.exe, "attack", "storage", "env"}, env)
	o.Profile = ProfileBoundedTmpfs
	out, errs, res := f.run(o)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, errs)
	}
	want := `"storage":"tmpfs=true mode=dtrwxrwxrwx size=8589934592 write=ok"`
	if !strings.Contains(out, want) {
		t.Errorf("storage: %s, want %s", out, want)
	}
	if !strings.Contains(out, `"env":"8|/tmp/mac-test-storage/mac-test-pgdata|`+f.workdir+`/test-scratch"`) {
		t.Errorf("profile environment: %s", out)
	}
	o.Memory = 1 << 30
	if _, err := Run(context.Background(), o); err == nil {
		t.Fatal("--memory with bounded-tmpfs accepted")
	}
	o.Memory = 0
	o.Profile = "huge"
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "huge") {
		t.Fatalf("unknown profile: %v", err)
	}
}

func TestTTY(t *testing.T) {
	f := newFixture(t)
	env, _ := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t", TTY: true})
	o := f.options([]string{f.exe, "attack", "isatty", "ctty"}, env)
	o.TTY = true
	out, errs, res := f.run(o)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, errs)
	}
	if !strings.Contains(out, `"isatty":"ok"`) || !strings.Contains(out, `"ctty":"ok"`) {
		t.Fatalf("with --tty the command has no terminal: %s", out)
	}
	// Without --tty: pipes and no controlling terminal.
	o = f.options([]string{f.exe, "attack", "isatty", "ctty"}, env)
	out, _, _ = f.run(o)
	if !strings.Contains(out, `"isatty":"ENOTTY"`) || !strings.Contains(out, `"ctty":"ENXIO"`) {
		t.Fatalf("without --tty: %s", out)
	}
}

// With --tty the command starts with the caller's window size, and a
// window-size change of the caller's terminal reaches it.
func TestTTYWindowSize(t *testing.T) {
	f := newFixture(t)
	caller, slave := testutil.Pty(t)
	caller.Resize(console.WinSize{Height: 33, Width: 111})
	env, _ := BuildEnv(EnvInput{Workdir: f.workdir, Name: "t", TTY: true})
	o := f.options([]string{"/bin/sh", "-c", `stty size; trap 'stty size; exit 0' WINCH; echo ready; i=0; while [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; exit 3`}, env)
	o.TTY, o.Stdin, o.Stdout, o.Stderr = true, slave, slave, slave
	done := make(chan Result, 1)
	go func() {
		res, err := Run(context.Background(), o)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	out := bufio.NewReader(caller)
	var seen []string
	readUntil := func(want string) {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			line, err := out.ReadString('\n')
			seen = append(seen, strings.TrimSpace(line))
			if strings.Contains(line, want) {
				return
			}
			if err != nil {
				break
			}
		}
		t.Fatalf("no %q in %q", want, seen)
	}
	readUntil("33 111")
	readUntil("ready")
	caller.Resize(console.WinSize{Height: 44, Width: 122})
	syscall.Kill(os.Getpid(), syscall.SIGWINCH) // what the caller's terminal would send
	readUntil("44 122")
	select {
	case res := <-done:
		if res.ExitCode != 0 {
			t.Fatalf("exit %d after the resize, want 0 (trap ran)", res.ExitCode)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("sandbox did not end")
	}
	RestoreTerminals()
}
