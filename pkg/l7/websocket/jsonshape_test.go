package websocket

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// shapeTexts are texts whose shapes the tests take: the benchmark's
// message, nesting, arrays, whitespace, every scalar kind, keys
// reaching paths at several depths, and texts a shape must not be
// taken of (escapes, not JSON, ambiguous).
var shapeTexts = []string{
	`{"type":"subscribe","channel":"ticker.btc-usd","id":12345678901}`,
	`{"type":"subscribe","params":{"channel":"ticker.a","n":[1,2.5,-3e+2,"x",true]},"op":null}`,
	` { "type" : "" , "op" : false , "a" : { "b" : 0 } } `,
	`{"a.b":1,"x":[{"type":"q"},[],{}],"params":{"channel":"c","ch":1}}`,
	`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read","arguments":{"path":"/a"}}}`,
	`{"op":-0.5E-7,"type":"é€","id":0}`,
	`{}`,
	`{"type":"sub\"x"}`, `{"a":1,"a":2}`, `[1,2]`, `{"a":01}`,
}

// scanRef is scanJSON's reading of d for want: its error and the
// values it keeps, printed.
func scanRef(d []byte, paths *jsonPaths, n int) (error, string) {
	values := make([]jsonValue, n)
	err := scanJSON(d, paths, values)
	return err, fmt.Sprint(values)
}

// shapeOf takes the shape of d for paths as a relay does (flatScan
// accepted it), or reports false.
func shapeOf(d []byte, paths *jsonPaths, n int) (*jsonShape, bool) {
	values := make([]jsonValue, n)
	if err, ok := flatScan(d, paths, values); !ok || err != nil {
		return nil, false
	}
	s := &jsonShape{}
	return s, s.build(d, values)
}

// checkShapeScan fails t when s accepts d where scanJSON would not, or
// keeps other values than scanJSON; it reports whether s accepted d.
func checkShapeScan(t *testing.T, s *jsonShape, from, d []byte, paths *jsonPaths, n int) bool {
	t.Helper()
	values := make([]jsonValue, n)
	if !s.scan(d, values) {
		return false
	}
	werr, want := scanRef(d, paths, n)
	if got := fmt.Sprint(values); werr != nil || got != want {
		t.Fatalf("the shape of %q accepts %q keeping %s; scanJSON: %v, keeping %s", from, d, got, werr, want)
	}
	return true
}

// Every text flatScan accepts within the bounds has a shape, and the
// shape accepts the text itself, keeping what scanJSON keeps.
func TestJSONShapeOwnText(t *testing.T) {
	for _, want := range scanWants {
		paths := newJSONPaths(want)
		for _, txt := range shapeTexts {
			d := []byte(txt)
			err, ok := flatScan(d, paths, make([]jsonValue, len(want)))
			s, built := shapeOf(d, paths, len(want))
			if built != (ok && err == nil) {
				t.Fatalf("%q: shape taken %v, flatScan ok %v err %v", d, built, ok, err)
			}
			if built && !checkShapeScan(t, s, d, d, paths, len(want)) {
				t.Fatalf("the shape of %q does not accept it", d)
			}
		}
	}
}

// Every text one byte away from a shape's own (a byte replaced,
// inserted or removed, anywhere) is either refused by the shape or
// read as scanJSON reads it; and changes inside values are accepted.
func TestJSONShapeMutations(t *testing.T) {
	repl := []byte("\"\\,:{}[] \t0159.eE+-atrufln\x01\x7fé")
	hits, misses := 0, 0
	for _, want := range scanWants {
		paths, n := newJSONPaths(want), len(want)
		for _, txt := range shapeTexts {
			from := []byte(txt)
			s, ok := shapeOf(from, paths, n)
			if !ok {
				continue
			}
			try := func(d []byte) {
				if checkShapeScan(t, s, from, d, paths, n) {
					hits++
				} else {
					misses++
				}
			}
			for i := 0; i <= len(from); i++ {
				for _, c := range repl {
					if i < len(from) {
						try(append(append(bytes.Clone(from[:i]), c), from[i+1:]...))
					}
					try(append(append(bytes.Clone(from[:i]), c), from[i:]...))
				}
				if i < len(from) {
					try(append(bytes.Clone(from[:i]), from[i+1:]...))
				}
			}
		}
	}
	// Values changed in place (a digit for a digit, a letter for a
	// letter inside a string) keep the shape: these must be hits.
	paths := newJSONPaths(scanWants[0])
	from := []byte(shapeTexts[0])
	s, _ := shapeOf(from, paths, len(scanWants[0]))
	for _, d := range []string{
		`{"type":"unsubscribe","channel":"ticker.eth-eur","id":7}`,
		`{"type":"","channel":"x","id":-1.5e3}`,
		`{"type":"subscribe","channel":"ticker.é","id":12345678901234567890}`,
	} {
		if !checkShapeScan(t, s, from, []byte(d), paths, len(scanWants[0])) {
			t.Errorf("the shape of %q does not accept %q", from, d)
		}
	}
	if hits == 0 || misses == 0 {
		t.Fatalf("mutations: %d accepted, %d refused; want some of each", hits, misses)
	}
	t.Logf("mutations: %d accepted by the shape, %d refused", hits, misses)
}

