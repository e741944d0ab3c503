package proxy

import (
	"hash/maphash"
	"sync"
	"time"
)

// denyLimiter folds repeated denials of the same (outcome, host, port,
// binary) so that a looping agent cannot flood the event log:
//
//   - the first denial of a key is reported at once (count 1);
//   - later ones within window of the last report are suppressed and
//     counted;
//   - the next denial after the window is reported with count = suppressed
//   - 1 and start_time = the first suppressed occurrence;
//   - flush (called every window) reports keys whose window has passed
//     with suppressed occurrences and no new denial, so no count is lost.
//
// Keys live in shards, each with its own mutex, so denials of different
// destinations do not contend. A shard holds at most maxKeys/shards keys;
// when full, denials of new keys fold into one overflow key per shard.
type denyLimiter struct {
	window time.Duration
	seed   maphash.Seed
	shards [limiterShards]limiterShard
}

const (
	limiterShards = 16
	limiterKeys   = 8192 // over all shards
)

type limiterShard struct {
	mu   sync.Mutex
	keys map[denyKey]*denyState
}

type denyKey struct {
	outcome, host, binary string
	port                  int
}

// overflowKey collects denials of new keys while a shard is full.
var overflowKey = denyKey{outcome: "overflow"}

type denyState struct {
	lastReport time.Time
	suppressed int
	first      time.Time // first suppressed occurrence
	last       *Record   // most recent suppressed record
}

func newDenyLimiter(window time.Duration) *denyLimiter {
	l := &denyLimiter{window: window, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].keys = make(map[denyKey]*denyState)
	}
	return l
}

func (l *denyLimiter) shard(k denyKey) *limiterShard {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(k.host)
	h.WriteString(k.binary)
	return &l.shards[h.Sum64()%limiterShards]
}

// admit decides whether r (a denial at now) is reported. When it is, r's
// Count and First are set for the event.
func (l *denyLimiter) admit(r *Record, now time.Time) bool {
	if l.window <= 0 {
		r.Count = 1
		return true
	}
	k := denyKey{outcome: r.Outcome, host: r.Host, binary: r.binary(), port: r.Port}
	s := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.keys[k]
	if !ok {
		if len(s.keys) >= limiterKeys/limiterShards {
			l.sweepLocked(s, now)
		}
		if len(s.keys) >= limiterKeys/limiterShards {
			k = overflowKey
			st = s.keys[k]
		}
		if st == nil {
			s.keys[k] = &denyState{lastReport: now}
			r.Count = 1
			return true
		}
	}
	if now.Sub(st.lastReport) >= l.window {
		r.Count = st.suppressed + 1
		r.First = st.first
		if st.suppressed == 0 {
			r.First = time.Time{}
		}
		st.lastReport, st.suppressed, st.first, st.last = now, 0, time.Time{}, nil
		return true
	}
	if st.suppressed == 0 {
		st.first = r.Start
	}
	st.suppressed++
	st.last = r
	return false
}

// flush returns the records of keys whose suppressed occurrences are due
// (window passed since the last report), each with Count and First set,
// and forgets keys idle for more than two windows.
func (l *denyLimiter) flush(now time.Time) []*Record {
	var out []*Record
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k, st := range s.keys {
			age := now.Sub(st.lastReport)
			switch {
			case st.suppressed > 0 && age >= l.window:
				r := st.last
				r.Count, r.First = st.suppressed, st.first
				out = append(out, r)
				st.lastReport, st.suppressed, st.first, st.last = now, 0, time.Time{}, nil
			case st.suppressed == 0 && age >= 2*l.window:
				delete(s.keys, k)
			}
		}
		s.mu.Unlock()
	}
	return out
}

// sweepLocked drops idle keys of one shard.
func (l *denyLimiter) sweepLocked(s *limiterShard, now time.Time) {
	for k, st := range s.keys {
		if st.suppressed == 0 && now.Sub(st.lastReport) >= l.window {
			delete(s.keys, k)
		}
	}
}
