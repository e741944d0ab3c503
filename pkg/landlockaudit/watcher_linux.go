//go:build linux

package landlockaudit

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Config is what a Watcher needs from the supervisor.
type Config struct {
	// Owns reports whether pid belongs to the sandbox (is its init or in
	// its cgroup). A Landlock domain is the sandbox's when the process
	// that created it is; for a domain whose creator is unknown, when the
	// denied process is. It is asked when the records are read, which on
	// a loaded host can be after the process exited: a pid the caller
	// knows (the init, which creates the sandbox's domain) must not need
	// the process to be alive.
	Owns func(pid int) bool
	// Emit receives every denial to report, on the Watcher's goroutine.
	Emit func(Denial)
	// Window is the deduplication window (default 10 s); MaxKeys bounds
	// the distinct keys it tracks (default 1024).
	Window  time.Duration
	MaxKeys int
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultWindow  = 10 * time.Second
	DefaultMaxKeys = 1024
)

// Stats counts what a Watcher saw.
type Stats struct {
	Records    int // audit records read
	Denials    int // Landlock denials of this sandbox
	Emitted    int // events emitted (folded repeats count once)
	Suppressed int // denials folded into another event
	Foreign    int // denials of other domains (other sandboxes, the host)
	Overruns   int // times the kernel dropped records for a full buffer
}

// Watcher reads the audit multicast group and reports the Landlock
// denials of one sandbox.
type Watcher struct {
	cfg     Config
	r       *Reader
	wake    int // eventfd: Stop wakes the loop at once
	done    chan struct{}
	once    sync.Once
	stats   Stats
	domains map[string]bool // domain id → belongs to the sandbox
	alive   map[string]bool // domains of the sandbox seen allocated, not yet freed
	pending map[uint64]*event
	lim     *limiter
}

// event gathers the records of one audit event (one serial).
type event struct {
	access  []Record
	sys     *Record
	arrived time.Time
}

// names reports whether one of the event's access records is of domain.
func (ev *event) names(domain string) bool {
	for i := range ev.access {
		if get(&ev.access[i], "domain") == domain {
			return true
		}
	}
	return false
}

// bounds on state fed by untrusted activity
const (
	maxDomains = 1 << 16
	maxPending = 4096
	// pendingAge is how long an event without its end record (a task
	// without audit context writes none) waits before it is reported.
	pendingAge = 200 * time.Millisecond
	tick       = 100 * time.Millisecond
)

// Watch subscribes to the audit read-log group and starts reporting.
// Subscribe before the sandbox's command can be denied anything: the
// record that names a domain's creator comes only with its first denial.
func Watch(cfg Config) (*Watcher, error) {
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r, err := OpenReader()
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(r.fd, true); err != nil {
		r.Close()
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		r.Close()
		return nil, err
	}
	w := &Watcher{cfg: cfg, r: r, wake: wake, done: make(chan struct{}),
		domains: map[string]bool{}, alive: map[string]bool{}, pending: map[uint64]*event{},
		lim: newLimiter(cfg.Window, cfg.MaxKeys)}
	go w.loop()
	return w, nil
}

// Stop reads what the kernel still holds for the sandbox (the command
// has exited, so every record of its denials is queued or delivered),
// reports it and the folded counts, and closes the subscription.
func (w *Watcher) Stop() Stats {
	w.once.Do(func() {
		var one [8]byte
		one[0] = 1
		unix.Write(w.wake, one[:])
		<-w.done
		w.r.Close()
		unix.Close(w.wake)
	})
	return w.stats
}

func (w *Watcher) loop() {
	defer close(w.done)
	fds := []unix.PollFd{{Fd: int32(w.r.fd), Events: unix.POLLIN}, {Fd: int32(w.wake), Events: unix.POLLIN}}
	lastTick := w.cfg.Now()
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		_, err := unix.Poll(fds, int(tick/time.Millisecond))
		if err != nil && err != unix.EINTR {
			break
		}
		if !w.drain() {
			break
		}
		if now := w.cfg.Now(); now.Sub(lastTick) >= tick {
			w.tick(now, false)
			lastTick = now
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			w.final()
			return
		}
	}
	w.tick(w.cfg.Now(), true)
}

// drain handles every record waiting in the socket; false when the
// socket failed.
func (w *Watcher) drain() bool {
	for {
		typ, text, err := w.r.Read()
		if err == errTimeout {
			return true
		}
		if err != nil {
			return false
		}
		w.handle(typ, text)
		w.stats.Overruns = w.r.Overruns
	}
}

// final collects the records still on their way, then reports
// everything pending and every folded count. The command has exited, so
// every record of its denials is queued in the kernel or delivered; the
// barrier is the kernel's audit queue being empty (AUDIT_GET backlog 0)
// with the socket drained. When the kernel does not answer, the fallback
// barrier is the deallocation record of each of the sandbox's domains
// that denied something: it is logged after its last process is gone,
// so after all of its access records (it comes tens of milliseconds
// late: the domain is freed after an RCU grace period). Both are bounded
// by finalWait.
func (w *Watcher) final() {
	deadline := time.Now().Add(finalWait)
	for w.drain() && time.Now().Before(deadline) {
		st, err := GetStatus()
		if err != nil {
			for w.drain() && len(w.alive) > 0 && time.Now().Before(deadline) {
				w.waitReadable(5 * time.Millisecond)
			}
			break
		}
		if st.Backlog > 0 {
			w.waitReadable(2 * time.Millisecond)
			continue
		}
		// One more look: kauditd may be between dequeue and send
		// (microseconds).
		time.Sleep(200 * time.Microsecond)
		w.drain()
		break
	}
	w.tick(w.cfg.Now(), true)
}

