package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultStaleAfter is seed 000's default grace period for sandbox-gc.
const DefaultStaleAfter = 24 * time.Hour

// StaleAfterEnv is the seed 000 knob for the minimum gc age, in seconds.
const StaleAfterEnv = "MAC_OPENSHELL_STALE_AFTER_SECONDS"

// StaleAfterFromEnv reads StaleAfterEnv through getenv (os.Getenv in a
// binary). Unset or empty yields DefaultStaleAfter; anything but a
// non-negative integer number of seconds is an error naming the variable.
func StaleAfterFromEnv(getenv func(string) string) (time.Duration, error) {
	v := strings.TrimSpace(getenv(StaleAfterEnv))
	if v == "" {
		return DefaultStaleAfter, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > int64(1<<62)/int64(time.Second) {
		return 0, fmt.Errorf("%s=%q: want a non-negative whole number of seconds", StaleAfterEnv, v)
	}
	return time.Duration(n) * time.Second, nil
}

// Decision is sandbox-gc's verdict on one sandbox. Reason says why it is
// collected, or names every condition that protects it ("creator pid 1234
// alive", "keep=true", "age 3m0s < 24h0m0s", "unreadable labels: ...").
type Decision struct {
	Name    string        `json:"name"`
	Collect bool          `json:"collect"`
	Reason  string        `json:"reason"`
	Age     time.Duration `json:"-"`
	// Labels are the labels read at planning time; for unreadable labels
	// only Name is set. The remove hook receives them.
	Labels     Labels `json:"-"`
	Unreadable bool   `json:"unreadable,omitempty"`
	// IncludeKept is set for a sandbox the operator named with
	// --include-kept: neither keep=true nor its age protects it, but a
	// live creator or init (its processes run) still does.
	IncludeKept bool `json:"-"`
}

// Plan is the outcome of a gc dry run.
type Plan struct {
	Now        time.Time
	StaleAfter time.Duration
	Decisions  []Decision // sorted by name
}

// Plan decides, for every sandbox under the root, whether gc would collect
// it at time now with the given minimum age. It changes nothing.
// includeKept names sandboxes to collect although they are kept (and
// whatever their age), unless their creator or init still runs; a name
// that does not exist is an error.
func (s *Store) Plan(now time.Time, staleAfter time.Duration, includeKept ...string) (Plan, error) {
	if staleAfter < 0 {
		return Plan{}, fmt.Errorf("stale-after %s: must not be negative", staleAfter)
	}
	ents, err := s.List()
	if err != nil {
		return Plan{}, err
	}
	named := map[string]bool{}
	for _, n := range includeKept {
		named[n] = true
	}
	p := Plan{Now: now, StaleAfter: staleAfter}
	for _, e := range ents {
		p.Decisions = append(p.Decisions, s.decide(e, now, staleAfter, named[e.Name]))
		delete(named, e.Name)
	}
	for _, n := range includeKept {
		if named[n] {
			return Plan{}, fmt.Errorf("--include-kept %s: no such sandbox in %s", n, s.root)
		}
	}
	return p, nil
}

func (s *Store) decide(e Entry, now time.Time, staleAfter time.Duration, includeKept bool) Decision {
	d := Decision{Name: e.Name, Labels: e.Labels, IncludeKept: includeKept}
	if includeKept && e.Err == nil {
		staleAfter = 0
	}
	if e.Err != nil {
		// Nothing says who made it or whether to keep it: only its age
		// protects it.
		d.Unreadable = true
		d.Age = now.Sub(e.ModTime)
		if d.Age >= staleAfter {
			d.Collect = true
			d.Reason = fmt.Sprintf("unreadable labels (%v); directory age %s >= %s", e.Err, roundAge(d.Age), staleAfter)
		} else {
			d.Reason = fmt.Sprintf("unreadable labels (%v); directory age %s < %s", e.Err, roundAge(d.Age), staleAfter)
		}
		return d
	}
	l := e.Labels
	created := l.Created
	if created.IsZero() {
		created = e.ModTime
	}
	d.Age = now.Sub(created)

	var protect, why []string
	if d.Age < staleAfter {
		protect = append(protect, fmt.Sprintf("age %s < %s", roundAge(d.Age), staleAfter))
	} else {
		why = append(why, fmt.Sprintf("age %s >= %s", roundAge(d.Age), staleAfter))
	}
	alive, creator := s.creatorState(l)
	if alive {
		protect = append(protect, creator)
	} else {
		why = append(why, creator)
	}
	switch {
	case l.Keep && includeKept:
		why = append(why, "keep=true overridden by --include-kept")
		if alive, init := s.initState(l); alive {
			protect = append(protect, init)
		}
	case l.Keep:
		protect = append(protect, "keep=true")
	default:
		why = append(why, "keep=false")
	}
	if len(protect) > 0 {
		d.Reason = strings.Join(protect, "; ")
		return d
	}
	d.Collect = true
	d.Reason = strings.Join(why, "; ")
	return d
}

// creatorState reports whether the sandbox's creator still runs, and a
// phrase saying so. A pid with a different start time is a recycled pid,
// not the creator. Without a recorded start time a live pid counts as the
// creator (the safe reading).
func (s *Store) creatorState(l Labels) (bool, string) {
	if l.CreatorPID <= 0 {
		return false, "creator pid unknown"
	}
	st, err := procStartTime(s.procRoot, l.CreatorPID)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, fmt.Sprintf("creator pid %d gone", l.CreatorPID)
	case err != nil:
		// Cannot tell: fail safe and keep the sandbox.
		return true, fmt.Sprintf("creator pid %d state unknown (%v)", l.CreatorPID, err)
	case l.CreatorStartTime == 0 || st == l.CreatorStartTime:
		return true, fmt.Sprintf("creator pid %d alive", l.CreatorPID)
	default:
		return false, fmt.Sprintf("creator pid %d recycled (start time %d, creator's was %d)", l.CreatorPID, st, l.CreatorStartTime)
	}
}

