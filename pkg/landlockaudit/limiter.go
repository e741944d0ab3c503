package landlockaudit

import (
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/denylimit"
)

// limiter folds repeated denials of the same (rights, path, executable)
// the way the egress proxy folds repeated network denials (package
// denylimit): the first at once, then one report per window with the
// count; at most maxKeys keys, new ones folding into one overflow key.
type limiter struct {
	l *denylimit.Limiter[limitKey, Denial]
}

type limitKey struct{ rights, path, exe string }

var limitOverflow = limitKey{rights: "overflow"}

func newLimiter(window time.Duration, maxKeys int) *limiter {
	return &limiter{l: denylimit.New[limitKey, Denial](window, maxKeys, limitOverflow)}
}

// admit reports whether d (arriving at now) is emitted; when it is, its
// Count and FirstMilli are set.
func (l *limiter) admit(d *Denial, now time.Time) bool {
	k := limitKey{rights: strings.Join(d.Blockers, ","), path: d.Path, exe: d.Exe}
	count, first, ok := l.l.Admit(k, *d, time.UnixMilli(d.Millis), now)
	if ok {
		d.Count = count
		if !first.IsZero() {
			d.FirstMilli = first.UnixMilli()
		}
	}
	return ok
}

// flush returns the suppressed denials that are due (all of them when
// all is set), each with Count and FirstMilli.
func (l *limiter) flush(now time.Time, all bool) []Denial {
	var out []Denial
	for _, f := range l.l.Flush(now, all) {
		d := f.Value
		d.Count, d.FirstMilli = f.Count, f.First.UnixMilli()
		out = append(out, d)
	}
	return out
}
