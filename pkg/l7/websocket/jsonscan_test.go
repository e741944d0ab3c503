package websocket

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"unicode/utf8"
)

// The reference reading jsonScanner must agree with: encoding/json's
// token reader, keys compared after decoding, values as json.Number or
// decoded strings.

var errRefDup = errors.New("ambiguous JSON")

type refWalker struct {
	dec    *json.Decoder
	want   map[string]int
	values []string
	set    []bool
}

// refScan is scanJSON's answer by encoding/json: errNotJSON, errDup
// or nil with values filled.
func refScan(data []byte, want map[string]int) ([]string, []bool, error) {
	if !json.Valid(data) {
		return nil, nil, errNotJSON
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	t, err := dec.Token()
	if d, ok := t.(json.Delim); err != nil || !ok || d != '{' {
		return nil, nil, errNotJSON
	}
	w := &refWalker{dec: dec, want: want, values: make([]string, len(want)), set: make([]bool, len(want))}
	if err := w.object("", 1); err != nil {
		if errors.Is(err, errRefDup) {
			return nil, nil, errDup
		}
		return nil, nil, errNotJSON
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errNotJSON
	}
	return w.values, w.set, nil
}

func (w *refWalker) object(prefix string, depth int) error {
	if depth > maxJSONDepth {
		return errRefDup
	}
	seen := map[string]bool{}
	for w.dec.More() {
		t, err := w.dec.Token()
		if err != nil {
			return err
		}
		key := t.(string)
		if seen[key] {
			return errRefDup
		}
		seen[key] = true
		if err := w.value(prefix+key, prefix != "\x00", depth); err != nil {
			return err
		}
	}
	_, err := w.dec.Token()
	return err
}

func (w *refWalker) value(path string, reach bool, depth int) error {
	t, err := w.dec.Token()
	if err != nil {
		return err
	}
	keep := func(v string) error {
		j, ok := w.want[path]
		if !reach || path == "" || !ok {
			return nil
		}
		if w.set[j] {
			return errRefDup
		}
		w.values[j], w.set[j] = v, true
		return nil
	}
	switch v := t.(type) {
	case json.Delim:
		if v == '{' {
			p := path + "."
			if !reach || path == "" {
				p = "\x00"
			}
			return w.object(p, depth+1)
		}
		if depth+1 > maxJSONDepth {
			return errRefDup
		}
		for w.dec.More() {
			if err := w.value("", false, depth+1); err != nil {
				return err
			}
		}
		_, err := w.dec.Token()
		return err
	case string:
		return keep(v)
	case json.Number:
		return keep(v.String())
	case bool:
		return keep(fmt.Sprint(v))
	case nil:
		return keep("null")
	}
	return nil
}

var errFlatLeft = errors.New("left to readObject")

// scanWants are the paths FuzzJSONScan keeps: a few (matched in one
// pass, top-level keys by jsonPaths.top), many sharing prefixes
// (matched by binary search, no jsonPaths.top), and odd spellings few
// enough for jsonPaths.top.
var scanWants = []map[string]int{
	{"type": 0, "params.channel": 1, "op": 2, "a.b": 3, "a": 4},
	manyPaths("type", "params.channel", "params", "params.ch", "params.channels", "params-x", "op", "a", "a.b", "a.b.c",
		"a-b", "a.c", "ab", "b", "b.a", "k1", "k16", "x.type", "id", "", "\x00a", "a..b", "a.", ".a", "é.ü"),
	manyPaths("a..b", "a.", ".a", "", "\x00a", "é.ü"),
}

func manyPaths(paths ...string) map[string]int {
	m := map[string]int{}
	for i, p := range paths {
		m[p] = i
	}
	return m
}

func scan(data []byte) ([]string, []bool, error) {
	return scanWith(data, scanWants[0], scanObject)
}

// scanObject is scanJSON of s's text.
func scanObject(s *jsonScanner) error { return scanJSON(s.data, s.paths, s.values) }

// scanWith reads data for want with read: scanObject, or one of its
// two ways.
func scanWith(data []byte, want map[string]int, read func(*jsonScanner) error) ([]string, []bool, error) {
	values := make([]jsonValue, len(want))
	s := jsonScanner{data: data, paths: newJSONPaths(want), values: values}
	err := read(&s)
	out, set := make([]string, len(values)), make([]bool, len(values))
	for i, v := range values {
		if set[i] = v.set; v.set {
			out[i] = string(v.text(data))
		}
	}
	return out, set, err
}

// checkScan fails t where a reading of data for want differs from
// encoding/json's.
func checkScan(t *testing.T, data []byte, want map[string]int) {
	wv, ws, werr := refScan(data, want)
	flat := func(s *jsonScanner) error {
		if err, ok := flatScan(s.data, s.paths, s.values); ok {
			return err
		}
		return errFlatLeft
	}
	for _, r := range []struct {
		name string
		read func(*jsonScanner) error
	}{{"scanJSON", scanObject}, {"readObject", (*jsonScanner).readObject}, {"flatScan", flat}} {
		gv, gs, gerr := scanWith(data, want, r.read)
		if gerr == errFlatLeft {
			continue
		}
		if gerr != werr || gerr == nil && (fmt.Sprint(gv) != fmt.Sprint(wv) || fmt.Sprint(gs) != fmt.Sprint(ws)) {
			t.Fatalf("%q (%d paths): %s %v, kept %q %v; encoding/json %v, kept %q %v", data, len(want), r.name, gerr, gv, gs, werr, wv, ws)
		}
	}
}

// The fuzzed path sets take both ways of matching a top-level key.
func TestScanWantsTop(t *testing.T) {
	for i, want := range scanWants {
		if got := newJSONPaths(want).top != nil; got != (i != 1) {
			t.Errorf("scanWants[%d]: jsonPaths.top set %v", i, got)
		}
	}
}

// FuzzJSONScan: jsonScanner and encoding/json agree on every UTF-8
// input: JSON object or not, ambiguous or not, and the values kept;
// so do readObject alone (what flatScan leaves to it) and flatScan
// alone wherever it reads the text.
func FuzzJSONScan(f *testing.F) {
	for _, s := range []string{`{"type":"subscribe","params":{"channel":"ticker.a"}}`, `{"a":1,"a":2}`, `{"a.b":1,"a":{"b":2}}`,
		`{"op":-1.5e+3,"x":[{"a":1,"a":2}]}`, `{"type":"\u0073ub\ud83d\ude00\ud800"}`, `[1,2]`, `{"a":tru}`, ` {"a" : null } `,
		`{"\u0074ype":1,"type":2}`, `{"a":{"b":{"c":{}}}}`, `{"a":01}`, `{"a":"\x01"}`,
		`{"params":{"channel":"x"},"params.channel":"y"}`, `{"a":[{"b":1},[2,{"a":3}]],"a.b":true}`, `{"":{"":1},"op":"é€"}`,
		`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k1":0}`,
		`{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":1}}}}}}}}}`, `{"type":"sub\"scribe"}`, `{"op" :1 , "type":"x" }`,
		`{"a":{"b":1},"b":2}`, `{"a":[{"b":1}],"b":2}`, `{"x":[1,{"type":2}],"type":"subscribe","op":[]}`,
		`{"params":{"ch":1,"channels":[2],"channel":"c"},"params-x":3,"a":{"b":{"c":4},"":5,".b":6},"\u0000a":7,"é":{"ü":8}}`,
		`{"op":15E+3,"a":1.5,"type":10e2,"x":[7.0,8E1]}`, `{"type":12345678901234567890,"op":0.5,"a":123456789}`, `{"op":1x}`, `{"op":12345678.}`,
		`{"type":"subscribe","channel":"ticker.btc-usd","id":12345678901}`, `{"a.b":1,"a":2,"op":3,"params":4,"params.channel":5,"typ":6,"types":7}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return // text messages are checked UTF-8 first
		}
		for _, want := range scanWants {
			checkScan(t, data, want)
		}
	})
}

// BenchmarkJSONScan: the subscribe message through jsonScanner and
// through encoding/json's token reader (jsonScanner's comment quotes
// the ratio). "scanner-64" and "shape-64" read the 64 different
// messages of the WebSocket benchmarks (benchMessages) in turn, by
// scanJSON and by scanJSONShaped with one relay's shapeCache (every one
// a hit after the first: the same keys, other values); docs/
// egress-proxy.md sets them beside simdjson on the same messages.
func BenchmarkJSONScan(b *testing.B) {
	msg := []byte(`{"type":"subscribe","channel":"ticker.btc-usd","id":12345678901}`)
	want := map[string]int{"type": 0, "channel": 1}
	paths := newJSONPaths(want)
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var values [2]jsonValue
			if scanJSON(msg, paths, values[:]) != nil {
				b.Fatal("scan")
			}
		}
	})
	msgs := benchMessages()
	b.Run("scanner-64", func(b *testing.B) {
		for i := range b.N {
			var values [2]jsonValue
			if scanJSON(msgs[i&63], paths, values[:]) != nil {
				b.Fatal("scan")
			}
		}
	})
	b.Run("shape-64", func(b *testing.B) {
		var c shapeCache
		for i := range b.N {
			var values [2]jsonValue
			if scanJSONShaped(msgs[i&63], paths, values[:], &c) != nil {
				b.Fatal("scan")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for range b.N {
			if _, _, err := refScan(msg, want); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchMessages are the WebSocket benchmarks' client messages (as
// pkg/proxy's wsBenchBatch writes them): 64 subscribe messages of 54-71
// bytes, eight channels, ids of 1-16 digits.
func benchMessages() [][]byte {
	var out [][]byte
	for i := range 64 {
		kv := benchFields(i)
		out = append(out, []byte("{"+kv[0]+","+kv[1]+","+kv[2]+"}"))
	}
	return out
}

// benchFields are the members of benchmark message i (i mod 64):
// type, channel and id.
func benchFields(i int) [3]string {
	channels := []string{"btc-usd", "eth-usd", "sol-usdt", "ada-eur", "xrp-usd", "doge-usdt", "ltc-btc", "dot-eur"}
	i %= 64
	id := strconv.FormatUint(uint64(i+1)*1234567890123457%10_000_000_000_000_000, 10)
	id = id[:1+(i*7)%len(id)]
	return [3]string{`"type":"subscribe"`, `"channel":"ticker.` + channels[(i*5)%len(channels)] + `"`, `"id":` + id}
}

// plainEnd's eight-at-a-time reading finds the byte a byte-at-a-time
// reading does, at every offset, with every byte value in every place.
func TestPlainEnd(t *testing.T) {
	for c := range 256 {
		for at := range 20 {
			d := bytes.Repeat([]byte("a"), 24)
			d[at] = byte(c)
			for i := range at + 1 {
				want := i
				for want < len(d) && jsonPlain[d[want]] {
					want++
				}
				if got := plainEnd(d, i); got != want {
					t.Fatalf("byte %#x at %d, from %d: %d, want %d", c, at, i, got, want)
				}
			}
		}
	}
}

// digitsEnd's eight-at-a-time reading finds the byte a byte-at-a-time
// reading does, at every offset, with every byte value in every place.
func TestDigitsEnd(t *testing.T) {
	for c := range 256 {
		for at := range 20 {
			d := bytes.Repeat([]byte("7"), 24)
			d[at] = byte(c)
			for i := range at + 1 {
				want := i
				for want < len(d) && d[want]-'0' < 10 {
					want++
				}
				if got := digitsEnd(d, i); got != want {
					t.Fatalf("byte %#x at %d, from %d: %d, want %d", c, at, i, got, want)
				}
			}
		}
	}
}
