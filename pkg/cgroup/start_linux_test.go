//go:build linux

package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// Concurrent StartIn calls into different groups each put their child in
// their own group, and every thread of the test process ends where it
// started: the home cgroups StartIn moves a thread back to are read from
// the process (/proc/self/cgroup), which is right only because the move
// windows are serialized. Without startMu a call reads the leader's
// cgroups while another call has moved the leader into its group, moves
// its thread "back" there, and this test finds a thread left in a group
// or a child in the wrong one.
func TestStartInConcurrent(t *testing.T) {
	groups := []*Group{
		newTestGroup(t, Limits{Pids: 50, MemoryBytes: 256 << 20}, false),
		newTestGroup(t, Limits{Pids: 50, MemoryBytes: 256 << 20}, false),
	}
	const perGroup = 8
	type started struct {
		g   *Group
		cmd *exec.Cmd
	}
	res := make(chan started, 2*perGroup)
	errs := make(chan error, 2*perGroup)
	var wg sync.WaitGroup
	for _, g := range groups {
		for i := 0; i < perGroup; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command("/bin/sleep", "30")
				if err := g.StartIn(cmd); err != nil {
					errs <- err
					return
				}
				res <- started{g, cmd}
			}()
		}
	}
	wg.Wait()
	close(res)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for r := range res {
		t.Cleanup(func() { r.cmd.Process.Kill(); r.cmd.Wait() })
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", r.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range r.g.hiers {
			rel := strings.TrimPrefix(h.dir, h.mount)
			if !strings.Contains(string(b), ":"+rel+"\n") {
				t.Errorf("child %d not in %s:\n%s", r.cmd.Process.Pid, h.dir, b)
			}
		}
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/cgroup")
	for _, p := range tasks {
		b, _ := os.ReadFile(p)
		for _, g := range groups {
			if strings.Contains(string(b), g.name) {
				t.Errorf("test thread %s left in %s:\n%s", p, g.name, b)
			}
		}
	}
}
