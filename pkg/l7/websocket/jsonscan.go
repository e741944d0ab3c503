package websocket

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner reads one JSON text (RFC 8259, as encoding/json accepts
// it) for the json matchers: it checks the whole text, refuses one that
// servers may read differently (a key twice in one object, after
// unescaping; one value reached by two spellings of a path; nesting
// deeper than maxJSONDepth), and keeps the scalars the rules' field
// paths reach. Values no path reaches are checked, never kept or
// copied; keys are matched against the paths in place (jsonPaths), so
// a message without escapes is read without allocating.
//
// It exists because encoding/json's token reader costs several
// microseconds per small message, most of the proxy's CPU for a
// WebSocket: BenchmarkJSONScan compares the two on the 64-byte
// subscribe message, 72 ns against 3,018 ns (about 42x; medians of 5
// under the heavy lock, 2026-12-02; docs/egress-proxy.md).
// FuzzJSONScan checks it agrees with encoding/json on every input:
// which texts are JSON, which are ambiguous, and the values kept.
type jsonScanner struct {
	data   []byte
	i      int
	paths  *jsonPaths
	values []jsonValue // by path index (jsonPaths.idx)
	dup    bool        // an ambiguity was seen; the text is read on to tell whether it is JSON at all
}

// jsonPaths is the rules' field paths for the scanner, sorted: the
// paths a prefix of a path reaches are a contiguous run, so each key
// is matched by binary search, without building the path it spells.
// A path is the keys leading to a value joined by dots, so the key
// "a.b" and the key "b" inside "a" spell the same path (both reach
// a.b's index; two values reaching it are ambiguous).
type jsonPaths struct {
	sorted []string  // never "": no value is reached by that
	idx    []int     // sorted[i]'s index in jsonScanner.values
	first  [4]uint64 // bit c set: some path starts with byte c (a top-level key starting otherwise reaches none)
	// top is every key of the top object that reaches a path, with
	// key's answer for it, when there are at most maxTop (nil
	// otherwise): flatScan matches a top-level key by one pass over it.
	top []topKey
}

// topKey is a key of the top object that reaches a path: the index of
// the path it completes (-1: none) and the run continuing below it.
type topKey struct {
	key   string
	exact int
	below pathRun
}

// maxTop bounds jsonPaths.top.
const maxTop = 8

// topMiss reports whether key, a key of the top object, reaches no
// path: told by its first byte alone.
func (p *jsonPaths) topMiss(key []byte) bool {
	return len(key) > 0 && p.first[key[0]>>6]&(1<<(key[0]&63)) == 0
}

// jsonValue is where a scalar a path reaches is in the text (offsets,
// not slices: the scanner stores no pointer, so nothing it reads
// escapes to the heap).
type jsonValue struct {
	start, end int32 // its bytes; a string's between its quotes
	esc        bool  // a string holding escapes: text unescapes it
	set        bool  // a scalar was reached
}

// text is the value v found in data: its JSON spelling, or a string's
// unescaped text (a new slice when it holds escapes).
func (v *jsonValue) text(data []byte) []byte {
	if !v.esc {
		return data[v.start:v.end]
	}
	return v.unescaped(data)
}

// unescaped is text for a string holding escapes.
func (v *jsonValue) unescaped(data []byte) []byte {
	sc := jsonScanner{data: data[:v.end+1], i: int(v.start) - 1}
	b, _ := sc.str()
	return b
}

// newJSONPaths sorts the paths of index (path -> index in values).
func newJSONPaths(index map[string]int) *jsonPaths {
	p := &jsonPaths{}
	for s := range index {
		if s != "" {
			p.sorted = append(p.sorted, s)
		}
	}
	slices.Sort(p.sorted)
	for _, s := range p.sorted {
		p.idx = append(p.idx, index[s])
		p.first[s[0]>>6] |= 1 << (s[0] & 63)
	}
	// The top keys reaching a path: each path's start up to a dot or
	// its end (the key "a.b" reaches a.b as "b" inside "a" does).
	all := pathRun{0, len(p.sorted), 0}
	var top []topKey
	for _, s := range p.sorted {
		for e := 1; e <= len(s); e++ {
			if e < len(s) && s[e] != '.' || slices.ContainsFunc(top, func(t topKey) bool { return t.key == s[:e] }) {
				continue
			}
			exact, below := p.key(all, []byte(s[:e]))
			top = append(top, topKey{key: s[:e], exact: exact, below: below})
		}
	}
	if len(top) <= maxTop {
		p.top = top
	}
	return p
}

// pathRun is the paths an object's keys may continue: sorted[lo:hi],
// all starting with the same off bytes (the path of the object and a
// dot; off 0 at the top). An empty run (lo == hi) reaches nothing: an
// object inside an array, or under a key no path names.
type pathRun struct{ lo, hi, off int }

// key is what key, a key of an object at run, reaches: the index of
// the path it completes (-1: none) and the run of paths continuing
// below it.
func (p *jsonPaths) key(run pathRun, key []byte) (int, pathRun) {
	if run.lo == run.hi || run.off == 0 && len(key) == 0 {
		return -1, pathRun{} // an empty key at the top: "" is no path, and nothing below it
	}
	s, end := p.sorted, run.off+len(key)
	a, b := p.startWith(run, key)
	if a == b {
		return -1, pathRun{}
	}
	exact := -1
	if len(s[a]) == end {
		exact = p.idx[a]
		a++
	}
	// Below key: the paths of sorted[a:b] with a dot at end (a
	// contiguous run, ordered by that byte).
	for a < b && s[a][end] < '.' {
		a++
	}
	c := a
	for c < b && s[c][end] == '.' {
		c++
	}
	return exact, pathRun{lo: a, hi: c, off: end + 1}
}

// startWith is the paths of run that continue with key:
// sorted[a:b].
func (p *jsonPaths) startWith(run pathRun, key []byte) (a, b int) {
	s, off, end := p.sorted, run.off, run.off+len(key)
	if run.hi-run.lo <= 8 { // a few: one pass, most told apart by their first byte
		a, b = run.hi, run.hi
		for i := run.lo; i < run.hi; i++ {
			q := s[i]
			if len(q) >= end && (len(key) == 0 || q[off] == key[0]) && q[off:end] == string(key) {
				a, b = min(a, i), i+1
			} else if a < run.hi {
				break
			}
		}
		return a, b
	}
	// a: the first path whose rest is >= key; b: the first whose rest,
	// cut to len(key), is > key.
	a, hi := run.lo, run.hi
	for a < hi {
		m := int(uint(a+hi) >> 1)
		if s[m][off:] < string(key) {
			a = m + 1
		} else {
			hi = m
		}
	}
	b, hi = a, run.hi
	for b < hi {
		m := int(uint(b+hi) >> 1)
		if cut(s[m], off, end) <= string(key) {
			b = m + 1
		} else {
			hi = m
		}
	}
	return a, b
}

// cut is s[off:end], or less where s is shorter.
func cut(s string, off, end int) string {
	return s[off:min(end, len(s))]
}

var (
	errNotJSON = errors.New("not one JSON text")
	errDup     = errors.New("ambiguous JSON")
)

// scanJSON reads data as one JSON object. It returns errNotJSON for
// data that is no JSON text or no object, errDup for ambiguous JSON,
// and otherwise fills values (by path index) for the wanted paths. Most
// messages are read by flatScan; what it leaves (escapes, deep nesting,
// many keys) by readObject. A relay tries its last text's shape first
// (scanJSONShaped, jsonShape).
func scanJSON(data []byte, paths *jsonPaths, values []jsonValue) error {
	if err, ok := flatScan(data, paths, values); ok {
		return err
	}
	return readAll(data, paths, values)
}

// readAll is scanJSON by readObject alone, for a text flatScan left
// (values as it left them).
func readAll(data []byte, paths *jsonPaths, values []jsonValue) error {
	clear(values)
	s := &jsonScanner{data: data, paths: paths, values: values}
	return s.readObject()
}

// readObject is scanJSON for every text: a recursive reader.
func (s *jsonScanner) readObject() error {
	s.space()
	if s.i >= len(s.data) || s.data[s.i] != '{' {
		return errNotJSON // json matchers read objects only
	}
	if err := s.object(pathRun{0, len(s.paths.sorted), 0}, 1); err != nil {
		if err == errDup && json.Valid(s.data) { // nested too deep to read on
			return errDup
		}
		return errNotJSON
	}
	s.space()
	switch {
	case s.i != len(s.data):
		return errNotJSON
	case s.dup:
		return errDup
	}
	return nil
}

func (s *jsonScanner) space() {
	for s.i < len(s.data) && jsonSpace[s.data[s.i]] {
		s.i++
	}
}

// object reads an object at s.i ('{'); run is the paths its keys may
// continue.
func (s *jsonScanner) object(run pathRun, depth int) error {
	if depth > maxJSONDepth {
		return errDup
	}
	s.i++ // '{'
	// The keys read, to tell a duplicate: the first 16 here, more in a
	// map (copied, so nothing of the text is kept past the scan).
	var keys [16][]byte
	nkeys := 0
	var more map[string]struct{}
	s.space()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.space()
		key, err := s.str()
		if err != nil {
			return err
		}
		for _, k := range keys[:nkeys] {
			if string(k) == string(key) {
				s.dup = true
			}
		}
		switch {
		case nkeys < len(keys):
			keys[nkeys] = key
			nkeys++
		case more == nil:
			more = map[string]struct{}{string(key): {}}
		default:
			if _, seen := more[string(key)]; seen {
				s.dup = true
			}
			more[string(key)] = struct{}{}
		}
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return errNotJSON
		}
		s.i++
		j, below := s.paths.key(run, key)
		if err := s.value(j, below, depth); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.data) {
			return errNotJSON
		}
		switch s.data[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errNotJSON
		}
	}
}