// FuzzJSONShape: a shape (of a) accepts only texts that scanJSON reads
// the same way: b itself, and a with its values replaced by b's pieces
// (b split at NUL bytes), which is what reaches the shape's edges.
func FuzzJSONShape(f *testing.F) {
	for i, txt := range shapeTexts {
		f.Add([]byte(txt), []byte(shapeTexts[(i+1)%len(shapeTexts)]))
		f.Add([]byte(txt), []byte("x\x00-1.5e3\x00true\x00\"\x00a\\\"b\x0012,"))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if !utf8.Valid(a) || !utf8.Valid(b) {
			return // text messages are checked UTF-8 first
		}
		for _, want := range scanWants {
			paths, n := newJSONPaths(want), len(want)
			s, ok := shapeOf(a, paths, n)
			if !ok {
				continue
			}
			if !checkShapeScan(t, s, a, a, paths, n) {
				t.Fatalf("the shape of %q does not accept it", a)
			}
			checkShapeScan(t, s, a, b, paths, n)
			pieces := bytes.Split(b, []byte{0})
			var c []byte
			l := int32(0)
			for k, sl := range s.slots {
				c = append(c, s.lits[l:sl.lit]...)
				l = sl.lit
				if sl.kind != slotEnd {
					c = append(c, pieces[k%len(pieces)]...)
				}
			}
			checkShapeScan(t, s, a, c, paths, n)
		}
	})
}

// FuzzJSONShapeCache: texts read one after another through one
// shapeCache (the relay's way: hits, misses, rebuilt shapes, backing
// off) get scanJSON's answer each, whatever the sequence.
func FuzzJSONShapeCache(f *testing.F) {
	f.Add([]byte(shapeTexts[0]+"\n"+shapeTexts[0]+"\n"+`{"type":"x","channel":"y","id":1}`+"\n"+shapeTexts[1]+"\n"+shapeTexts[7]), uint8(3))
	f.Add([]byte(shapeTexts[2]+"\n"+shapeTexts[3]+"\n"+shapeTexts[4]+"\n"+shapeTexts[9]), uint8(40))
	f.Fuzz(func(t *testing.T, seq []byte, repeat uint8) {
		texts := bytes.Split(seq, []byte("\n"))
		for _, want := range scanWants {
			paths, n := newJSONPaths(want), len(want)
			var c shapeCache
			for r := range int(repeat%64) + 1 {
				for _, d := range texts {
					if !utf8.Valid(d) {
						continue
					}
					values := make([]jsonValue, n)
					err := scanJSONShaped(d, paths, values, &c)
					werr, wv := scanRef(d, paths, n)
					if err != werr || err == nil && fmt.Sprint(values) != wv {
						t.Fatalf("round %d, %q: through the cache %v %v; scanJSON %v %s", r, d, err, values, werr, wv)
					}
				}
			}
		}
	})
}

