//go:build linux

package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StartIn puts the new process in every hierarchy of the group from its
// first instruction, and leaves none of the test process's threads there.
func TestStartIn(t *testing.T) {
	g := newTestGroup(t, Limits{Pids: 50, MemoryBytes: 256 << 20}, false)
	for i := 0; i < 3; i++ {
		cmd := exec.Command("/bin/sleep", "30")
		if err := g.StartIn(cmd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range g.hiers {
			rel := strings.TrimPrefix(h.dir, h.mount)
			if !strings.Contains(string(b), ":"+rel+"\n") {
				t.Errorf("child not in %s:\n%s", h.dir, b)
			}
		}
	}
	procs, err := g.Procs()
	if err != nil || len(procs) != 3 {
		t.Fatalf("Procs = %v, %v; want the three children", procs, err)
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/cgroup")
	for _, p := range tasks {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), g.name) {
			t.Errorf("test thread %s left in the group:\n%s", p, b)
		}
	}
}
