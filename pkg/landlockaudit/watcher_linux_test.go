//go:build linux

package landlockaudit

import (
	"fmt"
	"testing"
	"time"
)

// fakeClock is a settable clock for the Watcher.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// offline returns a Watcher that is fed records by the test instead of
// the netlink socket; owned are the pids in the sandbox.
func offline(t *testing.T, owned ...int) (*Watcher, *[]Denial, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1796137112, 0)}
	var got []Denial
	own := map[int]bool{}
	for _, p := range owned {
		own[p] = true
	}
	cfg := Config{
		Owns:    func(pid int) bool { return own[pid] },
		Emit:    func(d Denial) { got = append(got, d) },
		Window:  DefaultWindow,
		MaxKeys: 32,
		Now:     clk.now,
	}
	w := &Watcher{cfg: cfg, domains: map[string]bool{}, alive: map[string]bool{}, pending: map[uint64]*event{}, lim: newLimiter(cfg.Window, cfg.MaxKeys)}
	return w, &got, clk
}

func feed(w *Watcher, serial int, domain string, creator int, denied int, path string) {
	w.handle(TypeLandlockAccess, fmt.Appendf(nil, `audit(1796137112.275:%d): domain=%s blockers=fs.read_file path="%s" dev="vda" ino=3`, serial, domain, path))
	if creator != 0 {
		w.handle(TypeLandlockDomain, fmt.Appendf(nil, `audit(1796137112.275:%d): domain=%s status=allocated mode=enforcing pid=%d uid=0 exe="/usr/bin/sandbox-supervisor" comm="sandbox-supervi"`, serial, domain, creator))
	}
	if denied != 0 {
		w.handle(TypeSyscall, fmt.Appendf(nil, `audit(1796137112.275:%d): arch=c000003e syscall=257 success=no exit=-13 items=0 ppid=1 pid=%d uid=10001 comm="cat" exe="/usr/bin/cat" key=(null)`, serial, denied))
		w.handle(TypeEOE, fmt.Appendf(nil, `audit(1796137112.275:%d): `, serial))
	}
}

func TestWatcherAttributesDomains(t *testing.T) {
	w, got, clk := offline(t, 100, 101)
	feed(w, 1, "aa", 100, 101, "/etc/shadow") // ours: creator in the cgroup
	feed(w, 2, "bb", 200, 201, "/etc/other")  // another sandbox's domain
	feed(w, 3, "cc", 0, 101, "/etc/nested")   // creator record missed; the denied process is ours
	feed(w, 4, "dd", 0, 201, "/etc/nope")     // unknown domain, foreign process
	feed(w, 5, "aa", 0, 0, "/etc/noctx")      // no syscall record: reported after pendingAge
	if len(*got) != 2 {
		t.Fatalf("before the tick: %d denials: %+v", len(*got), *got)
	}
	clk.t = clk.t.Add(pendingAge)
	w.tick(clk.t, false)
	if len(*got) != 3 {
		t.Fatalf("after the tick: %d denials", len(*got))
	}
	// A record without its end, then the domain's deallocation: the
	// pending denial is reported while the domain is still known.
	if !w.alive["aa"] || w.alive["bb"] || len(w.alive) != 1 {
		t.Fatalf("alive domains %v, want only aa (cc's allocation was never seen)", w.alive)
	}
	feed(w, 6, "aa", 0, 0, "/etc/lastword")
	w.handle(TypeLandlockDomain, []byte(`audit(1796137112.300:7): domain=aa status=deallocated denials=3`))
	feed(w, 8, "aa", 0, 201, "/etc/after") // a forgotten domain is not ours
	if len(w.alive) != 0 {
		t.Fatalf("alive domains %v after aa was freed", w.alive)
	}
	var paths []string
	for _, d := range *got {
		paths = append(paths, d.Path)
	}
	if fmt.Sprint(paths) != "[/etc/shadow /etc/nested /etc/noctx /etc/lastword]" {
		t.Fatalf("reported %v", paths)
	}
	d := (*got)[0]
	if d.PID != 101 || d.Exe != "/usr/bin/cat" || d.Comm != "cat" || d.Domain != "aa" || d.Millis != 1796137112275 || d.Verb() != "read" || d.Count != 1 {
		t.Fatalf("denial %+v", d)
	}
	if (*got)[2].PID != 0 {
		t.Fatalf("a denial without a syscall record has pid %d", (*got)[2].PID)
	}
	if w.stats.Foreign != 3 || w.stats.Denials != 4 {
		t.Fatalf("stats %+v", w.stats)
	}
}

