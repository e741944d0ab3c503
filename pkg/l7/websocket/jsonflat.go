package websocket

import (
	"encoding/binary"
	"math/bits"
)

// Limits of the texts flatScan reads; beyond them readObject does.
const (
	flatDepth = 8  // open objects and arrays
	flatKeys  = 16 // keys of the open objects
)

// flatLevel is an open object or array in flatScan.
type flatLevel struct {
	run   pathRun // the paths an object's keys continue
	keys  int32   // where its keys start in flatScan's keys
	array bool
}

// flatKey is a key's place in the text (offsets: flatScan's arrays
// hold no pointers, so they are not cleared or scanned by the GC).
type flatKey struct{ start, end int32 }

// flatScan is scanObject in one loop, for the texts most messages
// are: no escape in any string, at most flatDepth open objects and
// arrays and flatKeys keys in the open objects. It reads the text in
// place and stores nothing but offsets (jsonValue). ok is false when
// the text is not one of those (scanObject then reads it from the
// start with readObject, and the values and dup it left are cleared).
// FuzzJSONScan holds both readings to encoding/json's.
func (s *jsonScanner) flatScan() (err error, ok bool) {
	d := s.data
	n := len(d)
	i := 0
	var lv [flatDepth]flatLevel
	if n > 1<<30 {
		return nil, false // offsets are int32
	}
	var keys [flatKeys]flatKey
	nk, depth := int32(0), 0
	j, below := -1, pathRun{} // the path of the next value, and the paths below it
	for i < n && jsonSpace[d[i]] {
		i++
	}
	if i >= n || d[i] != '{' {
		return errNotJSON, true
	}
	i++
	lv[0] = flatLevel{run: pathRun{0, len(s.paths.sorted), 0}}
objectStart: // after '{'
	for i < n && jsonSpace[d[i]] {
		i++
	}
	if i < n && d[i] == '}' {
		i++
		goto closed
	}
key: // an object's key, after '{' or ','
	for i < n && jsonSpace[d[i]] {
		i++
	}
	if i >= n || d[i] != '"' {
		return errNotJSON, true
	}
	{
		i++
		start := i
		i = plainEnd(d, i)
		switch {
		case i >= n:
			return errNotJSON, true
		case d[i] == '\\':
			return nil, false
		case d[i] != '"':
			return errNotJSON, true // a control character
		}
		k := d[start:i]
		i++
		for _, o := range keys[lv[depth].keys:nk] {
			if string(d[o.start:o.end]) == string(k) {
				s.dup = true
			}
		}
		if nk == flatKeys {
			return nil, false
		}
		keys[nk] = flatKey{int32(start), int32(i - 1)}
		nk++
		for i < n && jsonSpace[d[i]] {
			i++
		}
		if i >= n || d[i] != ':' {
			return errNotJSON, true
		}
		i++
		if run := lv[depth].run; run.lo < run.hi && (depth > 0 || !s.paths.topMiss(k)) {
			j, below = s.paths.key(run, k)
		} else {
			j, below = -1, pathRun{}
		}
	}
value: // a value, after ':', '[' or ','
	for i < n && jsonSpace[d[i]] {
		i++
	}
	if i >= n {
		return errNotJSON, true
	}
	switch c := d[i]; {
	case c == '{' || c == '[':
		if depth+1 == flatDepth {
			return nil, false
		}
		depth++
		i++
		if c == '{' {
			lv[depth] = flatLevel{run: below, keys: nk}
			goto objectStart
		}
		lv[depth] = flatLevel{keys: nk, array: true}
		for i < n && jsonSpace[d[i]] {
			i++
		}
		if i < n && d[i] == ']' {
			i++
			goto closed
		}
		j, below = -1, pathRun{} // no path reaches into an array
		goto value
	case c == '"':
		i++
		start := i
		i = plainEnd(d, i)
		switch {
		case i >= n:
			return errNotJSON, true
		case d[i] == '\\':
			return nil, false
		case d[i] != '"':
			return errNotJSON, true
		}
		s.keep(j, start, i, false)
		i++
	case c == 't' || c == 'f' || c == 'n':
		lit := "null"
		if c == 't' {
			lit = "true"
		} else if c == 'f' {
			lit = "false"
		}
		if n-i < len(lit) || string(d[i:i+len(lit)]) != lit {
			return errNotJSON, true
		}
		s.keep(j, i, i+len(lit), false)
		i += len(lit)
	case c == '-' || c >= '0' && c <= '9':
		end, ok := numberEnd(d, i)
		if !ok {
			return errNotJSON, true
		}
		s.keep(j, i, end, false)
		i = end
	default:
		return errNotJSON, true
	}
afterValue:
	for i < n && jsonSpace[d[i]] {
		i++
	}
	if i >= n {
		return errNotJSON, true
	}
	switch d[i] {
	case ',':
		i++
		if lv[depth].array {
			goto value // j and below are still an array's
		}
		goto key
	case '}':
		if lv[depth].array {
			return errNotJSON, true
		}
	case ']':
		if !lv[depth].array {
			return errNotJSON, true
		}
	default:
		return errNotJSON, true
	}
	i++
closed: // after the '}' or ']' closing lv[depth]
	nk = lv[depth].keys
	if depth > 0 {
		depth-- // inside an array j and below are -1 and empty still: no key inside one reaches a path
		goto afterValue
	}
	for i < n && jsonSpace[d[i]] {
		i++
	}
	switch {
	case i != n:
		return errNotJSON, true
	case s.dup:
		return errDup, true
	}
	return nil, true
}

// plainEnd is the index of the first byte from i on that a string does
// not hold as it is (a quote, a backslash or a control character), or
// len(d): eight bytes at a time while eight are left.
func plainEnd(d []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(d); i += 8 {
		w := binary.LittleEndian.Uint64(d[i:])
		q, b := w^(ones*'"'), w^(ones*'\\')
		// Each term flags its bytes exactly up to the first one it
		// flags (a borrow may flag bytes above it), so the lowest flag
		// is the first such byte.
		m := (q-ones)&^q | (b-ones)&^b | (w-ones*0x20)&^w
		if m &= highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < len(d) && jsonPlain[d[i]] {
		i++
	}
	return i
}
