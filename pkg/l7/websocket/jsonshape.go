package websocket

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// jsonShape is a JSON text with its scalar values cut out: the bytes
// around them (braces, brackets, keys, colons, commas, whitespace)
// and, for each value, its kind and the field path it reaches. Clients
// mostly send messages of a few shapes (the same keys in the same
// order, the values changing), so a relay keeps the shape of its last
// message (shapeCache) and reads the next one against it first.
//
// scan accepts a text only when every byte around the values equals
// the shape's and every value is a whole scalar of the shape's kind: a
// string without escapes or control characters, a JSON number, or
// true, false or null. Such a text is, token for token, the text the
// shape was taken from with other scalars in the same places: the
// same objects with the same keys at the same depths (so no duplicate
// key and no path reached twice, the shape's text having none), and
// each value reaching the path it reached there. flatScan would accept
// it and keep the same values; scan keeps them without dispatching on
// each token, matching keys, or looking for duplicates. A text that
// differs anywhere else is not accepted (a miss) and is read by
// scanJSON as before. FuzzJSONShape and TestJSONShapeMutations hold
// scan's answers to scanJSON's on the texts it accepts.
type jsonShape struct {
	lits  []byte      // the bytes around the values, in order, run together
	slots []shapeSlot // the values, in order; the last is slotEnd
	// Room for the shapes of small texts, so that a relay's shape is
	// allocated with the relay (lits and slots point here; a jsonShape
	// is not copied).
	litsRoom  [160]byte
	slotsRoom [12]shapeSlot
}

// shapeSlot is one value of a shape: it follows the literal bytes
// lits[lit-n:lit].
type shapeSlot struct {
	lit  int32 // where the literal ends in lits
	n    int32 // the literal's length
	idx  int32 // the path index (jsonPaths.idx) its value reaches; -1: none
	kind byte
	// The literal's bytes as words, for comparing in place: a literal
	// of at most 8 bytes is w0 under mask m0 (its length in bytes); one
	// of 9-16 bytes is w0 (its first 8) and w1 (its last 8). Longer
	// literals are compared as strings.
	w0, w1, m0 uint64
}

// The kinds of shapeSlot.
const (
	slotString = iota // a string's characters (its quotes are the literals')
	slotNumber
	slotWord // true, false or null
	slotEnd  // no value: the text ends after the literal
)

// Bounds of a shape: longer texts, or texts with more values, are
// always read by scanJSON.
const (
	maxShapeText   = 2048
	maxShapeValues = 128
)

// scan reads d against the shape: true with the values kept (values
// by path index, cleared before) where scanJSON would accept d and keep
// the same, false when d differs from the shape (values then hold what
// scan set on the way, to be cleared).
func (s *jsonShape) scan(d []byte, values []jsonValue) bool {
	if len(d) > 1<<30 {
		return false // as flatScan: offsets are int32
	}
	i := 0
	for k := range s.slots {
		sl := &s.slots[k]
		switch n := int(sl.n); {
		case len(d)-i < n:
			return false
		case n <= 8 && len(d)-i >= 8:
			if (binary.LittleEndian.Uint64(d[i:])^sl.w0)&sl.m0 != 0 {
				return false
			}
		case n > 8 && n <= 16:
			if binary.LittleEndian.Uint64(d[i:]) != sl.w0 || binary.LittleEndian.Uint64(d[i+n-8:]) != sl.w1 {
				return false
			}
		default:
			if string(d[i:i+n]) != string(s.lits[sl.lit-sl.n:sl.lit]) {
				return false
			}
		}
		i += int(sl.n)
		start := i
		switch sl.kind {
		case slotString:
			// To the first quote, backslash or control character: the
			// next literal starts with the closing quote, so a string
			// with an escape or a control character is a miss.
			// plainEnd, eight bytes at a time inline.
			for {
				if i+8 > len(d) {
					i = plainEnd(d, i)
					break
				}
				if m := plainMask(binary.LittleEndian.Uint64(d[i:])); m != 0 {
					i += bits.TrailingZeros64(m) >> 3
					break
				}
				i += 8
			}
		case slotNumber:
			var ok bool
			if i, ok = numberAt(d, i); !ok {
				return false
			}
		case slotWord:
			switch rest := d[i:]; {
			case len(rest) >= 4 && (string(rest[:4]) == "true" || string(rest[:4]) == "null"):
				i += 4
			case len(rest) >= 5 && string(rest[:5]) == "false":
				i += 5
			default:
				return false
			}
		default: // slotEnd
			return i == len(d)
		}
		if sl.idx >= 0 {
			values[sl.idx] = jsonValue{start: int32(start), end: int32(i), set: true}
		}
	}
	return false
}

