//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/runtimetune"
)

// TestRuntimeTuning runs the binary and checks that it re-executed itself
// with runtimetune.Setting in GODEBUG (the same process: the pid it was
// started as answers on the ready pipe it inherited; under its own name)
// and that the setting
// does what it is there for: while the proxy idles, the runtime's monitor
// thread sleeps in nanosleep(2) polls instead of parking on a futex. An
// operator's own schedtrace setting is kept, and the monitor then parks
// as Go does by default.
func TestRuntimeTuning(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte("version: 1\nnetwork_policies: {}\n"), 0o600)
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 allowed.test\n"), 0o600)
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			base = append(base, kv)
		}
	}
	for _, tc := range []struct {
		name    string
		godebug string // "" : none set
		want    string // GODEBUG the running proxy has
		tuned   bool
	}{
		{"none set", "", runtimetune.Setting, true},
		{"other settings kept", "madvdontneed=1", "madvdontneed=1," + runtimetune.Setting, true},
		{"operator opts out", "schedtrace=0", "schedtrace=0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base
			if tc.godebug != "" {
				env = append(env[:len(env):len(env)], "GODEBUG="+tc.godebug)
			}
			p := startProxyEnv(t, env, policy, hosts)
			pid := p.cmd.Process.Pid
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, kv := range bytes.Split(raw, []byte{0}) {
				if v, ok := strings.CutPrefix(string(kv), "GODEBUG="); ok {
					got = append(got, v)
				}
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("running proxy's GODEBUG = %q, want [%q]", got, tc.want)
			}
			// ps and pgrep still know it by its name.
			if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || string(comm) != "egress-proxy\n" {
				t.Errorf("process name %q (%v), want egress-proxy", comm, err)
			}
			// Idle now; sample every thread's current system call. A
			// sample that finds no thread in nanosleep but one running
			// says nothing: on a loaded host (other sandboxes, other
			// tests) the monitor thread that has just woken from its
			// nanosleep waits for a CPU. Those are not counted, and more
			// are taken instead (bounded).
			time.Sleep(300 * time.Millisecond)
			const samples = 40
			hits, taken := 0, 0
			for try := 0; taken < samples && try < 10*samples; try++ {
				sleeping, running := inNanosleep(t, pid)
				if sleeping || !running {
					taken++
					if sleeping {
						hits++
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			if taken < samples {
				t.Fatalf("only %d of %d samples found the proxy's threads other than running", taken, 10*samples)
			}
			t.Logf("a thread was in nanosleep in %d of %d samples", hits, samples)
			// Untuned, a thread is in nanosleep in 0 of 40 samples; tuned,
			// in 34 to 40 on an idle host and down to 26 with three busy
			// loops on two CPUs: half tells them apart with margin.
			if tc.tuned && hits < samples/2 {
				t.Errorf("monitor thread polled in only %d of %d samples: it deep-sleeps despite the tuning", hits, samples)
			}
			if !tc.tuned && hits > samples/4 {
				t.Errorf("a thread polled in %d of %d samples with schedtrace=0: the check cannot tell the cases apart", hits, samples)
			}
		})
	}
}

// inNanosleep reports whether any thread of pid is blocked in
// nanosleep(2), the system call the Go runtime's usleep makes, and
// whether any is running (or runnable, waiting for a CPU).
func inNanosleep(t *testing.T, pid int) (sleeping, running bool) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(raw))
		switch {
		case len(f) > 0 && f[0] == strconv.Itoa(unix.SYS_NANOSLEEP):
			sleeping = true
		case len(f) > 0 && f[0] == "running":
			running = true
		}
	}
	return sleeping, running
}
