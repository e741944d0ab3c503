package l7

import (
	"errors"
	"strings"
)

// Errors. ErrAmbiguousPath is a path refused whatever the rules say: an
// encoded NUL, a third level of percent-encoding, or a control character
// that a second decoding would produce. ErrInvalidPath is a path that is
// not a valid origin-form path at all.
var (
	ErrAmbiguousPath = errors.New("ambiguous request path")
	ErrInvalidPath   = errors.New("invalid request path")
)

// MaxPathLen bounds a request path.
const MaxPathLen = 8192

// Path is a request path as the proxy decides it and sends it upstream.
//
// Servers read some spellings differently from one another: an encoded
// "/" is data inside one segment to most and a separator to others, and
// likewise an encoded or literal "\" (a separator on Windows servers),
// an encoded "." in a dot segment ("/%2e%2e/" is ".." once decoded), a
// ";" (Tomcat, Jetty and Spring cut path parameters off a segment), a
// "%25" (servers that decode twice), and a trailing "." or space on a
// segment (Windows, IIS and ASP.NET drop them). ParsePath keeps those
// spellings as they were sent and lists every distinct path an upstream
// may read from them; a request is decided under each reading (Check),
// and refused as ambiguous only when the readings are decided
// differently.
type Path struct {
	// Escaped is what the upstream receives: the path with escapes of
	// unreserved characters decoded, other escapes in upper case, "." and
	// ".." segments resolved and repeated slashes collapsed; the
	// spellings above are kept as sent (a literal "\" as "%5C").
	Escaped string
	// Decoded is Escaped with every escape decoded: the reading that takes
	// each of the spellings above as data. It is always the first
	// reading, and url.URL{Path: Decoded, RawPath: Escaped} escapes to
	// Escaped.
	Decoded string
	// Alternates are the other distinct readings (nil for a plain path).
	Alternates []string
	// NonASCII is set when a reading holds a byte outside ASCII after
	// percent-decoding: servers that fold Unicode ("ſ" is "s" to a
	// case-insensitive Java or .NET router, full-width letters are ASCII
	// after NFKC) read such a path in ways no list can enumerate.
	NonASCII bool
}

// Readings calls fn with Decoded and then each alternate reading until
// fn returns false.
func (p *Path) Readings(fn func(string) bool) {
	if !fn(p.Decoded) {
		return
	}
	for _, r := range p.Alternates {
		if !fn(r) {
			return
		}
	}
}

// kind classifies one byte of a path by how servers may read it.
type kind uint8

const (
	kPlain      kind = iota // sent as itself
	kEnc                    // an escape with a single reading
	kEncSlash               // %2F: data or a separator
	kBackslash              // "\" or %5C: data or a separator
	kEncDot                 // %2E: data, or a dot of a dot segment
	kSemi                   // ";" or %3B: data, or the start of path parameters
	kEncPercent             // %25: data, or the start of a second escape
)

// unit is one decoded byte of a path and how it was spelt.
type unit struct {
	b    byte
	k    kind
	esc  bool    // sent percent-encoded
	hexd [2]byte // the escape's two digits as sent (esc)
}

// dimensions of ambiguity: one bit per way servers differ.
const (
	dimSlash     = 1 << iota // encoded "/" splits a segment
	dimBackslash             // "\" splits a segment
	dimDot                   // an encoded "." makes a dot segment
	dimParams                // ";" cuts path parameters off a segment
	dimTrailing              // trailing "." and " " are dropped from a segment
	dimDecode2               // the path is decoded a second time
)

// ParsePath reads the path of a request target as sent (escaped,
// without the query). Refused as invalid: no leading "/", a malformed
// escape, control characters, space, "#", "?" or bytes outside ASCII
// sent unescaped, and paths over MaxPathLen. Refused as ambiguous: an
// encoded NUL, and a "%2525" or control character left after a second
// decoding.
//
// Cost: BenchmarkParsePath (four package-manager paths, two of them
// plain) takes 1.6x the CPU time of url.PathUnescape, path.Clean and
// re-escaping, which know nothing of readings (median of 10 runs, 1.58
// against 0.97 µs per four paths; spread 1.48-1.81 and 0.90-1.59). A
// plain path returns without allocating.
func ParsePath(escaped string) (Path, error) {
	if escaped == "" || escaped[0] != '/' || len(escaped) > MaxPathLen {
		return Path{}, ErrInvalidPath
	}
	if plainPath(escaped) {
		return Path{Escaped: escaped, Decoded: escaped}, nil
	}
	segs, trailing, nonASCII, err := parseUnits(escaped, false)
	if err != nil {
		return Path{}, err
	}
	p := Path{Escaped: emit(segs, trailing, escaped), NonASCII: nonASCII}
	dims := dimensionsOf(segs)
	if dims == 0 {
		p.Decoded = decodeUnits(segs, trailing)
		return p, nil
	}
	rs := readingSet{buf: make([]byte, 0, len(escaped)), starts: make([]int, 0, 2*len(segs)+2)}
	rs.enumerate(segs, trailing, dims&^dimDecode2)
	if dims&dimDecode2 != 0 {
		// A server that decodes twice reads the once-decoded path as
		// if it had been sent: its own escapes, separators and dots.
		segs2, trailing2, nonASCII2, err := parseUnits(decodeUnits(segs, trailing), true)
		if err != nil {
			return Path{}, err
		}
		p.NonASCII = p.NonASCII || nonASCII2
		rs.enumerate(segs2, trailing2, dimensionsOf(segs2))
	}
	p.Decoded, p.Alternates = rs.list[0], rs.list[1:]
	if len(p.Alternates) == 0 {
		p.Alternates = nil
	}
	return p, nil
}

