package ceiling

import (
	"net/netip"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
)

// selKind is how an endpoint selects destinations (pkg/decision).
type selKind int

const (
	selExact    selKind = iota // one DNS name
	selIP                      // one IP literal
	selOne                     // *.suffix: exactly one label before suffix
	selMulti                   // **.suffix: one or more labels
	selIntra                   // glob.suffix: one label matching glob
	selHostless                // allowed_ips only: every name, and IPs inside allowed
)

// hostSel is an endpoint's destination selector, decomposed.
type hostSel struct {
	kind    selKind
	text    string // the host as written (normalised), "" when hostless
	name    string // selExact
	ip      netip.Addr
	first   string // selIntra: the first label's glob
	suffix  string // wildcard kinds: the literal labels after the first
	pat     *policy.HostPattern
	allowed []netip.Prefix
}

func selectorOf(ep *policy.Endpoint) hostSel {
	s := hostSel{allowed: maskedPrefixes(ep.AllowedPrefixes())}
	if ep.Host == "" {
		s.kind = selHostless
		return s
	}
	s.pat = ep.HostPattern()
	s.text = s.pat.String()
	if s.pat.IsIP() {
		s.kind = selIP
		s.ip, _ = netip.ParseAddr(s.text)
		s.ip = s.ip.Unmap()
		return s
	}
	first, suffix, _ := strings.Cut(s.text, ".")
	switch {
	case !s.pat.IsWildcard():
		s.kind, s.name = selExact, s.text
	case first == "*":
		s.kind, s.suffix = selOne, suffix
	case first == "**":
		s.kind, s.suffix = selMulti, suffix
	default:
		s.kind, s.first, s.suffix = selIntra, first, suffix
	}
	return s
}

func maskedPrefixes(ps []netip.Prefix) []netip.Prefix {
	for i, p := range ps {
		ps[i] = p.Masked()
	}
	return ps
}

// describe names the selector in messages.
func (s hostSel) describe() string {
	if s.kind == selHostless {
		return "allowed_ips " + prefixList(s.allowed)
	}
	return "host " + s.text
}

// destination names what the selector selects, without a prefix word.
func (s hostSel) destination() string {
	if s.kind == selHostless {
		return "allowed_ips " + prefixList(s.allowed)
	}
	return s.text
}

func prefixList(ps []netip.Prefix) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// labelSuffix reports whether name ends with the labels of suffix
// (name == suffix or name ends in "."+suffix).
func labelSuffix(name, suffix string) bool {
	return name == suffix || strings.HasSuffix(name, "."+suffix)
}

// hostWithin reports whether every destination a selects, b selects too
// (pkg/decision's selection: an IP literal is selected only by that IP or
// a hostless endpoint whose allowed_ips hold it; a name by an exact host,
// a pattern or any hostless endpoint).
func hostWithin(a, b hostSel) bool {
	switch b.kind {
	case selHostless:
		switch a.kind {
		case selHostless:
			return prefixesWithin(a.allowed, b.allowed)
		case selIP:
			return containsAddr(b.allowed, a.ip)
		}
		return true // every name
	case selIP:
		return a.kind == selIP && a.ip == b.ip
	case selExact:
		return a.kind == selExact && a.name == b.name
	}
	switch a.kind {
	case selHostless, selIP:
		return false
	case selExact:
		return b.pat.Match(a.name)
	}
	// Both wildcards.
	switch b.kind {
	case selMulti:
		return labelSuffix(a.suffix, b.suffix)
	case selOne:
		return (a.kind == selOne || a.kind == selIntra) && a.suffix == b.suffix
	case selIntra:
		return a.kind == selIntra && a.suffix == b.suffix && labelGlobWithin(a.first, b.first)
	}
	return false
}

// mayIntersect reports whether a and b may select a common destination.
// It over-approximates: false only when no destination can be selected
// by both.
func mayIntersect(a, b hostSel) bool {
	if a.kind == selHostless || b.kind == selHostless {
		h, o := a, b
		if b.kind == selHostless {
			h, o = b, a
		}
		if o.kind == selIP {
			return containsAddr(h.allowed, o.ip)
		}
		return true
	}
	if a.kind == selIP || b.kind == selIP {
		return a.kind == selIP && b.kind == selIP && a.ip == b.ip
	}
	if a.kind == selExact {
		return b.pat.Match(a.name)
	}
	if b.kind == selExact {
		return a.pat.Match(b.name)
	}
	return labelSuffix(a.suffix, b.suffix) || labelSuffix(b.suffix, a.suffix)
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// prefixWithin reports whether every address of a lies in b.
func prefixWithin(a, b netip.Prefix) bool {
	return a.Addr().Is4() == b.Addr().Is4() && b.Bits() <= a.Bits() && b.Contains(a.Addr())
}

// prefixesWithin reports whether each prefix of a lies inside one prefix
// of b (a prefix covered only by the union of several is not proved).
func prefixesWithin(a, b []netip.Prefix) bool {
	for _, pa := range a {
		if !anyPrefixHolds(b, pa) {
			return false
		}
	}
	return true
}

func anyPrefixHolds(b []netip.Prefix, pa netip.Prefix) bool {
	for _, pb := range b {
		if prefixWithin(pa, pb) {
			return true
		}
	}
	return false
}

// conditional is what the SSRF guard lets through only for exact hosts or
// inside allowed_ips (private and ULA ranges).
var conditional = ssrf.ConditionalPrefixes()

func overlapsConditional(p netip.Prefix) bool {
	for _, c := range conditional {
		if p.Overlaps(c) {
			return true
		}
	}
	return false
}

// scopeWithin says whether every address the SSRF guard lets a
// connection through e reach (ssrf.Scope: an exact host or IP reaches
// public, private and ULA addresses; a wildcard public ones and private
// ones inside its allowed_ips; a hostless endpoint only its allowed_ips)
// is one it lets a connection through w reach, for a destination both
// select. It returns "" or why not.
func scopeWithin(e, w hostSel) string {
	wExact := w.kind == selExact || w.kind == selIP
	switch e.kind {
	case selIP:
		return "" // the literal itself, which w selects, so w lets it through too
	case selExact:
		switch {
		case wExact:
			return ""
		case w.kind == selHostless:
			return "may reach any public address, but the ceiling's endpoint reaches only " + prefixList(w.allowed)
		}
		for _, c := range conditional {
			if !anyPrefixHolds(w.allowed, c) {
				return "may reach private addresses (" + c.String() + ": an exact host may), but the ceiling's " + w.text + " reaches private addresses only inside its allowed_ips"
			}
		}
		return ""
	case selHostless:
		if wExact {
			return ""
		}
		for _, pe := range e.allowed {
			if w.kind == selHostless || overlapsConditional(pe) {
				if !anyPrefixHolds(w.allowed, pe) {
					return "may reach " + pe.String() + ", outside the ceiling's allowed_ips " + prefixList(w.allowed)
				}
			}
		}
		return ""
	}
	// e is a wildcard: public addresses, and private ones in its allowed_ips.
	switch {
	case wExact:
		return ""
	case w.kind == selHostless:
		return "may reach any public address, but the ceiling's endpoint reaches only " + prefixList(w.allowed)
	}
	for _, pe := range e.allowed {
		if overlapsConditional(pe) && !anyPrefixHolds(w.allowed, pe) {
			return "may reach private addresses in " + pe.String() + ", outside the ceiling's allowed_ips " + prefixList(w.allowed)
		}
	}
	return ""
}
