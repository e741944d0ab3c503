// Package denylimit folds repeated denials so that a looping agent cannot
// flood the event log, while no occurrence goes uncounted. The egress
// proxy folds network denials with it, the policy DNS refused names, the
// supervisor filesystem denials.
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
// A Detailed limiter also keeps what the denials of one key were within
// the window: each denial carries a detail (the proxy's method, path and
// reason; the policy DNS's name), the first denial of each distinct
// detail is reported in full (up to maxDetail of them per window), and a
// report that stands for suppressed denials lists up to maxDetail
// distinct details with their counts. A burst of different denials is
// then seen for what it was, in a bounded number of reports.
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

// Detailed folds denials of values V by keys K, keeping details D. It is
// safe for concurrent use.
type Detailed[K comparable, D comparable, V any] struct {
	window    time.Duration
	perShard  int
	maxDetail int
	overflow  K
	seed      maphash.Seed
	shards    [shards]shard[K, D, V]
}

type shard[K comparable, D comparable, V any] struct {
	mu   sync.Mutex
	keys map[K]*state[D, V]
}

type state[D comparable, V any] struct {
	lastReport time.Time
	suppressed int
	first      time.Time // first suppressed occurrence
	last       V         // most recent suppressed value
	named      []D       // details reported in full this window
	tallies    []Tally[D]
}

// Tally is one detail of the suppressed denials and how many there were.
type Tally[D any] struct {
	Detail D
	Count  int
}

// Report is Admit's verdict: whether the denial is reported now and,
// when it is, how many occurrences the report stands for (Count), when
// the first folded one happened (First; zero when none) and, for a
// report that stands for suppressed ones, their details (Tallies, with
// the reported denial's own).
type Report[D any] struct {
	Report  bool
	Count   int
	First   time.Time
	Tallies []Tally[D]
}

// FoldedDetail is a suppressed denial that is due: the most recent
// value, how many occurrences it stands for, when the first of them
// happened, and up to maxDetail of their details with counts.
type FoldedDetail[D, V any] struct {
	Value   V
	Count   int
	First   time.Time
	Tallies []Tally[D]
}

// NewDetailed returns a limiter with the given window (<= 0: report
// everything), key bound and detail bound per key and window; overflow
// is the key denials of new keys fold into while the limiter is full.
func NewDetailed[K comparable, D comparable, V any](window time.Duration, maxKeys int, overflow K, maxDetail int) *Detailed[K, D, V] {
	l := &Detailed[K, D, V]{window: window, perShard: max(maxKeys/shards, 1), maxDetail: max(maxDetail, 0), overflow: overflow, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].keys = make(map[K]*state[D, V])
	}
	return l
}

func (l *Detailed[K, D, V]) shard(k K) *shard[K, D, V] {
	return &l.shards[maphash.Comparable(l.seed, k)%shards]
}

// Admit decides whether the denial v of key k with detail d, which
// happened at, is reported now.
func (l *Detailed[K, D, V]) Admit(k K, d D, v V, at, now time.Time) Report[D] {
	if l.window <= 0 {
		return Report[D]{Report: true, Count: 1}
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
			st = &state[D, V]{lastReport: now}
			s.keys[k] = st
			st.name(d, l.maxDetail)
			return Report[D]{Report: true, Count: 1}
		}
	}
	if now.Sub(st.lastReport) >= l.window {
		r := Report[D]{Report: true, Count: st.suppressed + 1, First: st.first}
		if st.suppressed > 0 {
			st.tally(d, l.maxDetail)
			r.Tallies = st.tallies
		}
		var zero V
		st.lastReport, st.suppressed, st.first, st.last, st.named, st.tallies = now, 0, time.Time{}, zero, st.named[:0], nil
		st.name(d, l.maxDetail)
		return r
	}
	if st.name(d, l.maxDetail) {
		return Report[D]{Report: true, Count: 1} // a new detail this window
	}
	if st.suppressed == 0 {
		st.first = at
	}
	st.suppressed++
	st.last = v
	st.tally(d, l.maxDetail)
	return Report[D]{}
}

// name records d as reported in full this window, when it is new and
// there is room; it reports whether it did.
func (st *state[D, V]) name(d D, maxDetail int) bool {
	for _, n := range st.named {
		if n == d {
			return false
		}
	}
	if len(st.named) >= maxDetail {
		return false
	}
	st.named = append(st.named, d)
	return true
}

// tally counts one suppressed denial with detail d (while there is room
// for a new detail; beyond it, only the total counts it).
func (st *state[D, V]) tally(d D, maxDetail int) {
	for i := range st.tallies {
		if st.tallies[i].Detail == d {
			st.tallies[i].Count++
			return
		}
	}
	if len(st.tallies) < maxDetail {
		st.tallies = append(st.tallies, Tally[D]{Detail: d, Count: 1})
	}
}

// Flush returns the suppressed denials that are due at now (all of them
// when all is set) and forgets keys idle for more than two windows. A
// key flushed starts a new window: its details are named afresh.
func (l *Detailed[K, D, V]) Flush(now time.Time, all bool) []FoldedDetail[D, V] {
	var out []FoldedDetail[D, V]
	var zero V
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k, st := range s.keys {
			age := now.Sub(st.lastReport)
			switch {
			case st.suppressed > 0 && (all || age >= l.window):
				out = append(out, FoldedDetail[D, V]{Value: st.last, Count: st.suppressed, First: st.first, Tallies: st.tallies})
				st.lastReport, st.suppressed, st.first, st.last, st.named, st.tallies = now, 0, time.Time{}, zero, nil, nil
			case st.suppressed == 0 && age >= 2*l.window:
				delete(s.keys, k)
			case st.suppressed == 0 && age >= l.window:
				st.named = st.named[:0]
			}
		}
		s.mu.Unlock()
	}
	return out
}

// sweepLocked drops the idle keys of one shard.
func (l *Detailed[K, D, V]) sweepLocked(s *shard[K, D, V], now time.Time) {
	for k, st := range s.keys {
		if st.suppressed == 0 && now.Sub(st.lastReport) >= l.window {
			delete(s.keys, k)
		}
	}
}

// Limiter folds denials of values V by keys K, without details. It is
// safe for concurrent use.
type Limiter[K comparable, V any] struct {
	d *Detailed[K, struct{}, V]
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
	return &Limiter[K, V]{d: NewDetailed[K, struct{}, V](window, maxKeys, overflow, 0)}
}

// Admit decides whether the denial v of key k, which happened at, is
// reported now. When it is, count is the number of occurrences the
// report stands for and first the first folded one (zero when none).
func (l *Limiter[K, V]) Admit(k K, v V, at, now time.Time) (count int, first time.Time, report bool) {
	r := l.d.Admit(k, struct{}{}, v, at, now)
	return r.Count, r.First, r.Report
}

// Flush returns the suppressed denials that are due at now (all of them
// when all is set) and forgets keys idle for more than two windows.
func (l *Limiter[K, V]) Flush(now time.Time, all bool) []Folded[V] {
	var out []Folded[V]
	for _, f := range l.d.Flush(now, all) {
		out = append(out, Folded[V]{Value: f.Value, Count: f.Count, First: f.First})
	}
	return out
}