// The cache serves one shape's traffic from the shape, and steps aside
// from traffic that keeps changing shape.
func TestShapeCacheBacksOff(t *testing.T) {
	paths := newJSONPaths(scanWants[0])
	n := len(scanWants[0])
	read := func(c *shapeCache, d string) {
		t.Helper()
		values := make([]jsonValue, n)
		if err := scanJSONShaped([]byte(d), paths, values, c); err != nil {
			t.Fatalf("%q: %v", d, err)
		}
	}
	var c shapeCache
	read(&c, `{"type":"a","op":1}`)
	if !c.ok {
		t.Fatal("no shape taken of the first text")
	}
	for i := range 100 {
		read(&c, fmt.Sprintf(`{"type":"a%d","op":%d}`, i, i))
		if c.misses != 0 || c.skip != 0 {
			t.Fatalf("text %d of the same shape: misses %d, skip %d", i, c.misses, c.skip)
		}
	}
	// Two shapes in turn: every text a miss, so after shapeMisses the
	// shape is set aside for 16 texts, then 32, ...
	alt := []string{`{"type":"a","op":1}`, `{"op":1,"type":"a"}`}
	for i := range shapeMisses {
		read(&c, alt[(i+1)%2])
	}
	if c.skip != 16 {
		t.Fatalf("after %d misses in a row: skip %d, want 16", shapeMisses, c.skip)
	}
	for i := range 16 + shapeMisses {
		read(&c, alt[i%2])
	}
	if c.skip != 32 {
		t.Fatalf("after the next %d misses: skip %d, want 32", shapeMisses, c.skip)
	}
	// A stray hit does not end the backing off; shapeHits in a row do.
	for range 32 {
		read(&c, alt[0]) // skipped
	}
	for i := 0; c.hits < shapeHits; i++ {
		if i > shapeHits+1 {
			t.Fatalf("%d texts of one shape, %d hits in a row", i, c.hits)
		}
		if read(&c, alt[0]); c.hits > 0 && c.hits < shapeHits && c.wait != 32 {
			t.Fatalf("after %d hits in a row: wait %d, want 32", c.hits, c.wait)
		}
	}
	if c.wait != 0 || c.misses != 0 {
		t.Fatalf("after %d hits in a row: wait %d, misses %d, want 0", shapeHits, c.wait, c.misses)
	}
}

// Through a relay, messages of one shape are still held to the rules
// value by value: after allowed messages of a shape (read by the
// shape), one of the same shape whose value no rule allows is refused,
// one with a duplicate key is refused as ambiguous, and one whose key
// differs by a byte is refused by the rules rather than read by the
// shape; everything before each refusal is relayed.
func TestRelayMessagesShapeHits(t *testing.T) {
	r, err := Compile(&policy.WebSocket{Text: []policy.MessageMatch{{JSON: map[string]string{"type": "subscribe", "channel": "ticker.*"}}}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var allowed []byte
	for i := range 20 {
		msg := fmt.Sprintf(`{"type":"subscribe","channel":"ticker.%d","id":%d}`, i*37, i*1234567)
		allowed = appendTestFrame(allowed, true, OpText, []byte(msg), rng)
	}
	for _, c := range []struct {
		name, last string
		code       int
	}{
		{"a value no rule allows", `{"type":"subscribe","channel":"secret.1","id":5}`, ClosePolicyViolation},
		{"a type no rule allows", `{"type":"subscribx","channel":"ticker.1","id":5}`, ClosePolicyViolation},
		{"a key spelled otherwise", `{"type":"subscribe","chann3l":"ticker.1","id":5}`, ClosePolicyViolation},
		{"a duplicate key", `{"type":"subscribe","type":"admin____","id":5}`, ClosePolicyViolation},
		{"an escape in a value", `{"type":"subscribe","channel":"ticker\u002e1","id":5}`, 0},
		{"not JSON after the value", `{"type":"subscribe","channel":"ticker.1","id":5}x`, ClosePolicyViolation},
	} {
		in := appendTestFrame(bytes.Clone(allowed), true, OpText, []byte(c.last), rng)
		var out bytes.Buffer
		n, err := RelayMessages(&out, bufio.NewReader(bytes.NewReader(in)), &Checker{Client: true}, r, nil, nil)
		code, err := closeCode(err)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := allowed
		if c.code == 0 {
			want = in
		}
		if code != c.code || !bytes.Equal(out.Bytes(), want) || n != int64(len(want)) {
			t.Errorf("%s: code %d, wrote %d bytes; want code %d and %d bytes", c.name, code, n, c.code, len(want))
		}
	}
}