// plainPath reports whether a path needs no work: only bytes sent as
// themselves with one reading, no empty or dot segment, no segment
// ending in ".".
func plainPath(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !rawOK[c] || c == ';' {
			return false
		}
		if c == '/' && i+1 < len(s) && s[i+1] == '/' {
			return false
		}
		if c == '.' && (i+1 == len(s) || s[i+1] == '/') {
			return false // "/./", "/../" or a trailing dot
		}
	}
	return true
}

// parseUnits splits a path into its segments (at literal "/"), decodes
// escapes into units, resolves literal "." and ".." segments (".."
// stays at the root) and drops empty segments. second parses a path
// that was decoded once already: any byte but a control character is
// data, and "%" not followed by two hex digits is a literal "%".
func parseUnits(s string, second bool) (segs [][]unit, trailing, nonASCII bool, err error) {
	// One backing array for every segment's units: a segment is the
	// run appended since the previous separator.
	buf := make([]unit, 0, len(s))
	segs = make([][]unit, 0, strings.Count(s, "/"))
	start := 0
	end := func() {
		cur := buf[start:len(buf):len(buf)]
		switch {
		case len(cur) == 0:
		case isDotSeg(cur, false) && len(cur) == 1:
		case isDotSeg(cur, false):
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, cur)
		}
		start = len(buf)
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/':
			end()
			continue
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			u, err := escapeUnit(unhex(s[i+1])<<4|unhex(s[i+2]), s[i+1], s[i+2], second)
			if err != nil {
				return nil, false, false, err
			}
			nonASCII = nonASCII || u.b >= 0x80
			buf = append(buf, u)
			i += 2
			continue
		case c == '%' && !second:
			return nil, false, false, ErrInvalidPath
		case c < ' ' || c == 0x7f:
			if second {
				return nil, false, false, ErrAmbiguousPath
			}
			return nil, false, false, ErrInvalidPath
		case !second && (c == ' ' || c >= 0x80 || c == '#' || c == '?'):
			return nil, false, false, ErrInvalidPath
		}
		u := unit{b: c}
		switch c {
		case '\\':
			u.k = kBackslash
		case ';':
			u.k = kSemi
		}
		nonASCII = nonASCII || c >= 0x80
		buf = append(buf, u)
	}
	trailing = len(s) > 1 && s[len(s)-1] == '/'
	end()
	return segs, trailing, nonASCII, nil
}

// escapeUnit classifies a decoded escape.
func escapeUnit(b, h1, h2 byte, second bool) (unit, error) {
	u := unit{b: b, k: kEnc, esc: true, hexd: [2]byte{h1, h2}}
	switch {
	case b == 0:
		return u, ErrAmbiguousPath
	case b < 0x20 || b == 0x7f:
		if second {
			return u, ErrAmbiguousPath
		}
		return u, ErrInvalidPath
	case b == '/':
		u.k = kEncSlash
	case b == '\\':
		u.k = kBackslash
	case b == '.':
		u.k = kEncDot
	case b == ';':
		u.k = kSemi
	case b == '%':
		if second {
			return u, ErrAmbiguousPath // encoded three times
		}
		u.k = kEncPercent
	}
	return u, nil
}

// isDotSeg reports whether a component is "." or "..": literal dots
// always, encoded ones when encDots (the server decodes before it
// resolves dot segments).
func isDotSeg(us []unit, encDots bool) bool {
	if len(us) == 0 || len(us) > 2 {
		return false
	}
	for _, u := range us {
		if u.b != '.' || u.k == kEncDot && !encDots {
			return false
		}
	}
	return true
}