// value reads one value: a scalar is kept at index j (-1: no path
// reaches it), an object's keys continue the paths of below.
func (s *jsonScanner) value(j int, below pathRun, depth int) error {
	s.space()
	if s.i >= len(s.data) {
		return errNotJSON
	}
	switch c := s.data[s.i]; {
	case c == '{':
		return s.object(below, depth+1)
	case c == '[':
		return s.array(depth + 1)
	case c == '"':
		start := s.i + 1
		if _, err := s.str(); err != nil {
			return err
		}
		if j >= 0 {
			s.keep(j, start, s.i-1, bytes.IndexByte(s.data[start:s.i-1], '\\') >= 0)
		}
		return nil
	case c == 't':
		return s.literal("true", j)
	case c == 'f':
		return s.literal("false", j)
	case c == 'n':
		return s.literal("null", j)
	case c == '-' || c >= '0' && c <= '9':
		start := s.i
		if !s.number() {
			return errNotJSON
		}
		s.keep(j, start, s.i, false)
		return nil
	}
	return errNotJSON
}

func (s *jsonScanner) array(depth int) error {
	if depth > maxJSONDepth {
		return errDup
	}
	s.i++ // '['
	s.space()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		if err := s.value(-1, pathRun{}, depth); err != nil { // no path reaches into an array
			return err
		}
		s.space()
		if s.i >= len(s.data) {
			return errNotJSON
		}
		switch s.data[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return errNotJSON
		}
	}
}

