//go:build linux

package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartIn starts cmd with its first process already inside the group, so
// that nothing has to be migrated afterwards. Moving a running process
// between cgroups takes the kernel's global threadgroup lock, whose first
// writer waits for an RCU grace period: 1 to 15 ms on a loaded host, on
// every sandbox start. StartIn avoids it:
//
//   - cgroup v2 hierarchies: clone3 with CLONE_INTO_CGROUP
//     (SysProcAttr.UseCgroupFD);
//   - cgroup v1 hierarchies: the calling OS thread moves itself into the
//     group by writing "0" to its tasks file (a single-thread self-move
//     skips the global lock), forks, and moves itself back.
//
// The child's parent-death signal, if any, is tied to the calling thread,
// which stays alive afterwards. cmd.SysProcAttr must not already use a
// cgroup fd. Calls in one process are serialized (startMu).
func (g *Group) StartIn(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.UseCgroupFD {
		return fmt.Errorf("cgroup: StartIn: cmd already uses a cgroup fd")
	}
	startMu.Lock()
	defer startMu.Unlock()
	runtime.LockOSThread()
	home, err := threadCgroups()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	var v2fd = -1
	var moved []*hier
	back := func() error {
		var first error
		for _, h := range moved {
			orig, ok := home[h.mount]
			if !ok {
				continue
			}
			if err := writeFile(filepath.Join(orig, "tasks"), "0"); err != nil && first == nil {
				first = fmt.Errorf("cgroup: move supervisor thread back to %s: %w", orig, err)
			}
		}
		return first
	}
	defer func() {
		if v2fd >= 0 {
			unix.Close(v2fd)
		}
	}()
	for _, h := range g.hiers {
		if h.v2 {
			fd, err := unix.Open(h.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				runtime.UnlockOSThread()
				return fmt.Errorf("cgroup: open %s: %w", h.dir, err)
			}
			v2fd = fd
			continue
		}
		if _, ok := home[h.mount]; !ok {
			runtime.UnlockOSThread()
			return fmt.Errorf("cgroup: this thread's cgroup in %s is unknown", h.mount)
		}
		if err := writeFile(filepath.Join(h.dir, "tasks"), "0"); err != nil {
			berr := back()
			if berr == nil {
				runtime.UnlockOSThread()
			}
			return fmt.Errorf("cgroup: move into %s: %w", h.dir, err)
		}
		moved = append(moved, h)
	}
	if v2fd >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = v2fd
	}
	serr := cmd.Start()
	if berr := back(); berr != nil {
		// The thread stays locked: it must not run other goroutines from
		// inside a sandbox's cgroup. The caller tears the sandbox down.
		// It may be the thread-group leader, whose cgroups
		// /proc/self/cgroup shows: from now on each thread's own are read.
		displaced = true
		if serr == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return berr
	}
	runtime.UnlockOSThread()
	if serr != nil {
		return serr
	}
	return nil
}

// startMu serializes StartIn's move windows: while it is held no thread
// of this process is in another group by StartIn's doing, so every
// thread is where the thread-group leader is.
var startMu sync.Mutex

// displaced is set (under startMu) once a thread could not be moved back
// and stays in a sandbox's group.
var displaced bool

// threadCgroups maps each hierarchy mount point to the calling thread's
// cgroup directory in it (v1 hierarchies only). The caller holds startMu.
//
// It reads the process's file, /proc/self/cgroup (the thread-group
// leader's cgroups, the same as the calling thread's while startMu is
// held), not the thread's own /proc/self/task/TID/cgroup: looking that up
// leaves a dentry for the thread under the process's /proc directory, and
// when the process exits its last thread flushes that dentry while the
// parent, already woken, flushes the whole directory to reap the
// process. The parent's flush spins until the thread's is done: 2-15 ms
// in wait4 for a third of the supervisor's runs on a loaded 2-CPU host
// (and 0 of 80 without the lookup), time a caller timing `run` pays.
// Only after a failed move back (displaced) is the thread's own read.
func threadCgroups() (map[string]string, error) {
	path := "/proc/self/cgroup"
	if displaced && unix.Gettid() != unix.Getpid() {
		path = fmt.Sprintf("/proc/self/task/%d/cgroup", unix.Gettid())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cgroup: read own cgroups: %w", err)
	}
	l := currentLayout()
	if l.err != nil {
		return nil, l.err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue // the v2 line ("0::/path")
		}
		for _, c := range strings.Split(parts[1], ",") {
			c = strings.TrimPrefix(c, "name=")
			if m := l.v1[c]; m != "" {
				out[m] = filepath.Join(m, parts[2])
			}
		}
	}
	return out, nil
}