// CreatorAlive reports whether the sandbox's creator (its supervisor, the
// owner of a detached sandbox) still runs: its pid with the recorded
// start time.
func (s *Store) CreatorAlive(l Labels) bool {
	alive, _ := s.creatorState(l)
	return alive
}

// initState reports whether the sandbox's init (and so its processes)
// still runs, by pid and start time.
func (s *Store) initState(l Labels) (bool, string) {
	if l.InitPID <= 0 {
		return false, ""
	}
	st, err := procStartTime(s.procRoot, l.InitPID)
	if err == nil && (l.InitStartTime == 0 || st == l.InitStartTime) {
		return true, fmt.Sprintf("init pid %d alive (its processes run)", l.InitPID)
	}
	return false, ""
}

// Observed returns l with the status a reader should see: a sandbox
// recorded as created or running whose creator (pid and start time) is
// gone is StatusOrphaned, whatever labels.json says.
func (s *Store) Observed(l Labels) Labels {
	if l.Status == StatusExited {
		return l
	}
	if alive, _ := s.creatorState(l); !alive {
		l.Status = StatusOrphaned
	}
	return l
}

func roundAge(d time.Duration) time.Duration {
	if d > time.Minute || d < -time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// Outcome is what Apply did with one collectable sandbox.
type Outcome struct {
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
	Reason  string `json:"reason"`
	Err     error  `json:"-"`
}

// Apply removes every sandbox the plan marks for collection. Each one is
// re-checked under its lock first with the plan's stale age (a sandbox
// that gained keep=true or a live creator since the dry run is left
// alone). remove tears down what the sandbox owns outside the state dir
// (processes, cgroup, netns); when it fails the state is kept so a later
// gc retries. The returned error joins every failure.
func (s *Store) Apply(p Plan, remove func(Labels) error) ([]Outcome, error) {
	var out []Outcome
	var errs []error
	for _, d := range p.Decisions {
		if !d.Collect {
			continue
		}
		o := s.collect(d.Name, p.StaleAfter, d.IncludeKept, remove)
		if o.Err != nil {
			errs = append(errs, o.Err)
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

func (s *Store) collect(name string, staleAfter time.Duration, includeKept bool, remove func(Labels) error) Outcome {
	o := Outcome{Name: name}
	dir, err := s.Dir(name)
	if err != nil {
		o.Err = err
		return o
	}
	unlock, err := lockDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			o.Reason = "already gone"
			return o
		}
		o.Err = fmt.Errorf("gc sandbox %q: lock: %w", name, err)
		return o
	}
	defer unlock()
	e := Entry{Name: name}
	if fi, err := os.Lstat(dir); err == nil {
		e.ModTime = fi.ModTime()
	}
	e.Labels, e.Err = readLabels(dir, name)
	if e.Err != nil {
		e.Labels = Labels{Name: name}
	}
	d := s.decide(e, time.Now(), staleAfter, includeKept)
	o.Reason = d.Reason
	if !d.Collect {
		return o
	}
	if remove != nil {
		if err := remove(d.Labels); err != nil {
			o.Err = fmt.Errorf("gc sandbox %q: tear down: %w", name, err)
			return o
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		o.Err = fmt.Errorf("gc sandbox %q: %w", name, err)
		return o
	}
	o.Removed = true
	return o
}

// WaitExited waits until the sandbox name, with id, is recorded as exited
// with its main process's status (its owner writes that the moment the
// main process ends) and returns its labels. It fails when the sandbox is
// deleted or replaced first, or when its creator ends without recording
// a status. It polls, 10 ms at first and then up to every 250 ms, for as
// long as the creator lives.
func (s *Store) WaitExited(name, id string) (Labels, error) {
	poll := 10 * time.Millisecond
	for creatorGone := false; ; {
		l, err := s.Get(name)
		switch {
		case err != nil:
			return Labels{}, fmt.Errorf("sandbox %s ended and its state is gone: %w", name, err)
		case l.ID != id:
			return Labels{}, fmt.Errorf("sandbox %s (id %s) was deleted; the name now has id %s", name, id, l.ID)
		case l.Status == StatusExited && l.ExitCode != nil:
			return l, nil
		case creatorGone:
			return Labels{}, fmt.Errorf("sandbox %s: its owner (pid %d) ended without recording the main process's status", name, l.CreatorPID)
		}
		// One more read after the creator is seen gone: it records the
		// status before it ends.
		creatorGone = !s.CreatorAlive(l)
		if !creatorGone {
			time.Sleep(poll)
			poll = min(2*poll, 250*time.Millisecond)
		}
	}
}