func (s *jsonScanner) literal(lit string, j int) error {
	if len(s.data)-s.i < len(lit) || string(s.data[s.i:s.i+len(lit)]) != lit {
		return errNotJSON
	}
	s.i += len(lit)
	s.keep(j, s.i-len(lit), s.i, false)
	return nil
}

// keep stores the value at data[start:end] at index j (-1: none); a
// path reached twice is ambiguous.
func (s *jsonScanner) keep(j, start, end int, esc bool) {
	if j < 0 {
		return
	}
	if s.values[j].set {
		s.dup = true
	}
	s.values[j] = jsonValue{start: int32(start), end: int32(end), esc: esc, set: true}
}

// number reads a JSON number (RFC 8259 §6).
func (s *jsonScanner) number() bool {
	i, ok := numberEnd(s.data, s.i)
	if ok {
		s.i = i
	}
	return ok
}

// numberEnd is the end of the JSON number at d[i:], ok false when
// there is none.
func numberEnd(d []byte, i int) (int, bool) {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i]-'1' < 9:
		i = digitsEnd(d, i)
	default:
		return i, false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i]-'0' >= 10 {
			return i, false
		}
		i = digitsEnd(d, i)
	}
	if i < len(d) && d[i]|0x20 == 'e' {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i]-'0' >= 10 {
			return i, false
		}
		i = digitsEnd(d, i)
	}
	return i, true
}

