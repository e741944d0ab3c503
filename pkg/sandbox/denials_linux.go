//go:build linux

package sandbox

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/landlock"
	"github.com/palisade-sandbox/palisade/pkg/landlockaudit"
)

// DenialEvents is the optional part of Events that reports refused
// filesystem accesses. OCSFEvents implements it; an Events without it
// gets no denial reporting (and the supervisor reads no audit records).
type DenialEvents interface {
	// FileDenied: Landlock refused an access in the sandbox (called from
	// the denial watcher's goroutine).
	FileDenied(d landlockaudit.Denial)
	// DenialLogging: refused accesses will (or cannot) be reported.
	DenialLogging(enabled bool, detail string)
}

// acquireAudit is the audit-enablement seam: tests simulate audit being
// unavailable.
var acquireAudit = landlockaudit.Acquire

// watchAudit is the watcher seam: tests read the records late.
var watchAudit = landlockaudit.Watch

// denialWatch is a running denial reporter: the audit lease and the
// watcher. Its zero value (nothing started) stops as a no-op.
type denialWatch struct {
	lease *landlockaudit.Lease
	w     *landlockaudit.Watcher
	once  sync.Once
	done  chan struct{}
	stats landlockaudit.Stats
	err   error
	// initPID is the sandbox init's host pid (0 until known). The init
	// creates the sandbox's Landlock domain (it confines itself and
	// spawns the command and every exec from its confined thread), so
	// the kernel names it as the domain's creator.
	initPID atomic.Int64
}

// setInit records the init's host pid before the command can be denied
// anything.
func (d *denialWatch) setInit(pid int) {
	if d != nil {
		d.initPID.Store(int64(pid))
	}
}

// owns reports whether pid is the sandbox's: its init, or a process in
// its cgroup. The init is known by pid, not asked for: the watcher may
// read a domain's first records after the command and the init have
// exited (a loaded host, a command that lives a few milliseconds), when
// no cgroup holds them any more, and then took the sandbox's own domain
// for another's and reported none of its denials. The supervisor is the
// init's parent, so the pid cannot be another process's before the
// init is reaped; the watcher ends within its final drain after that.
func (d *denialWatch) owns(cg *cgroup.Group, pid int) bool {
	if p := d.initPID.Load(); p > 0 && int64(pid) == p {
		return true
	}
	procs, err := cg.Procs()
	return err == nil && slices.Contains(procs, pid)
}

// startDenials makes sure the kernel logs the sandbox's Landlock denials
// (enabling audit only when nobody owns it) and starts reading them. It
// never fails the sandbox: without audit it reports, once, that denials
// are not logged.
func startDenials(o Options, plan Plan, abi int, cg *cgroup.Group, name string) *denialWatch {
	de, ok := o.Events.(DenialEvents)
	if !ok || !plan.Landlock {
		return &denialWatch{}
	}
	if d, ok := o.Events.(interface{ Discards() bool }); ok && d.Discards() {
		// Events go nowhere: reading (and enabling) audit would be work
		// for nothing.
		return &denialWatch{}
	}
	if abi < landlock.MinLogABI {
		de.DenialLogging(false, fmt.Sprintf("Landlock ABI %d logs no denials (needs ABI >= %d, Linux >= 6.15)", abi, landlock.MinLogABI))
		return &denialWatch{}
	}
	lease := acquireAudit()
	if lease.Mode == landlockaudit.ModeUnavailable {
		de.DenialLogging(false, lease.Detail)
		o.Logger.Warn("filesystem denial events unavailable", "sandbox", name, "reason", lease.Detail)
		return &denialWatch{}
	}
	dw := &denialWatch{lease: lease}
	w, err := watchAudit(landlockaudit.Config{
		Owns: func(pid int) bool { return dw.owns(cg, pid) },
		Emit: de.FileDenied,
	})
	if err != nil {
		lease.Release()
		de.DenialLogging(false, err.Error())
		o.Logger.Warn("filesystem denial events unavailable", "sandbox", name, "reason", err)
		return &denialWatch{}
	}
	o.Logger.Debug("filesystem denial events", "sandbox", name, "audit", string(lease.Mode), "detail", lease.Detail)
	dw.w = w
	return dw
}

// finish starts, in the background, reading what is still on its way
// and releasing the audit lease (restoring audit when this was the last
// sandbox that turned it on). Call it once the command has exited: the
// final drain then overlaps the rest of the teardown.
func (d *denialWatch) finish() {
	if d == nil || d.w == nil {
		return
	}
	d.once.Do(func() {
		d.done = make(chan struct{})
		go func() {
			defer close(d.done)
			d.stats = d.w.Stop()
			d.err = d.lease.Release()
		}()
	})
}

// stop finishes and waits, and logs what the watcher saw.
func (d *denialWatch) stop(log *slog.Logger, name string) {
	if d == nil || d.w == nil {
		return
	}
	d.finish()
	<-d.done
	st := d.stats
	if st.Overruns > 0 {
		log.Warn("audit records lost to a full buffer", "sandbox", name, "overruns", st.Overruns)
	}
	log.Debug("filesystem denials", "sandbox", name, "denials", st.Denials, "events", st.Emitted,
		"folded", st.Suppressed, "foreign", st.Foreign, "records", st.Records)
	if d.err != nil {
		log.Warn("release audit", "sandbox", name, "err", d.err)
	}
}