// dimensionsOf lists the ambiguities present in a parsed path.
func dimensionsOf(segs [][]unit) int {
	d := 0
	for _, seg := range segs {
		for i, u := range seg {
			switch u.k {
			case kEncSlash:
				d |= dimSlash
			case kBackslash:
				d |= dimBackslash
			case kEncDot:
				d |= dimDot
			case kSemi:
				d |= dimParams
			case kEncPercent:
				d |= dimDecode2
			}
			if u.b == '.' || u.b == ' ' {
				if i+1 == len(seg) || splits(seg[i+1].k) {
					d |= dimTrailing
				}
			}
		}
	}
	return d
}

// splits reports whether a unit of kind k ends a component under some
// reading.
func splits(k kind) bool { return k == kEncSlash || k == kBackslash || k == kSemi }

// readingSet collects distinct readings, the all-data one first.
type readingSet struct {
	list   []string
	buf    []byte // the reading being built
	starts []int  // where each of its components begins
}

// addBuf adds the reading in rs.buf unless it is already listed.
func (rs *readingSet) addBuf() {
	for _, r := range rs.list {
		if r == string(rs.buf) {
			return
		}
	}
	rs.list = append(rs.list, string(rs.buf))
}

// enumerate adds the reading of every combination of the dimensions in
// dims, the empty combination (everything is data) first.
func (rs *readingSet) enumerate(segs [][]unit, trailing bool, dims int) {
	rs.reading(segs, trailing, 0)
	rs.addBuf()
	for m := dims; m != 0; m = (m - 1) & dims {
		rs.reading(segs, trailing, m)
		rs.addBuf()
	}
}

// reading builds in rs.buf the path a server that reads the spellings
// in dims as their special meaning (and the others as data) routes.
func (rs *readingSet) reading(segs [][]unit, trailing bool, dims int) {
	out, starts := rs.buf[:0], rs.starts[:0]
	endSep := false
	component := func(us []unit) {
		if dims&dimParams != 0 {
			for i, u := range us {
				if u.k == kSemi {
					us = us[:i]
					break
				}
			}
		}
		dot := isDotSeg(us, dims&dimDot != 0)
		if !dot && dims&dimTrailing != 0 {
			for len(us) > 0 && (us[len(us)-1].b == '.' || us[len(us)-1].b == ' ') {
				us = us[:len(us)-1]
			}
		}
		switch {
		case len(us) == 0:
			endSep = true
		case dot:
			endSep = false
			if len(us) == 2 && len(starts) > 0 {
				out = out[:starts[len(starts)-1]]
				starts = starts[:len(starts)-1]
			}
		default:
			endSep = false
			starts = append(starts, len(out))
			out = append(out, '/')
			for _, u := range us {
				out = append(out, u.b)
			}
		}
	}
	for _, seg := range segs {
		from := 0
		for i, u := range seg {
			if u.k == kEncSlash && dims&dimSlash != 0 || u.k == kBackslash && dims&dimBackslash != 0 {
				component(seg[from:i])
				from = i + 1
			}
		}
		component(seg[from:])
	}
	if trailing {
		endSep = true
	}
	if len(out) == 0 {
		out = append(out, '/')
	} else if endSep {
		out = append(out, '/')
	}
	rs.buf, rs.starts = out, starts
}

// emit writes the escaped form of a parsed path (sent, when it is
// spelt the same, to save a copy).
func emit(segs [][]unit, trailing bool, sent string) string {
	var arr [256]byte // most paths fit: no allocation but the result's
	b := arr[:0]
	for _, seg := range segs {
		b = append(b, '/')
		for _, u := range seg {
			switch {
			case u.k == kPlain && rawOK[u.b], u.k == kEnc && unreserved(u.b):
				b = append(b, u.b)
			case u.k == kSemi && !u.esc:
				b = append(b, ';')
			case u.k != kPlain && u.k != kEnc && u.esc:
				b = append(b, '%', u.hexd[0], u.hexd[1])
			default: // other escapes, a literal "\", bytes not valid raw
				b = append(b, '%', upperHex[u.b>>4], upperHex[u.b&15])
			}
		}
	}
	if len(b) == 0 {
		return "/"
	}
	if trailing {
		b = append(b, '/')
	}
	if string(b) == sent {
		return sent
	}
	return string(b)
}

// decodeUnits is the path decoded once: what a server that decodes
// twice decodes again.
func decodeUnits(segs [][]unit, trailing bool) string {
	var arr [256]byte
	b := arr[:0]
	for _, seg := range segs {
		b = append(b, '/')
		for _, u := range seg {
			b = append(b, u.b)
		}
	}
	if len(b) == 0 || trailing {
		b = append(b, '/')
	}
	return string(b)
}

const upperHex = "0123456789ABCDEF"

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// rawOK lists the bytes a path may carry unescaped and still be
// url.URL's RawPath (RFC 3986 pchar and "/").
var rawOK = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = unreserved(byte(c))
	}
	for _, c := range "!$&'()*+,;=:@[]/" {
		t[c] = true
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
