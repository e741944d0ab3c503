//go:build linux

package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// Layouts. Most tests in this package need no particular layout: they
// create real groups on whatever this host mounts (the pids, memory and
// cpu controllers through RequireFeature("cgroup:<controller>")) and so
// run the v1 paths on a hybrid host and the v2 paths on a pure v2 host.
// Tests for one layout say so with RequireFeature(LayoutHybrid) or
// RequireFeature(LayoutUnified). docs/development.md lists which v2 paths
// only TestV2FilesOnAPlainDirectory covers on a hybrid host.

// The layout probes agree with where a real group's controllers live.
// Any layout; root and the pids controller (newTestGroup).
func TestLayoutProbesMatchTheGroups(t *testing.T) {
	g := newTestGroup(t, Limits{}, false)
	hybrid, unified := feature.Check(LayoutHybrid) == nil, feature.Check(LayoutUnified) == nil
	if hybrid && unified {
		t.Fatal("the host is reported both hybrid and pure v2")
	}
	mode := g.Describe().Mode
	switch {
	case hybrid && mode != "hybrid", unified && mode != "v2", !hybrid && !unified && mode == "v2":
		t.Errorf("group mode %q, layout probes: hybrid %v, unified %v (%v; %v)", mode, hybrid, unified,
			feature.Check(LayoutHybrid), feature.Check(LayoutUnified))
	}
	t.Logf("host layout: group mode %s", mode)
}

// The v2 interface files, on a plain directory standing in for a v2 group
// with the pids, memory and cpu controllers: what applyLimits writes, what
// readLimits, Stats and the freezer read back, what ensureParent enables.
// A unit test: on a hybrid host (this project's CI) the kernel gives the
// cgroup2 hierarchy none of those controllers, so these paths cannot run
// against the kernel there (docs/development.md); the v2 freezer does run
// for real in TestKillUnifiedFreezer. Any layout, no root.
func TestV2FilesOnAPlainDirectory(t *testing.T) {
	mount := t.TempDir()
	h := &hier{name: Unified, mount: mount, dir: filepath.Join(mount, ParentName, "g"), v2: true, ctrls: []string{Pids, Memory, CPU}}
	files := map[string]string{
		// Files the code writes start empty: a plain file, unlike a
		// cgroup file, is not replaced by a write without O_TRUNC.
		"pids.max": "", "memory.max": "", "memory.swap.max": "", "memory.oom.group": "", "cpu.max": "",
		"cgroup.freeze": "", "cgroup.events": "populated 1\nfrozen 1\n",
		"pids.current": "3", "pids.peak": "7", "pids.events": "max 2\n",
		"memory.current": "1048576", "memory.peak": "2097152", "memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
	}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		os.WriteFile(filepath.Join(h.dir, name), []byte(v), 0o644)
	}
	for _, d := range []string{mount, filepath.Join(mount, ParentName)} {
		os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), nil, 0o644)
	}
	read := func(dir, name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	if err := ensureParent(h, h.ctrls); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{mount, filepath.Join(mount, ParentName)} {
		if got := read(d, "cgroup.subtree_control"); got != "+pids +memory +cpu" {
			t.Errorf("%s/cgroup.subtree_control = %q", d, got)
		}
	}
	lim := Limits{Pids: 64, MemoryBytes: 256 << 20, CPUs: 1.5}
	if err := applyLimits(h, lim); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"pids.max": "64", "memory.max": "268435456", "memory.swap.max": "0", "memory.oom.group": "1", "cpu.max": "150000 100000",
	} {
		if got := read(h.dir, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	g := &Group{name: "g", hiers: []*hier{h}, procsFD: -1, dirFD: -1}
	if got := g.readLimits(); got != lim {
		t.Errorf("readLimits = %+v, want %+v", got, lim)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{MemoryCurrent: 1 << 20, MemoryPeak: 2 << 20, PidsCurrent: 3, PidsPeak: 7, PidsLimitHits: 2, OOMKills: 1}
	if st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
	if err := setFrozen(h, true); err != nil || read(h.dir, "cgroup.freeze") != "1" {
		t.Errorf("setFrozen(true): %v, cgroup.freeze %q", err, read(h.dir, "cgroup.freeze"))
	}
	if frozen, err := isFrozen(h); err != nil || !frozen {
		t.Errorf("isFrozen = %v, %v; cgroup.events says frozen 1", frozen, err)
	}
	if d := g.Describe(); d.Mode != "v2" || d.Controllers[Memory] != Unified {
		t.Errorf("Describe = %+v", d)
	}
}
