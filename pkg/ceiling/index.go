package ceiling

import (
	"net/netip"
	"slices"
	"strings"
)

// index finds the endpoints of a policy that may select a destination a
// given selector selects (a superset of those mayIntersect accepts), so
// the prover compares each endpoint with its neighbours instead of with
// every endpoint: proving a 1,000-endpoint policy within itself went from
// 157 ms comparing all pairs to a few milliseconds.
type index struct {
	all      []*candidate
	byName   map[string][]*candidate     // exact names
	under    map[string][]*candidate     // exact names, by each proper label suffix
	byIP     map[netip.Addr][]*candidate // IP literals
	wild     map[string][]*candidate     // wildcards, by their literal suffix
	wildIn   map[string][]*candidate     // wildcards, by each proper label suffix of their suffix
	hostless []*candidate
}

func newIndex(cs []*candidate) *index {
	ix := &index{all: cs, byName: map[string][]*candidate{}, under: map[string][]*candidate{},
		byIP: map[netip.Addr][]*candidate{}, wild: map[string][]*candidate{}, wildIn: map[string][]*candidate{}}
	for _, c := range cs {
		switch c.sel.kind {
		case selHostless:
			ix.hostless = append(ix.hostless, c)
		case selIP:
			ix.byIP[c.sel.ip] = append(ix.byIP[c.sel.ip], c)
		case selExact:
			ix.byName[c.sel.name] = append(ix.byName[c.sel.name], c)
			for _, s := range properSuffixes(c.sel.name) {
				ix.under[s] = append(ix.under[s], c)
			}
		default:
			ix.wild[c.sel.suffix] = append(ix.wild[c.sel.suffix], c)
			for _, s := range properSuffixes(c.sel.suffix) {
				ix.wildIn[s] = append(ix.wildIn[s], c)
			}
		}
	}
	return ix
}

// properSuffixes lists the label suffixes of name shorter than name
// ("a.b.c" -> "b.c", "c").
func properSuffixes(name string) []string {
	var out []string
	for i := strings.IndexByte(name, '.'); i >= 0; {
		name = name[i+1:]
		out = append(out, name)
		i = strings.IndexByte(name, '.')
	}
	return out
}

// related returns, by rank, every candidate that may select a
// destination s selects.
func (ix *index) related(s hostSel) []*candidate {
	var out []*candidate
	switch s.kind {
	case selHostless:
		return ix.all
	case selIP:
		out = append(out, ix.byIP[s.ip]...)
	case selExact:
		out = append(out, ix.byName[s.name]...)
		for _, suf := range append([]string{s.name}, properSuffixes(s.name)...) {
			out = append(out, ix.wild[suf]...)
		}
	default:
		out = append(out, ix.under[s.suffix]...)
		for _, suf := range append([]string{s.suffix}, properSuffixes(s.suffix)...) {
			out = append(out, ix.wild[suf]...)
		}
		out = append(out, ix.wildIn[s.suffix]...)
	}
	out = append(out, ix.hostless...)
	slices.SortFunc(out, func(a, b *candidate) int {
		switch {
		case a.rank != b.rank:
			if a.rank < b.rank {
				return -1
			}
			return 1
		case a.key != b.key:
			return strings.Compare(a.key, b.key)
		}
		return a.index - b.index
	})
	return slices.Compact(out)
}
