package actionevent

import (
	"bufio"
	"bytes"
	stdjson "encoding/json"
	"os"
	"reflect"
	"testing"
)

// The decoder comparison issue 15 asked for: github.com/go-json-experiment/json
// (encoding/json/v2, what FromOCSF uses) and encoding/json decoding the
// collector's real input into the same structs, then the rest of what the
// collector does per line (mapping, event id, AppendJSON). The
// hand-written reader this replaced ran here too until commit
// b65c6ea; the package doc has the numbers. Run with
//
//	go test -run '^$' -bench 'Decode|Collector' -benchmem ./pkg/actionevent
//
// The lines are testdata/collector-lines.jsonl, written by
// scripts/bench/ocsf-lines.py (the generator scripts/bench/collector.sh
// uses): the producers' OCSF examples in docs/events.md, varied per line.

func collectorLines(tb testing.TB) [][]byte {
	tb.Helper()
	data, err := os.ReadFile("testdata/collector-lines.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	if len(out) == 0 {
		tb.Fatal("testdata/collector-lines.jsonl is empty")
	}
	return out
}

// The decoders compared. Each fills ev from line or fails.
var ocsfDecoders = []struct {
	name   string
	decode func(line []byte, ev *ocsfEvent) error
}{
	{"go-json-experiment", decodeOCSF}, // what FromOCSF uses
	{"encoding_json", func(line []byte, ev *ocsfEvent) error { return stdjson.Unmarshal(line, ev) }},
}

// The decoders read the benchmark lines into the same event, so the
// benchmark compares like with like.
func TestDecodersAgreeOnCollectorLines(t *testing.T) {
	for i, line := range collectorLines(t) {
		var want ocsfEvent
		if err := ocsfDecoders[0].decode(line, &want); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		for _, dec := range ocsfDecoders[1:] {
			var got ocsfEvent
			if err := dec.decode(line, &got); err != nil {
				t.Fatalf("%s: line %d: %v", dec.name, i, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: line %d decodes to\n%+v\ngo-json-experiment to\n%+v", dec.name, i, got, want)
			}
		}
	}
}

// BenchmarkDecode is the decoding alone, one op per line.
func BenchmarkDecode(b *testing.B) {
	lines := collectorLines(b)
	for _, dec := range ocsfDecoders {
		b.Run(dec.name, func(b *testing.B) {
			b.ReportAllocs()
			n, size := 0, 0
			for b.Loop() {
				line := lines[n%len(lines)]
				n++
				size += len(line)
				var ev ocsfEvent
				if err := dec.decode(line, &ev); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(size / max(n, 1)))
		})
	}
}

// BenchmarkCollectorLine is the collector's per-line work with each
// decoder: decode, map (FromOCSF's fromEvent, including the event id
// hash) and AppendJSON into a reused buffer, as pkg/collector's ingester
// does before handing the bytes to the spool.
func BenchmarkCollectorLine(b *testing.B) {
	lines := collectorLines(b)
	for _, dec := range ocsfDecoders {
		b.Run(dec.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 1024)
			n, size := 0, 0
			for b.Loop() {
				line := lines[n%len(lines)]
				n++
				size += len(line)
				var ev ocsfEvent
				if err := dec.decode(line, &ev); err != nil {
					b.Fatal(err)
				}
				r, err := fromEvent(&ev, line, "bench")
				if err != nil {
					b.Fatal(err)
				}
				buf = r.AppendJSON(buf[:0])
			}
			b.SetBytes(int64(size / max(n, 1)))
		})
	}
}
