package proxy

import (
	"time"

	"github.com/palisade-sandbox/palisade/pkg/denylimit"
)

// denyLimiter folds repeated denials of the same (outcome, host, port,
// binary) so that a looping agent cannot flood the event log (see package
// denylimit: the first at once, then one report per window with the
// count, nothing lost; at most limiterKeys keys, new ones folding into
// one overflow key while full).
type denyLimiter struct {
	l *denylimit.Limiter[denyKey, *Record]
}

const limiterKeys = 8192

type denyKey struct {
	outcome, host, binary string
	port                  int
}

// overflowKey collects denials of new keys while the limiter is full.
var overflowKey = denyKey{outcome: "overflow"}

func newDenyLimiter(window time.Duration) *denyLimiter {
	return &denyLimiter{l: denylimit.New[denyKey, *Record](window, limiterKeys, overflowKey)}
}

// admit decides whether r (a denial at now) is reported. When it is, r's
// Count and First are set for the event.
func (d *denyLimiter) admit(r *Record, now time.Time) bool {
	count, first, ok := d.l.Admit(denyKey{outcome: r.Outcome, host: r.Host, binary: r.binary(), port: r.Port}, r, r.Start, now)
	if ok {
		r.Count, r.First = count, first
	}
	return ok
}

// flush returns the records of keys whose suppressed occurrences are due
// (window passed since the last report), each with Count and First set.
func (d *denyLimiter) flush(now time.Time) []*Record {
	var out []*Record
	for _, f := range d.l.Flush(now, false) {
		f.Value.Count, f.Value.First = f.Count, f.First
		out = append(out, f.Value)
	}
	return out
}