// finalWait bounds how long Stop waits for records still on their way.
const finalWait = 2 * time.Second

// waitReadable waits until a record arrives or d passes.
func (w *Watcher) waitReadable(d time.Duration) {
	fds := []unix.PollFd{{Fd: int32(w.r.fd), Events: unix.POLLIN}}
	unix.Poll(fds, int(d/time.Millisecond))
}

// tick reports events whose end record never came, and due folded
// counts (all of them when final).
func (w *Watcher) tick(now time.Time, final bool) {
	for serial, ev := range w.pending {
		if final || now.Sub(ev.arrived) >= pendingAge {
			delete(w.pending, serial)
			w.finish(ev, now)
		}
	}
	for _, d := range w.lim.flush(now, final) {
		w.stats.Emitted++
		w.cfg.Emit(d)
	}
}

// serialOf extracts the serial of a record without parsing its fields.
func serialOf(text []byte) (uint64, bool) {
	c := bytes.IndexByte(text, ':')
	e := bytes.IndexByte(text, ')')
	if c < 0 || e < c {
		return 0, false
	}
	s, err := strconv.ParseUint(string(text[c+1:e]), 10, 64)
	return s, err == nil
}

func (w *Watcher) handle(typ uint16, text []byte) {
	w.stats.Records++
	switch typ {
	case TypeLandlockAccess:
		rec, err := ParseRecord(typ, text)
		if err != nil {
			return
		}
		ev := w.pending[rec.Serial]
		if ev == nil {
			if len(w.pending) >= maxPending {
				w.tick(w.cfg.Now(), false)
				if len(w.pending) >= maxPending {
					w.tick(w.cfg.Now().Add(pendingAge), false)
				}
			}
			ev = &event{arrived: w.cfg.Now()}
			w.pending[rec.Serial] = ev
		}
		if len(ev.access) < 16 {
			ev.access = append(ev.access, rec)
		}
	case TypeLandlockDomain:
		rec, err := ParseRecord(typ, text)
		if err != nil {
			return
		}
		id, _ := rec.Get("domain")
		status, _ := rec.Get("status")
		switch status {
		case "allocated":
			pid, err := strconv.Atoi(get(&rec, "pid"))
			if err != nil || id == "" {
				return
			}
			if len(w.domains) >= maxDomains {
				for k, mine := range w.domains {
					if !mine {
						delete(w.domains, k)
					}
				}
			}
			if _, seen := w.domains[id]; !seen {
				mine := w.cfg.Owns(pid)
				w.domains[id] = mine
				if mine {
					w.alive[id] = true
				}
			}
		case "deallocated":
			// Every denial of the domain was logged before its last
			// process left it: report its pending events while the
			// domain is still known. Only its own: another domain's
			// event may still wait for its syscall record (the process
			// that was denied), and finishing it now would report it
			// without the process.
			for serial, ev := range w.pending {
				if ev.names(id) {
					delete(w.pending, serial)
					w.finish(ev, w.cfg.Now())
				}
			}
			delete(w.alive, id)
			delete(w.domains, id)
		}
	case TypeSyscall, TypeEOE:
		serial, ok := serialOf(text)
		if !ok {
			return
		}
		ev := w.pending[serial]
		if ev == nil {
			return
		}
		if typ == TypeSyscall {
			if rec, err := ParseRecord(typ, text); err == nil {
				ev.sys = &rec
			}
			return
		}
		delete(w.pending, serial)
		w.finish(ev, w.cfg.Now())
	}
}

// finish turns one audit event's access records into denials of this
// sandbox, folds repeats and emits the rest.
func (w *Watcher) finish(ev *event, now time.Time) {
	var pid int
	if ev.sys != nil {
		pid, _ = strconv.Atoi(get(ev.sys, "pid"))
	}
	for i := range ev.access {
		a := &ev.access[i]
		id := get(a, "domain")
		mine, known := w.domains[id]
		if !known && pid > 0 && w.cfg.Owns(pid) {
			// The creator's record was missed or its process is gone;
			// the denied process is in the sandbox, so the domain is the
			// sandbox's (or nested in it).
			mine = true
			w.domains[id] = true
		}
		if !mine {
			w.stats.Foreign++
			continue
		}
		d := Denial{Millis: a.Millis, Domain: id, Path: get(a, "path"), OComm: get(a, "ocomm")}
		if b := get(a, "blockers"); b != "" {
			d.Blockers = strings.Split(b, ",")
		}
		d.OPID, _ = strconv.Atoi(get(a, "opid"))
		if ev.sys != nil {
			d.PID, d.Exe, d.Comm = pid, get(ev.sys, "exe"), get(ev.sys, "comm")
		}
		w.stats.Denials++
		if !w.lim.admit(&d, now) {
			w.stats.Suppressed++
			continue
		}
		w.stats.Emitted++
		w.cfg.Emit(d)
	}
}
