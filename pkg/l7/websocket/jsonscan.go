package websocket

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner reads one JSON text (RFC 8259, as encoding/json accepts
// it) for the json matchers: it checks the whole text, refuses one that
// servers may read differently (a key twice in one object, after
// unescaping; one value reached by two spellings of a path; nesting
// deeper than maxJSONDepth), and keeps the scalars the rules' field
// paths reach. It exists because encoding/json's token reader costs
// several microseconds per small message, most of the proxy's CPU for a
// WebSocket: BenchmarkJSONScan compares the two on the 64-byte
// subscribe message (docs/egress-proxy.md quotes the ratio).
// FuzzJSONScan checks it agrees with encoding/json on every input:
// which texts are JSON, which are ambiguous, and the values kept.
type jsonScanner struct {
	data  []byte
	i     int
	paths map[string]int // field path -> index in values
	// lens has bit min(len(path), 63) set for each path: most keys are
	// told apart from every path by their length, without a map lookup.
	lens   uint64
	values [][]byte
	set    []bool
	dup    bool // an ambiguity was seen; the text is read on to tell whether it is JSON at all
}

var (
	errNotJSON = errors.New("not one JSON text")
	errDup     = errors.New("ambiguous JSON")
)

// scanObject reads data as one JSON object. It returns errNotJSON
// for data that is no JSON text or no object, errDup for ambiguous
// JSON, and otherwise fills values/set for the wanted paths.
func (s *jsonScanner) scanObject() error {
	s.space()
	if s.i >= len(s.data) || s.data[s.i] != '{' {
		return errNotJSON // json matchers read objects only
	}
	if err := s.object("", 1); err != nil {
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
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// object reads an object at s.i ('{'); prefix is its path with a
// trailing dot ("" at the top).
func (s *jsonScanner) object(prefix string, depth int) error {
	if depth > maxJSONDepth {
		return errDup
	}
	s.i++ // '{'
	var kb [16][]byte
	keys := kb[:0]
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
		for _, k := range keys {
			if string(k) == string(key) {
				s.dup = true
			}
		}
		keys = append(keys, key)
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return errNotJSON
		}
		s.i++
		var err2 error
		if prefix == "" {
			err2 = s.value(string(key), depth) // the conversion allocates only when the path is wanted (keep)
		} else {
			err2 = s.value(prefix+string(key), depth)
		}
		if err := err2; err != nil {
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

// value reads one value; path is where it is ("" when no path reaches
// it: an array's members).
func (s *jsonScanner) value(path string, depth int) error {
	s.space()
	if s.i >= len(s.data) {
		return errNotJSON
	}
	switch c := s.data[s.i]; {
	case c == '{':
		p := ""
		if path != "" {
			p = path + "."
		}
		if path == "" {
			p = "\x00" // inside an array: no path reaches it
		}
		return s.object(p, depth+1)
	case c == '[':
		return s.array(depth + 1)
	case c == '"':
		v, err := s.str()
		if err != nil {
			return err
		}
		return s.keepBytes(path, v)
	case c == 't':
		return s.literal("true", path)
	case c == 'f':
		return s.literal("false", path)
	case c == 'n':
		return s.literal("null", path)
	case c == '-' || c >= '0' && c <= '9':
		start := s.i
		if !s.number() {
			return errNotJSON
		}
		return s.keepBytes(path, s.data[start:s.i])
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
		if err := s.value("", depth); err != nil {
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

func (s *jsonScanner) literal(lit, path string) error {
	if len(s.data)-s.i < len(lit) || string(s.data[s.i:s.i+len(lit)]) != lit {
		return errNotJSON
	}
	s.i += len(lit)
	return s.keepBytes(path, s.data[s.i-len(lit):s.i])
}

// keepBytes stores v when a rule's path is path; a path reached twice
// is ambiguous.
func (s *jsonScanner) keepBytes(path string, v []byte) error {
	if path == "" || path[0] == 0 || s.lens&(1<<min(len(path), 63)) == 0 {
		return nil
	}
	j, ok := s.paths[path]
	if !ok {
		return nil
	}
	if s.set[j] {
		s.dup = true
	}
	s.values[j], s.set[j] = v, true
	return nil
}

// number reads a JSON number (RFC 8259 §6).
func (s *jsonScanner) number() bool {
	d := s.data
	i := s.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return false
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return false
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	s.i = i
	return true
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
	for i < len(d) && d[i] != '"' && d[i] != '\\' {
		if d[i] < 0x20 {
			return nil, errNotJSON
		}
		i++
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
