package state

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// deadPID returns the pid of a child that has been started and reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	for i := 0; i < 5; i++ {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); errors.Is(err, os.ErrNotExist) {
			return pid
		}
	}
	t.Fatal("every reaped child's pid was reused at once")
	return 0
}

func TestPlanAndApply(t *testing.T) {
	s := openStore(t)
	now := time.Now().Truncate(time.Second)
	old := now.Add(-48 * time.Hour)
	dead := deadPID(t)
	me := os.Getpid()
	myStart, err := ProcStartTime(me)
	if err != nil {
		t.Fatal(err)
	}

	mk := func(name string, l Labels) {
		t.Helper()
		if _, err := s.Create(name, l); err != nil {
			t.Fatal(err)
		}
	}
	mk("live-creator", Labels{Created: old, CreatorPID: me})
	mk("dead-creator", Labels{Created: old, CreatorPID: dead, CreatorStartTime: 1})
	mk("kept", Labels{Created: old, CreatorPID: dead, CreatorStartTime: 1, Keep: true})
	mk("too-young", Labels{Created: now.Add(-3 * time.Minute), CreatorPID: dead, CreatorStartTime: 1})
	mk("recycled", Labels{Created: old, CreatorPID: me, CreatorStartTime: myStart + 12345})
	mk("young-live-kept", Labels{Created: now.Add(-time.Minute), CreatorPID: me, Keep: true})
	for name, age := range map[string]time.Time{"corrupt-old": old, "corrupt-young": now.Add(-time.Minute)} {
		dir := filepath.Join(s.Root(), name)
		os.Mkdir(dir, 0o700)
		os.WriteFile(filepath.Join(dir, LabelsFile), []byte(`{"name":`), 0o600)
		if err := os.Chtimes(dir, age, age); err != nil {
			t.Fatal(err)
		}
	}

	p, err := s.Plan(now, DefaultStaleAfter)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		collect bool
		reason  []string
	}{
		"live-creator":    {false, []string{"creator pid " + strconv.Itoa(me) + " alive"}},
		"dead-creator":    {true, []string{"age 48h0m0s >= 24h0m0s", "creator pid " + strconv.Itoa(dead) + " gone", "keep=false"}},
		"kept":            {false, []string{"keep=true"}},
		"too-young":       {false, []string{"age 3m0s < 24h0m0s"}},
		"recycled":        {true, []string{"creator pid " + strconv.Itoa(me) + " recycled"}},
		"young-live-kept": {false, []string{"age 1m0s < 24h0m0s", "alive", "keep=true"}},
		"corrupt-old":     {true, []string{"unreadable labels", ">= 24h0m0s"}},
		"corrupt-young":   {false, []string{"unreadable labels", "< 24h0m0s"}},
	}
	if len(p.Decisions) != len(want) {
		t.Fatalf("plan has %d decisions, want %d: %+v", len(p.Decisions), len(want), p.Decisions)
	}
	var wantRemoved []string
	for _, d := range p.Decisions {
		w, ok := want[d.Name]
		if !ok {
			t.Fatalf("unexpected decision %+v", d)
		}
		if d.Collect != w.collect {
			t.Errorf("%s: collect=%v, want %v (reason %q)", d.Name, d.Collect, w.collect, d.Reason)
		}
		for _, r := range w.reason {
			if !strings.Contains(d.Reason, r) {
				t.Errorf("%s: reason %q lacks %q", d.Name, d.Reason, r)
			}
		}
		if w.collect {
			wantRemoved = append(wantRemoved, d.Name)
		}
	}
	// The plan is a dry run.
	if ents, _ := s.List(); len(ents) != len(want) {
		t.Fatalf("Plan removed something: %d entries left", len(ents))
	}

	var hooked []string
	outs, err := s.Apply(p, func(l Labels) error {
		hooked = append(hooked, l.Name)
		if l.Name == "dead-creator" && l.CreatorPID != dead {
			t.Errorf("hook got labels %+v", l)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(hooked)
	sort.Strings(wantRemoved)
	if strings.Join(hooked, ",") != strings.Join(wantRemoved, ",") {
		t.Fatalf("remove hook called for %v, want %v", hooked, wantRemoved)
	}
	for _, o := range outs {
		if !o.Removed || o.Err != nil {
			t.Errorf("outcome %+v", o)
		}
	}
	ents, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, e := range ents {
		left[e.Name] = true
	}
	for name, w := range want {
		if left[name] == w.collect {
			t.Errorf("%s: present=%v after Apply, collect=%v", name, left[name], w.collect)
		}
	}
}

func TestApplyRechecksAndKeepsStateOnHookFailure(t *testing.T) {
	s := openStore(t)
	old := time.Now().Add(-48 * time.Hour)
	dead := deadPID(t)
	for _, n := range []string{"now-kept", "hook-fails", "goes"} {
		if _, err := s.Create(n, Labels{Created: old, CreatorPID: dead, CreatorStartTime: 1}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := s.Plan(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range p.Decisions {
		if !d.Collect {
			t.Fatalf("%s not collectable: %s", d.Name, d.Reason)
		}
	}
	// Between dry run and apply, an operator marks one sandbox keep.
	if _, err := s.Update("now-kept", func(l *Labels) { l.Keep = true }); err != nil {
		t.Fatal(err)
	}
	var called []string
	outs, err := s.Apply(p, func(l Labels) error {
		called = append(called, l.Name)
		if l.Name == "hook-fails" {
			return errors.New("netns busy")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "netns busy") || !strings.Contains(err.Error(), "hook-fails") {
		t.Fatalf("Apply error = %v, want the hook failure naming the sandbox", err)
	}
	if strings.Join(called, ",") != "goes,hook-fails" {
		t.Fatalf("hook called for %v", called)
	}
	byName := map[string]Outcome{}
	for _, o := range outs {
		byName[o.Name] = o
	}
	if o := byName["now-kept"]; o.Removed || !strings.Contains(o.Reason, "keep=true") {
		t.Errorf("now-kept: %+v", o)
	}
	if o := byName["hook-fails"]; o.Removed || o.Err == nil {
		t.Errorf("hook-fails: %+v", o)
	}
	if o := byName["goes"]; !o.Removed {
		t.Errorf("goes: %+v", o)
	}
	for name, present := range map[string]bool{"now-kept": true, "hook-fails": true, "goes": false} {
		_, err := s.Get(name)
		if (err == nil) != present {
			t.Errorf("%s: Get err %v, want present=%v", name, err, present)
		}
	}
	// A second apply of the same plan is harmless for what is gone.
	if err := s.Remove("goes"); err != nil {
		t.Fatal(err)
	}
	outs, _ = s.Apply(Plan{StaleAfter: time.Hour, Decisions: []Decision{{Name: "goes", Collect: true}}}, nil)
	if len(outs) != 1 || outs[0].Removed || outs[0].Err != nil || outs[0].Reason != "already gone" {
		t.Errorf("re-apply: %+v", outs)
	}
}

func TestPlanRejectsNegativeStaleAfter(t *testing.T) {
	s := openStore(t)
	if _, err := s.Plan(time.Now(), -time.Second); err == nil {
		t.Fatal("negative stale-after accepted")
	}
}