// digitsEnd is the index of the first byte from i on that is no ASCII
// digit, or len(d): eight bytes at a time while eight are left.
func digitsEnd(d []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(d); i += 8 {
		w := binary.LittleEndian.Uint64(d[i:])
		// A byte below '0' borrows in w-'0', one above '9' sets its top
		// bit in w+0x46 (or in w-'0', from 0xb0 on); each term flags
		// its bytes exactly up to the first one it flags, so the lowest
		// flag is the first byte that is no digit (as in plainEnd).
		if m := ((w - ones*'0') | (w + ones*0x46)) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < len(d) && d[i]-'0' < 10 {
		i++
	}
	return i
}

// str reads a string at s.i and returns it unescaped (as encoding/json
// does: a lone surrogate escape becomes U+FFFD): a slice of the text
// when it holds no escape, else a new slice.
func (s *jsonScanner) str() ([]byte, error) {
	d := s.data
	if s.i >= len(d) || d[s.i] != '"' {
		return nil, errNotJSON
	}
	start := s.i + 1
	i := start
	for i < len(d) && jsonPlain[d[i]] {
		i++
	}
	if i < len(d) && d[i] < 0x20 {
		return nil, errNotJSON
	}
	if i < len(d) && d[i] == '"' {
		s.i = i + 1
		return d[start:i], nil
	}
	b := append([]byte(nil), d[start:i]...)
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			s.i = i + 1
			return b, nil
		case c < 0x20:
			return nil, errNotJSON
		case c != '\\':
			b = append(b, c)
			i++
			continue
		}
		if i+1 >= len(d) {
			return nil, errNotJSON
		}
		switch e := d[i+1]; e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, n := s.unicode(i)
			if n == 0 {
				return nil, errNotJSON
			}
			b = utf8.AppendRune(b, r)
			i += n
			continue
		default:
			return nil, errNotJSON
		}
		i += 2
	}
	return nil, errNotJSON
}

// unicode decodes the \uXXXX escape at i (and the low surrogate that
// follows a high one); n is the bytes read, 0 when malformed.
func (s *jsonScanner) unicode(i int) (rune, int) {
	r, ok := hex4(s.data, i+2)
	if !ok {
		return 0, 0
	}
	if !utf16.IsSurrogate(r) {
		return r, 6
	}
	if r2, ok := hex4(s.data, i+8); ok && i+7 < len(s.data) && s.data[i+6] == '\\' && s.data[i+7] == 'u' {
		if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
			return dec, 12
		}
	}
	return utf8.RuneError, 6
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(d[i:i+4]), 16, 32)
	return rune(v), err == nil
}

// jsonSpace: the bytes JSON allows between tokens. jsonPlain: the bytes
// a string holds as they are (not a quote, a backslash or a control
// character).
var jsonSpace, jsonPlain [256]bool

func init() {
	for _, c := range " \t\n\r" {
		jsonSpace[c] = true
	}
	for c := 0x20; c < 256; c++ {
		jsonPlain[c] = c != '"' && c != '\\'
	}
}
