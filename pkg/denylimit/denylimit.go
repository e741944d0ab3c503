// Package denylimit folds repeated denials so that a looping agent cannot
// flood the event log, while no occurrence goes uncounted. The egress
// proxy folds network denials with it, the supervisor filesystem denials.
//
// For each key (what makes two denials "the same"):
//
//   - the first denial is reported at once (count 1);
//   - later ones within the window of the last report are suppressed and
//     counted;
//   - the next denial after the window is reported with the suppressed
//     ones counted in (count = suppressed + 1, first = the first of
//     them);
//   - Flush (call it every window, and with all set at the end) reports
//     keys whose window has passed with suppressed occurrences and no new
//     denial, so no count is lost, and forgets keys idle for two windows.
//
// Keys live in shards, each with its own mutex, so denials of different
// keys do not contend. The limiter holds at most maxKeys keys; while a
// shard is full, denials of new keys fold into the overflow key, so a
// burst of distinct denials yields a bounded number of reports.
package denylimit

import (
	"hash/maphash"
	"sync"
	"time"
)

const shards = 16

// Limiter folds denials of values V by keys K. It is safe for concurrent
// use.
type Limiter[K comparable, V any] struct {
	window   time.Duration
	perShard int
	overflow K
	seed     maphash.Seed
	shards   [shards]shard[K, V]
}

type shard[K comparable, V any] struct {
	mu   sync.Mutex
	keys map[K]*state[V]
}

type state[V any] struct {
	lastReport time.Time
	suppressed int
	first      time.Time // first suppressed occurrence
	last       V         // most recent suppressed value
}

// Folded is a suppressed denial that is due: the most recent value, how
// many occurrences it stands for and when the first of them happened.
type Folded[V any] struct {
	Value V
	Count int
	First time.Time
}

// New returns a limiter with the given window (<= 0: report everything)
// and key bound; overflow is the key denials of new keys fold into while
// the limiter is full.
func New[K comparable, V any](window time.Duration, maxKeys int, overflow K) *Limiter[K, V] {
	l := &Limiter[K, V]{window: window, perShard: max(maxKeys/shards, 1), overflow: overflow, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].keys = make(map[K]*state[V])
	}
	return l
}

func (l *Limiter[K, V]) shard(k K) *shard[K, V] {
	return &l.shards[maphash.Comparable(l.seed, k)%shards]
}

// Admit decides whether the denial v of key k, which happened at, is
// reported now. When it is, count is the number of occurrences the
// report stands for and first the first folded one (zero when none).
func (l *Limiter[K, V]) Admit(k K, v V, at, now time.Time) (count int, first time.Time, report bool) {
	if l.window <= 0 {
		return 1, time.Time{}, true
	}
	s := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.keys[k]
	if !ok {
		if len(s.keys) >= l.perShard {
			l.sweepLocked(s, now)
		}
		if len(s.keys) >= l.perShard {
			k = l.overflow
			st = s.keys[k]
		}
		if st == nil {
			s.keys[k] = &state[V]{lastReport: now}
			return 1, time.Time{}, true
		}
	}
	if now.Sub(st.lastReport) >= l.window {
		count, first = st.suppressed+1, st.first
		var zero V
		st.lastReport, st.suppressed, st.first, st.last = now, 0, time.Time{}, zero
		return count, first, true
	}
	if st.suppressed == 0 {
		st.first = at
	}
	st.suppressed++
	st.last = v
	return 0, time.Time{}, false
}

// Flush returns the suppressed denials that are due at now (all of them
// when all is set) and forgets keys idle for more than two windows.
func (l *Limiter[K, V]) Flush(now time.Time, all bool) []Folded[V] {
	var out []Folded[V]
	var zero V
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k, st := range s.keys {
			age := now.Sub(st.lastReport)
			switch {
			case st.suppressed > 0 && (all || age >= l.window):
				out = append(out, Folded[V]{Value: st.last, Count: st.suppressed, First: st.first})
				st.lastReport, st.suppressed, st.first, st.last = now, 0, time.Time{}, zero
			case st.suppressed == 0 && age >= 2*l.window:
				delete(s.keys, k)
			}
		}
		s.mu.Unlock()
	}
	return out
}

// sweepLocked drops the idle keys of one shard.
func (l *Limiter[K, V]) sweepLocked(s *shard[K, V], now time.Time) {
	for k, st := range s.keys {
		if st.suppressed == 0 && now.Sub(st.lastReport) >= l.window {
			delete(s.keys, k)
		}
	}
}
