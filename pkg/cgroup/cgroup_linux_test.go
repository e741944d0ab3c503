//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/feature"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

const hybridMountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/free\040zer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime shared:7 - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:36 /sub /mnt/pids-bind rw,relatime - cgroup cgroup rw,pids
51 23 0:38 / /mnt/second-unified rw,relatime - cgroup2 cgroup2 rw
`

func TestParseMountinfoAndPlan(t *testing.T) {
	l := parseMountinfo([]byte(hybridMountinfo))
	if l.unified != "/sys/fs/cgroup/unified" {
		t.Errorf("unified = %q", l.unified)
	}
	want := map[string]string{
		Pids:    "/sys/fs/cgroup/pids",
		Memory:  "/sys/fs/cgroup/memory",
		CPU:     "/sys/fs/cgroup/cpu,cpuacct",
		Freezer: "/sys/fs/cgroup/free zer",
	}
	if fmt.Sprint(l.v1) != fmt.Sprint(want) {
		t.Errorf("v1 = %v, want %v", l.v1, want)
	}

	// Hybrid with an empty v2: unified for grouping, v1 for every limit.
	hs := l.plan("box", []string{Pids, Memory, CPU}, false)
	var got []string
	for _, h := range hs {
		got = append(got, fmt.Sprintf("%s:%s:%v", h.name, h.dir, h.ctrls))
	}
	wantPlan := []string{
		"unified:/sys/fs/cgroup/unified/palisade/box:[]",
		"pids:/sys/fs/cgroup/pids/palisade/box:[pids]",
		"memory:/sys/fs/cgroup/memory/palisade/box:[memory]",
		"cpu:/sys/fs/cgroup/cpu,cpuacct/palisade/box:[cpu]",
	}
	if !slices.Equal(got, wantPlan) {
		t.Errorf("hybrid plan:\n got %q\nwant %q", got, wantPlan)
	}

	// Controllers the unified hierarchy offers go there, the rest to v1.
	l.v2[Pids], l.v2[Memory] = true, true
	hs = l.plan("box", []string{Pids, Memory, CPU}, true)
	got = got[:0]
	for _, h := range hs {
		got = append(got, fmt.Sprintf("%s:%v:%v", h.name, h.v2, h.ctrls))
	}
	wantPlan = []string{"unified:true:[pids memory]", "cpu:false:[cpu]", "freezer:false:[freezer]"}
	if !slices.Equal(got, wantPlan) {
		t.Errorf("mixed plan: got %q, want %q", got, wantPlan)
	}

	// Pure v2.
	v2 := parseMountinfo([]byte("30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"))
	for _, c := range []string{Pids, Memory, CPU} {
		v2.v2[c] = true
	}
	hs = v2.plan("box", []string{Pids, CPU}, false)
	if len(hs) != 1 || hs[0].dir != "/sys/fs/cgroup/palisade/box" || !slices.Equal(hs[0].ctrls, []string{Pids, CPU}) {
		t.Errorf("pure v2 plan: %+v", hs[0])
	}

	// Nothing mounted: every controller probe names itself and its kernel.
	none := parseMountinfo(nil)
	err := none.available(Memory)
	var m *feature.MissingError
	if !errors.As(err, &m) || m.Feature != "cgroup:memory" || m.MinKernel == "" {
		t.Errorf("available on empty layout = %v", err)
	}
}

func TestProbesRegistered(t *testing.T) {
	for _, n := range []string{"cgroup:pids", "cgroup:memory", "cgroup:cpu"} {
		p, ok := feature.Lookup(n)
		if !ok {
			t.Fatalf("probe %q not registered", n)
		}
		if !p.Confinement {
			t.Errorf("probe %q not marked as confinement", n)
		}
	}
	l := currentLayout()
	if (Supported() == nil) != (l.v2[Pids] || l.v1[Pids] != "") {
		t.Errorf("Supported() = %v disagrees with layout %+v", Supported(), l)
	}
}

func TestNewRejectsBadInputBeforeTouchingTheKernel(t *testing.T) {
	for _, n := range []string{"", "..", "a/b", "a b"} {
		if _, err := New(n, Limits{}); err == nil || !strings.Contains(err.Error(), "name") {
			t.Errorf("New(%q) = %v, want a name error", n, err)
		}
	}
	if _, err := New("ok", Limits{Pids: -3}); err == nil || !strings.Contains(err.Error(), "Limits.Pids") {
		t.Errorf("New with Pids=-3: %v", err)
	}
	if _, err := Open("a/../b"); err == nil {
		t.Error("Open accepted a path")
	}
}

// newTestGroup creates a uniquely named group and destroys it at cleanup,
// checking that every directory is gone.
func newTestGroup(t *testing.T, lim Limits, forceFreezer bool) *Group {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "cgroup:pids")
	if lim.MemoryBytes > 0 {
		testutil.RequireFeature(t, "cgroup:memory")
	}
	if lim.CPUs > 0 {
		testutil.RequireFeature(t, "cgroup:cpu")
	}
	g, err := newGroup(testutil.UniqueName("pt-"), lim, forceFreezer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Destroy(); err != nil {
			t.Errorf("cleanup Destroy: %v", err)
		}
	})
	return g
}

// startCmd starts a command the test owns and kills it by pid at cleanup.
// The returned channel yields its Wait error.
func startCmd(t *testing.T, name string, args ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			t.Errorf("pid %d did not exit", cmd.Process.Pid)
		}
	})
	return cmd, done
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestGroupLifecycle(t *testing.T) {
	testutil.CheckFDLeaks(t)
	lim := Limits{Pids: 64, MemoryBytes: 256 << 20, CPUs: 0.5}
	g := newTestGroup(t, lim, false)
	name := g.Name()
	d := g.Describe()
	t.Logf("describe: %+v", d)
	l := currentLayout()

	// Limits landed in whichever hierarchy enforces each controller.
	if got := readTrim(t, filepath.Join(g.Path(Pids), "pids.max")); got != "64" {
		t.Errorf("pids.max = %s", got)
	}
	if h := g.ctrlHier(Memory); h.v2 {
		if got := readTrim(t, filepath.Join(h.dir, "memory.max")); got != strconv.Itoa(256<<20) {
			t.Errorf("memory.max = %s", got)
		}
		if got := readTrim(t, filepath.Join(h.dir, "memory.oom.group")); got != "1" {
			t.Errorf("memory.oom.group = %s", got)
		}
	} else {
		if got := readTrim(t, filepath.Join(h.dir, "memory.limit_in_bytes")); got != strconv.Itoa(256<<20) {
			t.Errorf("memory.limit_in_bytes = %s", got)
		}
		if p := filepath.Join(h.dir, "memory.memsw.limit_in_bytes"); exists(p) && readTrim(t, p) != strconv.Itoa(256<<20) {
			t.Errorf("memory.memsw.limit_in_bytes = %s, want the memory limit", readTrim(t, p))
		}
		if !strings.Contains(readTrim(t, filepath.Join(h.dir, "memory.oom_control")), "oom_kill_disable 0") {
			t.Error("OOM killer disabled in the group")
		}
	}
	if h := g.ctrlHier(CPU); h.v2 {
		if got := readTrim(t, filepath.Join(h.dir, "cpu.max")); got != "50000 100000" {
			t.Errorf("cpu.max = %s", got)
		}
	} else if q, p := readTrim(t, filepath.Join(h.dir, "cpu.cfs_quota_us")), readTrim(t, filepath.Join(h.dir, "cpu.cfs_period_us")); q != "50000" || p != "100000" {
		t.Errorf("cfs quota/period = %s/%s", q, p)
	}
	if l.unified != "" {
		want := filepath.Join(l.unified, ParentName, name)
		if g.Path(Unified) != want || !exists(want) {
			t.Errorf("Path(unified) = %q, want existing %q", g.Path(Unified), want)
		}
	}
	if len(d.Paths) != len(g.hiers) || d.Limits != lim || d.Controllers[Pids] == "" || d.KillMethod == "" {
		t.Errorf("Describe = %+v", d)
	}

	// A process joins every hierarchy and shows up in Procs.
	cmd, done := startCmd(t, "sleep", "30")
	pid := cmd.Process.Pid
	if err := g.AddPID(pid); err != nil {
		t.Fatal(err)
	}
	procs, err := g.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(procs, []int{pid}) {
		t.Fatalf("Procs = %v, want [%d]", procs, pid)
	}
	own := readTrim(t, fmt.Sprintf("/proc/%d/cgroup", pid))
	in := 0
	for _, line := range strings.Split(own, "\n") {
		if strings.HasSuffix(line, ":/"+ParentName+"/"+name) {
			in++
		}
	}
	if in != len(d.Paths) {
		t.Errorf("/proc/%d/cgroup shows the group in %d hierarchies, want %d (%v):\n%s", pid, in, len(d.Paths), d.Paths, own)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.PidsCurrent != 1 || st.MemoryCurrent < 0 || st.OOMKills != 0 {
		t.Errorf("Stats = %+v, want 1 pid, memory readable, no OOM kills", st)
	}

	// A second New of the same name fails and leaves the group alone.
	if _, err := New(name, Limits{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second New = %v", err)
	}
	if procs, _ := g.Procs(); !slices.Equal(procs, []int{pid}) {
		t.Fatalf("after failed New, Procs = %v", procs)
	}

	// Open finds the same group with the same limits.
	o, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Limits() != lim {
		t.Errorf("Open limits = %+v, want %+v", o.Limits(), lim)
	}
	for _, h := range []string{Unified, Pids, Memory, CPU} {
		if o.Path(h) != g.Path(h) {
			t.Errorf("Open Path(%s) = %q, want %q", h, o.Path(h), g.Path(h))
		}
	}
	if procs, _ := o.Procs(); !slices.Equal(procs, []int{pid}) {
		t.Errorf("Open Procs = %v", procs)
	}

	// Kill empties the group (via the reopened handle, as gc would).
	if err := o.Kill(); err != nil {
		t.Fatal(err)
	}
	if procs, err := g.Procs(); err != nil || len(procs) != 0 {
		t.Fatalf("after Kill, Procs = %v, %v", procs, err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("sleep ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sleep not reaped after Kill")
	}

	// Destroy removes the group everywhere and is idempotent.
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	for hn, dir := range d.Paths {
		if exists(dir) {
			t.Errorf("%s: %s still exists after Destroy", hn, dir)
		}
	}
	if err := g.Destroy(); err != nil {
		t.Errorf("second Destroy = %v", err)
	}
	if procs, err := g.Procs(); err != nil || len(procs) != 0 {
		t.Errorf("Procs of destroyed group = %v, %v", procs, err)
	}
	if _, err := Open(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open after Destroy = %v, want not-exist", err)
	}
}

// killForkingGroup puts a process that keeps forking into g, plus a few
// sleepers, and checks that Kill empties the group.
func killForkingGroup(t *testing.T, g *Group) {
	t.Helper()
	// The forker's loop is bounded; the pids limit bounds it further.
	forker, _ := startCmd(t, "sh", "-c", `i=0; while [ $i -lt 2000 ]; do sleep 30 & i=$((i+1)); sleep 0.002; done; wait`)
	if err := g.AddPID(forker.Process.Pid); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		c, _ := startCmd(t, "sleep", "30")
		if err := g.AddPID(c.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		procs, err := g.Procs()
		if err != nil {
			t.Fatal(err)
		}
		if len(procs) >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("forker made only %d processes", len(procs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s emptied the group in %v", g.Describe().KillMethod, time.Since(start))
	if procs, err := g.allProcs(); err != nil || len(procs) != 0 {
		t.Fatalf("after Kill: %v, %v", procs, err)
	}
}

func TestKillWhileForking(t *testing.T) {
	g := newTestGroup(t, Limits{Pids: 64}, false)
	killForkingGroup(t, g)
}

func TestKillFreezerFallback(t *testing.T) {
	g := newTestGroup(t, Limits{Pids: 64}, true)
	if m := g.Describe().KillMethod; m == killCgroup {
		t.Fatalf("forced fallback still uses %s", m)
	}
	killForkingGroup(t, g)
	if g.freezer != nil {
		frozen, err := isFrozen(g.freezer)
		if err != nil || frozen {
			t.Fatalf("group left frozen (%v, %v)", frozen, err)
		}
	}
}

// Kill through the cgroup v2 freezer (cgroup.freeze in the unified
// hierarchy), the method chooseKill picks on a kernel without cgroup.kill
// and without a v1 freezer. It runs for real wherever a cgroup2 hierarchy
// is mounted, hybrid hosts included (the freezer is part of the v2 core,
// not a controller). Layout: hybrid or pure v2.
func TestKillUnifiedFreezer(t *testing.T) {
	if feature.Check(LayoutUnified) != nil {
		testutil.RequireFeature(t, LayoutHybrid)
	}
	g := newTestGroup(t, Limits{Pids: 64}, false)
	u := g.hier(Unified)
	if u == nil {
		t.Fatal("a host with a cgroup2 hierarchy gave a group none")
	}
	if _, err := os.Stat(filepath.Join(u.dir, "cgroup.freeze")); err != nil {
		testutil.RequireData(t, "cgroup.freeze (Linux >= 5.2)", err)
	}
	g.kill, g.freezer = killFreeze, u
	killForkingGroup(t, g)
	if frozen, err := isFrozen(u); err != nil || frozen {
		t.Fatalf("group left frozen (%v, %v)", frozen, err)
	}
}

const groupEnv = "PALISADE_TEST_CGROUP"

// joinFromEnv puts the helper process into the group named by groupEnv.
func joinFromEnv() {
	g, err := Open(os.Getenv(groupEnv))
	if err == nil {
		err = g.AddPID(os.Getpid())
	}
	if err != nil {
		fmt.Println("JOIN FAILED:", err)
		os.Exit(3)
	}
}

func TestForkBombCapped(t *testing.T) {
	if testutil.IsChild("cgroup-forkbomb") {
		joinFromEnv()
		started, failed := 0, 0
		for i := 0; i < 200; i++ {
			c := exec.Command("sh", "-c", "sleep 5")
			if err := c.Start(); err != nil {
				failed++
				continue
			}
			started++
		}
		fmt.Printf("FORKBOMB started=%d failed=%d\n", started, failed)
		os.Exit(0)
	}
	const limit = 20
	g := newTestGroup(t, Limits{Pids: limit}, false)
	out, err := testutil.RunInChild(t, "TestForkBombCapped", "cgroup-forkbomb", []string{groupEnv + "=" + g.Name()})
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var started, failed int
	i := strings.Index(string(out), "FORKBOMB ")
	if i < 0 {
		t.Fatalf("helper output lacks its report:\n%s", out)
	}
	if _, err := fmt.Sscanf(string(out[i:]), "FORKBOMB started=%d failed=%d", &started, &failed); err != nil {
		t.Fatalf("parse %q: %v", out[i:], err)
	}
	t.Logf("fork bomb: %d of 200 started, %d refused", started, failed)
	if started == 0 || started >= limit || failed < 200-limit {
		t.Errorf("fork bomb started %d, refused %d: want 0 < started < %d", started, failed, limit)
	}
	procs, err := g.Procs()
	if err != nil {
		t.Fatal(err)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v, %d procs", st, len(procs))
	if len(procs) == 0 || len(procs) > limit {
		t.Errorf("%d processes in the group, want 1 to %d", len(procs), limit)
	}
	if st.PidsLimitHits < int64(failed) {
		t.Errorf("pids limit hits %d < %d refused forks", st.PidsLimitHits, failed)
	}
	if st.PidsPeak > limit {
		t.Errorf("pids peak %d above limit %d", st.PidsPeak, limit)
	}
}

func TestMemoryLimitOOMKills(t *testing.T) {
	if testutil.IsChild("cgroup-oom") {
		joinFromEnv()
		var keep [][]byte
		for mib := 1; mib <= 256; mib++ {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = byte(mib)
			}
			keep = append(keep, b)
			if mib%16 == 0 {
				fmt.Printf("ALLOCATED %d MiB\n", mib)
			}
		}
		fmt.Println("SURVIVED", len(keep))
		os.Exit(0)
	}
	const limit = 32 << 20
	g := newTestGroup(t, Limits{MemoryBytes: limit}, false)
	start := time.Now()
	out, err := testutil.RunInChild(t, "TestMemoryLimitOOMKills", "cgroup-oom", []string{groupEnv + "=" + g.Name()})
	t.Logf("helper ran %v: %v\n%s", time.Since(start), err, out)
	if strings.Contains(string(out), "SURVIVED") || strings.Contains(string(out), "JOIN FAILED") {
		t.Fatalf("helper was not stopped by the %d MiB limit", limit>>20)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, want SIGKILL from the OOM killer", err)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st)
	if st.OOMKills == 0 {
		t.Errorf("OOM kill count 0 after the helper was killed")
	}
	// The charge may overshoot by a few pages before reclaim and the OOM
	// killer act; without the limit the peak would be 256 MiB.
	if st.MemoryPeak > limit+limit/8 {
		t.Errorf("memory peak %d well above limit %d", st.MemoryPeak, limit)
	}
}

// cpuTicks is utime+stime of pid in clock ticks.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	s := readTrim(t, fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	u, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	k, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	return u + k
}

func TestCPULimitThrottles(t *testing.T) {
	g := newTestGroup(t, Limits{CPUs: 0.2}, false)
	busy, _ := startCmd(t, "sh", "-c", "while :; do :; done")
	pid := busy.Process.Pid
	if err := g.AddPID(pid); err != nil {
		t.Fatal(err)
	}
	// Let the loop burn 0.3 s of CPU (30 ticks; USER_HZ is 100), which
	// takes at least 1.5 s of wall time at 0.2 CPUs. Other load on the
	// host only makes it slower, so only the upper bound is tight.
	t0, c0 := time.Now(), cpuTicks(t, pid)
	var used int64
	for used < 30 {
		if time.Since(t0) > 20*time.Second {
			t.Fatalf("busy loop got only %d ticks in 20 s: host too loaded to measure", used)
		}
		time.Sleep(50 * time.Millisecond)
		used = cpuTicks(t, pid) - c0
	}
	wall := time.Since(t0)
	share := float64(used) / 100 / wall.Seconds()
	t.Logf("busy loop used %.2f of a CPU under a 0.2 CPU limit (%d ticks in %v)", share, used, wall)
	if share > 0.3 {
		t.Errorf("busy loop used %.2f CPUs, limit 0.2", share)
	}
	stat := readTrim(t, filepath.Join(g.Path(CPU), "cpu.stat"))
	if v := keyedValue([]byte(stat), "nr_throttled"); v <= 0 && share > 0.1 {
		t.Errorf("cpu.stat nr_throttled = %d:\n%s", v, stat)
	}
}

func BenchmarkProcs(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireFeature(b, "cgroup:pids")
	g, err := New(testutil.UniqueName("pb-"), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Destroy()
	for i := 0; i < 5; i++ {
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { c.Process.Kill(); c.Wait() }()
		if err := g.AddPID(c.Process.Pid); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ps, err := g.Procs()
		if err != nil || len(ps) != 5 {
			b.Fatalf("Procs = %v, %v", ps, err)
		}
	}
}

func BenchmarkNewDestroy(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireFeature(b, "cgroup:pids")
	for i := 0; i < b.N; i++ {
		g, err := New(testutil.UniqueName("pb-"), Limits{MemoryBytes: 64 << 20})
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Destroy(); err != nil {
			b.Fatal(err)
		}
	}
}

// Processes in a child group (which only root on the host can make) are
// still the sandbox's: Procs, Kill and Destroy cover them.
func TestNestedGroups(t *testing.T) {
	testutil.CheckFDLeaks(t)
	g := newTestGroup(t, Limits{}, false)
	outer, _ := startCmd(t, "sleep", "30")
	inner, innerDone := startCmd(t, "sleep", "30")
	for _, c := range []*exec.Cmd{outer, inner} {
		if err := g.AddPID(c.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	if procs, err := g.Procs(); err != nil || len(procs) != 2 {
		t.Fatalf("Procs = %v, %v", procs, err) // also opens the cached fds
	}
	sub := filepath.Join(g.primary().dir, "inner")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(sub, "cgroup.procs"), strconv.Itoa(inner.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	procs, err := g.Procs()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(procs)
	want := []int{outer.Process.Pid, inner.Process.Pid}
	slices.Sort(want)
	if !slices.Equal(procs, want) {
		t.Fatalf("Procs with a child group = %v, want %v", procs, want)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-innerDone:
	case <-time.After(5 * time.Second):
		t.Fatal("process in the child group survived Destroy")
	}
	if exists(sub) || exists(g.primary().dir) {
		t.Fatalf("%s or its parent survived Destroy", sub)
	}
	if procs, err := g.Procs(); err != nil || len(procs) != 0 {
		t.Fatalf("Procs after Destroy = %v, %v", procs, err)
	}
}

// Destroy's fast path removes empty groups without reading or killing
// anything; a process left in only some hierarchies (here: moved out of
// the unified group by root, so that group empties and goes first) is
// still killed, and every group still goes.
//
// Layout: hybrid only (on a pure v2 or pure v1 host a group lives in one
// hierarchy, so the case cannot arise).
func TestDestroyKillsWhatTheFastPathLeaves(t *testing.T) {
	testutil.RequireFeature(t, LayoutHybrid)
	g := newTestGroup(t, Limits{}, false)
	uni := g.hier(Unified)
	if uni == nil || len(g.hiers) < 2 {
		t.Fatalf("a hybrid host gave a group %d hierarchies (unified: %v)", len(g.hiers), uni != nil)
	}
	c, done := startCmd(t, "sleep", "30")
	if err := g.AddPID(c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(uni.mount, "cgroup.procs"), strconv.Itoa(c.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a process left in the v1 groups survived Destroy")
	}
	for _, h := range g.hiers {
		if exists(h.dir) {
			t.Errorf("%s survived Destroy", h.dir)
		}
	}
}
