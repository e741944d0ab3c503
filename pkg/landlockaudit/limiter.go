package landlockaudit

import (
	"strings"
	"time"
)

// limiter folds repeated denials of the same (rights, path, executable)
// the way the egress proxy folds repeated network denials:
//
//   - the first denial of a key is reported at once (count 1);
//   - later ones within window of the last report are suppressed and
//     counted;
//   - the next denial after the window is reported with the suppressed
//     ones counted in (count = suppressed + 1, first = the first of them);
//   - flush reports keys whose window has passed with suppressed
//     denials and no new one, so no count is lost.
//
// It holds at most maxKeys keys; while full, denials of new keys fold
// into one overflow key, so a burst of distinct paths yields a bounded
// number of events. The Watcher's goroutine is its only user.
type limiter struct {
	window  time.Duration
	maxKeys int
	keys    map[limitKey]*limitState
}

type limitKey struct{ rights, path, exe string }

var limitOverflow = limitKey{rights: "overflow"}

type limitState struct {
	lastReport time.Time
	suppressed int
	first      int64   // Millis of the first suppressed denial
	last       *Denial // the most recent suppressed denial
}

func newLimiter(window time.Duration, maxKeys int) *limiter {
	return &limiter{window: window, maxKeys: maxKeys, keys: map[limitKey]*limitState{}}
}

// admit reports whether d (arriving at now) is emitted; when it is, its
// Count and FirstMilli are set.
func (l *limiter) admit(d *Denial, now time.Time) bool {
	d.Count = 1
	if l.window <= 0 {
		return true
	}
	k := limitKey{rights: strings.Join(d.Blockers, ","), path: d.Path, exe: d.Exe}
	st, ok := l.keys[k]
	if !ok {
		if len(l.keys) >= l.maxKeys {
			l.sweep(now)
		}
		if len(l.keys) >= l.maxKeys {
			k = limitOverflow
			st = l.keys[k]
		}
		if st == nil {
			l.keys[k] = &limitState{lastReport: now}
			return true
		}
	}
	if now.Sub(st.lastReport) >= l.window {
		d.Count = st.suppressed + 1
		if st.suppressed > 0 {
			d.FirstMilli = st.first
		}
		st.lastReport, st.suppressed, st.first, st.last = now, 0, 0, nil
		return true
	}
	if st.suppressed == 0 {
		st.first = d.Millis
	}
	st.suppressed++
	st.last = d
	return false
}

// flush returns the suppressed denials that are due (all of them when
// all is set), each with Count and FirstMilli, and forgets idle keys.
func (l *limiter) flush(now time.Time, all bool) []Denial {
	var out []Denial
	for k, st := range l.keys {
		age := now.Sub(st.lastReport)
		switch {
		case st.suppressed > 0 && (all || age >= l.window):
			d := *st.last
			d.Count, d.FirstMilli = st.suppressed, st.first
			out = append(out, d)
			st.lastReport, st.suppressed, st.first, st.last = now, 0, 0, nil
		case st.suppressed == 0 && age >= 2*l.window:
			delete(l.keys, k)
		}
	}
	return out
}

func (l *limiter) sweep(now time.Time) {
	for k, st := range l.keys {
		if st.suppressed == 0 && now.Sub(st.lastReport) >= l.window {
			delete(l.keys, k)
		}
	}
}