func TestWatcherFoldsRepeats(t *testing.T) {
	w, got, clk := offline(t, 100)
	for i := 1; i <= 5; i++ {
		feed(w, i, "aa", 100, 100, "/etc/shadow")
	}
	if len(*got) != 1 {
		t.Fatalf("%d events for 5 identical denials within the window", len(*got))
	}
	clk.t = clk.t.Add(DefaultWindow)
	w.tick(clk.t, false)
	if len(*got) != 2 || (*got)[1].Count != 4 || (*got)[1].FirstMilli != 1796137112275 {
		t.Fatalf("after the window: %+v", *got)
	}
	// Distinct paths beyond MaxKeys fold into overflow keys (one per
	// shard of the limiter, 16).
	*got = nil
	const n, bound = 2000, 32 + 2*16
	for i := 0; i < n; i++ {
		feed(w, 100+i, "aa", 0, 100, fmt.Sprintf("/etc/f%d", i))
	}
	if len(*got) > bound {
		t.Fatalf("%d events for %d distinct paths with MaxKeys %d", len(*got), n, w.cfg.MaxKeys)
	}
	w.tick(clk.t, true)
	total := 0
	for _, d := range *got {
		total += d.Count
	}
	if total != n || len(*got) > bound+16 {
		t.Fatalf("%d events counting %d denials, want <= %d counting %d", len(*got), total, bound+16, n)
	}
}

func TestDenialEvent(t *testing.T) {
	for _, c := range []struct {
		d        Denial
		activity int
		name     string
		typ      int
	}{
		{Denial{Blockers: []string{"fs.write_file"}, Path: "/etc/x"}, 3, "", 1},
		{Denial{Blockers: []string{"fs.make_reg"}, Path: "/etc"}, 1, "", 1},
		{Denial{Blockers: []string{"fs.execute", "fs.read_file"}, Path: "/opt/tool"}, 99, "Execute", 1},
		{Denial{Blockers: []string{"fs.read_dir"}, Path: "/root"}, 2, "", 2},
		{Denial{Blockers: []string{"scope.signal"}, OPID: 1, OComm: "systemd"}, 99, "Signal", 99},
		{Denial{Blockers: []string{"scope.abstract_unix_socket"}, Path: "\x00dbus"}, 99, "Connect", 5},
		{Denial{Blockers: []string{"fs.future_right"}, Path: "/x"}, 99, "fs.future_right", 1},
	} {
		fd := c.d.OCSF("sbx-1", nil)
		if fd.ActivityID != c.activity || (c.activity == 99 && fd.ActivityName != c.name) || fd.Target.TypeID != c.typ {
			t.Errorf("%v: activity %d %q type %d", c.d.Blockers, fd.ActivityID, fd.ActivityName, fd.Target.TypeID)
		}
	}
}

// Another domain's deallocation (another sandbox ending) arrives between
// one of this sandbox's access records and its syscall record: the
// denial still waits for its process and is reported with it, once.
func TestOtherDomainFreedKeepsPendingDenial(t *testing.T) {
	w, got, _ := offline(t, 100, 101)
	w.handle(TypeLandlockAccess, []byte(`audit(1796137112.275:1): domain=aa blockers=fs.read_file path="/etc/shadow" dev="vda" ino=3`))
	w.handle(TypeLandlockDomain, []byte(`audit(1796137112.275:1): domain=aa status=allocated mode=enforcing pid=100 uid=0 exe="/usr/bin/sandbox-supervisor" comm="sandbox-supervi"`))
	w.handle(TypeLandlockDomain, []byte(`audit(1796137112.276:2): domain=bb status=deallocated denials=4`))
	w.handle(TypeSyscall, []byte(`audit(1796137112.275:1): arch=c000003e syscall=257 success=no exit=-13 items=0 ppid=1 pid=101 uid=10001 comm="cat" exe="/usr/bin/cat" key=(null)`))
	w.handle(TypeEOE, []byte(`audit(1796137112.275:1): `))
	if len(*got) != 1 || (*got)[0].PID != 101 || (*got)[0].Exe != "/usr/bin/cat" {
		t.Fatalf("reported %+v, want one denial by pid 101 /usr/bin/cat", *got)
	}
}
