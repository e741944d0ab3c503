package proxy

import (
	"time"

	"github.com/palisade-sandbox/palisade/pkg/denylimit"
	"github.com/palisade-sandbox/palisade/pkg/l7"
)

// denyLimiter folds repeated denials of the same (outcome, host, port,
// binary) so that a looping agent cannot flood the event log (see package
// denylimit: the first at once, then one report per window with the
// count, nothing lost; at most limiterKeys keys, new ones folding into
// one overflow key while full). Within a window the first denial of each
// distinct (method, path, reason, call) is still reported in full, up to
// maxDenialDetails of them, and a count report lists up to
// maxDenialDetails of the folded ones with their counts (Record.Tallies),
// so a burst of different refused requests to one host is seen for what
// it was: two MCP tools (JSON-RPC methods, GraphQL operations) refused
// on the same /mcp are two events, each naming its call.
//
// Memory stays bounded: at most limiterKeys keys, each holding at most
// maxDenialDetails named details and as many tallies; a detail's call is
// names of at most l7.MaxEventName bytes each (l7.EventName), and a
// client cycling through more distinct calls than that within a window
// is only counted.
type denyLimiter struct {
	l *denylimit.Detailed[denyKey, DenialDetail, *Record]
}

const (
	limiterKeys      = 8192
	maxDenialDetails = 16
)

type denyKey struct {
	outcome, host, binary string
	port                  int
}

// DenialDetail is what tells apart the denials of one key: the request's
// method and path (as it would have gone upstream, never the query), the
// reason, and the call a body-inspected request attempted (Record.Call;
// zero for the others).
type DenialDetail struct {
	Method string  `json:"method"`
	Path   string  `json:"path"`
	Reason string  `json:"reason"`
	Call   l7.Call `json:"l7_call,omitzero"`
}

// DenialTally is one DenialDetail of a count report and how many of the
// folded denials had it.
type DenialTally struct {
	DenialDetail
	Count int `json:"count"`
}

// overflowKey collects denials of new keys while the limiter is full.
var overflowKey = denyKey{outcome: "overflow"}

func newDenyLimiter(window time.Duration) *denyLimiter {
	return &denyLimiter{l: denylimit.NewDetailed[denyKey, DenialDetail, *Record](window, limiterKeys, overflowKey, maxDenialDetails)}
}

func (r *Record) denialDetail() DenialDetail {
	d := DenialDetail{Method: r.Method, Reason: r.Reason, Call: r.Call}
	if r.URL != nil {
		d.Path = r.URL.EscapedPath()
	}
	return d
}

// admit decides whether r (a denial at now) is reported. When it is, r's
// Count, First and Tallies are set for the event.
func (d *denyLimiter) admit(r *Record, now time.Time) bool {
	rep := d.l.Admit(denyKey{outcome: r.Outcome, host: r.Host, binary: r.binary(), port: r.Port}, r.denialDetail(), r, r.Start, now)
	if rep.Report {
		r.Count, r.First, r.Tallies = rep.Count, rep.First, tallies(rep.Tallies)
	}
	return rep.Report
}

// flush returns the records of keys whose suppressed occurrences are due
// (window passed since the last report), each with Count, First and
// Tallies set.
func (d *denyLimiter) flush(now time.Time) []*Record {
	var out []*Record
	for _, f := range d.l.Flush(now, false) {
		f.Value.Count, f.Value.First, f.Value.Tallies = f.Count, f.First, tallies(f.Tallies)
		out = append(out, f.Value)
	}
	return out
}

func tallies(ts []denylimit.Tally[DenialDetail]) []DenialTally {
	if len(ts) == 0 {
		return nil
	}
	out := make([]DenialTally, len(ts))
	for i, t := range ts {
		out[i] = DenialTally{DenialDetail: t.Detail, Count: t.Count}
	}
	return out
}
