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

// flatScan is scanJSON in one loop, for the texts most messages are:
// no escape in any string, at most flatDepth open objects and arrays
// and flatKeys keys in the open objects. It reads the text in place and
// stores nothing but offsets (jsonValue, in values by path index). ok
// is false when the text is not one of those (scanJSON then reads it
// from the start with readObject, the values it left cleared).
// FuzzJSONScan holds both readings to encoding/json's.
//
// Per token it does as little as the common text needs: its state is
// in locals (no scanner struct copied in and written back); whitespace
// is stepped over only where there is some (JSON from machines rarely
// has any); a string's first eight bytes are looked at inline, eight at
// a time (plainMask); an integer's digits eight at a time (digitsEnd),
// numberEnd reading only fractions and exponents; and a key of the top
// object is matched by one pass over jsonPaths.top, not the general
// path search. BenchmarkJSONScan went from 100 to 72 ns with these
// (medians of 5 under the heavy lock, the same session).
func flatScan(d []byte, paths *jsonPaths, values []jsonValue) (err error, ok bool) {
	n := len(d)
	dup := false
	i := 0
	var lv [flatDepth]flatLevel
	if n > 1<<30 {
		return nil, false // offsets are int32
	}
	var keys [flatKeys]flatKey
	nk, depth := int32(0), 0
	j, below := -1, pathRun{} // the path of the next value, and the paths below it
	if i < n && d[i] <= ' ' {
		i = skipSpace(d, i)
	}
	if i >= n || d[i] != '{' {
		return errNotJSON, true
	}
	i++
	lv[0] = flatLevel{run: pathRun{0, len(paths.sorted), 0}}
objectStart: // after '{'
	if i < n && d[i] <= ' ' {
		i = skipSpace(d, i)
	}
	if i < n && d[i] == '}' {
		i++
		goto closed
	}
key: // an object's key, after '{' or ','
	if i < n && d[i] <= ' ' {
		i = skipSpace(d, i)
	}
	if i >= n || d[i] != '"' {
		return errNotJSON, true
	}
	{
		i++
		start := i
		if i+8 <= n { // plainEnd, its first step inline
			if m := plainMask(binary.LittleEndian.Uint64(d[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
			} else {
				i = plainEnd(d, i+8)
			}
		} else {
			i = plainEnd(d, i)
		}
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
				dup = true
			}
		}
		if nk == flatKeys {
			return nil, false
		}
		keys[nk] = flatKey{int32(start), int32(i - 1)}
		nk++
		if i < n && d[i] <= ' ' {
			i = skipSpace(d, i)
		}
		if i >= n || d[i] != ':' {
			return errNotJSON, true
		}
		i++
		j, below = -1, pathRun{}
		switch run := lv[depth].run; {
		case depth == 0 && paths.topMiss(k):
		case depth == 0 && paths.top != nil:
			for t := range paths.top {
				if paths.top[t].key == string(k) {
					j, below = paths.top[t].exact, paths.top[t].below
					break
				}
			}
		case run.lo < run.hi:
			j, below = paths.key(run, k)
		}
	}
value: // a value, after ':', '[' or ','
	if i < n && d[i] <= ' ' {
		i = skipSpace(d, i)
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
		if i < n && d[i] <= ' ' {
			i = skipSpace(d, i)
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
		if i+8 <= n { // plainEnd, its first step inline
			if m := plainMask(binary.LittleEndian.Uint64(d[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
			} else {
				i = plainEnd(d, i+8)
			}
		} else {
			i = plainEnd(d, i)
		}
		switch {
		case i >= n:
			return errNotJSON, true
		case d[i] == '\\':
			return nil, false
		case d[i] != '"':
			return errNotJSON, true
		}
		if j >= 0 {
			dup = dup || values[j].set
			values[j] = jsonValue{start: int32(start), end: int32(i), set: true}
		}
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
		if j >= 0 {
			dup = dup || values[j].set
			values[j] = jsonValue{start: int32(i), end: int32(i + len(lit)), set: true}
		}
		i += len(lit)
	case c == '-' || c >= '0' && c <= '9':
		end, ok := numberAt(d, i)
		if !ok {
			return errNotJSON, true
		}
		if j >= 0 {
			dup = dup || values[j].set
			values[j] = jsonValue{start: int32(i), end: int32(end), set: true}
		}
		i = end
	default:
		return errNotJSON, true
	}
afterValue:
	if i < n && d[i] <= ' ' {
		i = skipSpace(d, i)
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
	if i < n && d[i] <= ' ' {
		i = skipSpace(d, i)
	}
	switch {
	case i != n:
		return errNotJSON, true
	case dup:
		return errDup, true
	}
	return nil, true
}

// skipSpace is the index of the first byte from i on that is not JSON
// whitespace, or len(d).
func skipSpace(d []byte, i int) int {
	for i < len(d) && jsonSpace[d[i]] {
		i++
	}
	return i
}

// plainEnd is the index of the first byte from i on that a string does
// not hold as it is (a quote, a backslash or a control character), or
// len(d): eight bytes at a time while eight are left. (flatScan looks
// at the first eight inline, most keys and many values being shorter.)
func plainEnd(d []byte, i int) int {
	for ; i+8 <= len(d); i += 8 {
		if m := plainMask(binary.LittleEndian.Uint64(d[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(d) && jsonPlain[d[i]] {
		i++
	}
	return i
}

// plainMask flags (top bit set) the bytes of w, eight bytes of a
// string, that a string does not hold as they are, exactly up to the
// first (a borrow may flag bytes above it, so the lowest flag is the
// first such byte).
func plainMask(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, b := w^(ones*'"'), w^(ones*'\\')
	return ((q-ones)&^q | (b-ones)&^b | (w-ones*0x20)&^w) & highs
}

// numberAt is numberEnd for the number at d[i:] (flatScan's and
// jsonShape.scan's): an integer not starting with 0, the usual number,
// is read here; numberEnd reads the rest (and what this leaves again
// from its start).
func numberAt(d []byte, i int) (int, bool) {
	end := i
	if i < len(d) && d[i]-'1' < 9 {
		end = digitsEnd(d, i+1)
	}
	if end == i || end < len(d) && (d[end] == '.' || d[end]|0x20 == 'e') {
		return numberEnd(d, i)
	}
	return end, true
}