// build takes the shape of d, a text flatScan accepted (no escape in
// it, no ambiguity) with the values it kept (by path index). It
// reports false, the shape then empty, for a text over the bounds.
func (s *jsonShape) build(d []byte, values []jsonValue) bool {
	if s.lits == nil {
		s.lits, s.slots = s.litsRoom[:0], s.slotsRoom[:0]
	}
	s.lits, s.slots = s.lits[:0], s.slots[:0]
	if len(d) > maxShapeText {
		return false
	}
	from := 0 // where the literal being taken starts in d
	for i := 0; i < len(d); {
		c := d[i]
		var kind byte
		var end, next int // where the value ends, and where to read on
		switch {
		case c == '"':
			e := i + 1 + bytes.IndexByte(d[i+1:], '"') // its closing quote: flatScan read no escape
			if k := skipSpace(d, e+1); k < len(d) && d[k] == ':' {
				i = e + 1 // a key: part of the literal
				continue
			}
			kind, i, end, next = slotString, i+1, e, e+1 // the closing quote starts the next literal
		case c == '-' || c-'0' < 10:
			kind = slotNumber
			end, _ = numberEnd(d, i)
			next = end
		case c == 't' || c == 'n':
			kind, end, next = slotWord, i+4, i+4
		case c == 'f':
			kind, end, next = slotWord, i+5, i+5
		default:
			i++
			continue
		}
		if len(s.slots) == maxShapeValues {
			s.lits, s.slots = s.lits[:0], s.slots[:0]
			return false
		}
		idx := int32(-1)
		for j := range values {
			if values[j].set && int(values[j].start) == i {
				idx = int32(j)
			}
		}
		s.lits = append(s.lits, d[from:i]...)
		s.slots = append(s.slots, newSlot(d[from:i], int32(len(s.lits)), idx, kind))
		from, i = end, next
	}
	s.lits = append(s.lits, d[from:]...)
	s.slots = append(s.slots, newSlot(d[from:], int32(len(s.lits)), -1, slotEnd))
	return true
}

// newSlot is a slot after literal lit, ending at end in lits.
func newSlot(lit []byte, end, idx int32, kind byte) shapeSlot {
	sl := shapeSlot{lit: end, n: int32(len(lit)), idx: idx, kind: kind}
	var w [8]byte
	switch n := len(lit); {
	case n <= 8:
		copy(w[:], lit)
		sl.w0 = binary.LittleEndian.Uint64(w[:])
		sl.m0 = 1<<(8*n) - 1
		if n == 8 {
			sl.m0 = ^uint64(0)
		}
	case n <= 16:
		sl.w0 = binary.LittleEndian.Uint64(lit)
		sl.w1 = binary.LittleEndian.Uint64(lit[n-8:])
	}
	return sl
}

// shapeCache is one relay's shape: that of the last text it read
// whole, tried first on the next. When texts keep changing shape it
// steps aside: after shapeMisses misses in a row it is neither tried
// nor rebuilt for the next 16 texts, then 32, doubling up to 1,024,
// until shapeHits hits in a row (a stray hit does not end the backing
// off). So traffic of one shape is read by scan, and traffic of many
// pays at most a few failed scans and builds in every thousand texts.
type shapeCache struct {
	shape  jsonShape
	ok     bool // shape holds one
	hits   int  // hits in a row
	misses int  // misses in a row
	skip   int  // texts left to read without the shape
	wait   int  // the next skip
}

const (
	shapeMisses = 4
	shapeHits   = 8
)

// scanJSONShaped is scanJSON (values cleared before, by path index)
// trying c's shape first and taking the shape of each text that
// flatScan reads after a miss. c nil: scanJSON.
func scanJSONShaped(data []byte, paths *jsonPaths, values []jsonValue, c *shapeCache) error {
	if c == nil {
		return scanJSON(data, paths, values)
	}
	if c.skip > 0 {
		c.skip--
		return scanJSON(data, paths, values)
	}
	if c.ok {
		if c.shape.scan(data, values) {
			c.misses = 0
			if c.hits++; c.hits >= shapeHits {
				c.wait = 0
			}
			return nil
		}
		clear(values)
		c.hits = 0
		c.misses++
	}
	if c.misses >= shapeMisses {
		c.misses = 0
		c.wait = min(max(2*c.wait, 16), 1024)
		c.skip = c.wait
		return scanJSON(data, paths, values)
	}
	err, ok := flatScan(data, paths, values)
	if !ok {
		return readAll(data, paths, values)
	}
	if err == nil {
		if c.ok = c.shape.build(data, values); !c.ok {
			c.misses++ // over the bounds: counts as a miss
		}
	}
	return err
}
