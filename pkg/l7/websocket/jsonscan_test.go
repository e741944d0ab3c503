package websocket

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// refScan is scanObject's answer by encoding/json: errNotJSON, errDup
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

var scanWant = map[string]int{"type": 0, "params.channel": 1, "op": 2, "a.b": 3, "a": 4}

func scan(data []byte) ([]string, []bool, error) {
	values, set := make([][]byte, len(scanWant)), make([]bool, len(scanWant))
	s := jsonScanner{data: data, paths: scanWant, lens: lensOf(scanWant), values: values, set: set}
	err := s.scanObject()
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out, set, err
}

// FuzzJSONScan: jsonScanner and encoding/json agree on every UTF-8
// input: JSON object or not, ambiguous or not, and the values kept.
func FuzzJSONScan(f *testing.F) {
	for _, s := range []string{`{"type":"subscribe","params":{"channel":"ticker.a"}}`, `{"a":1,"a":2}`, `{"a.b":1,"a":{"b":2}}`,
		`{"op":-1.5e+3,"x":[{"a":1,"a":2}]}`, `{"type":"\u0073ub\ud83d\ude00\ud800"}`, `[1,2]`, `{"a":tru}`, ` {"a" : null } `,
		`{"\u0074ype":1,"type":2}`, `{"a":{"b":{"c":{}}}}`, `{"a":01}`, `{"a":"\x01"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return // text messages are checked UTF-8 first
		}
		gv, gs, gerr := scan(data)
		wv, ws, werr := refScan(data, scanWant)
		if gerr != werr {
			t.Fatalf("%q: scanner %v, encoding/json %v", data, gerr, werr)
		}
		if gerr == nil && (fmt.Sprint(gv) != fmt.Sprint(wv) || fmt.Sprint(gs) != fmt.Sprint(ws)) {
			t.Fatalf("%q: scanner kept %q %v, encoding/json %q %v", data, gv, gs, wv, ws)
		}
	})
}

// BenchmarkJSONScan: the subscribe message through jsonScanner and
// through encoding/json's token reader (jsonScanner's comment quotes
// the ratio).
func BenchmarkJSONScan(b *testing.B) {
	msg := []byte(`{"type":"subscribe","channel":"ticker.btc-usd","id":12345678901}`)
	want := map[string]int{"type": 0, "channel": 1}
	lens := lensOf(want)
	b.Run("scanner", func(b *testing.B) {
		for range b.N {
			values, set := make([][]byte, 2), make([]bool, 2)
			s := jsonScanner{data: msg, paths: want, lens: lens, values: values, set: set}
			if s.scanObject() != nil {
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

func lensOf(paths map[string]int) uint64 {
	var l uint64
	for p := range paths {
		l |= 1 << min(len(p), 63)
	}
	return l
}
