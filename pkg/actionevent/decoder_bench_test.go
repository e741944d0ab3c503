package actionevent

import (
	"bufio"
	"bytes"
	stdjson "encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// The decoder comparison issue 15 asks for: the hand-written reader,
// encoding/json and github.com/go-json-experiment/json (the proposed
// encoding/json/v2) decoding the collector's real input into the same
// structs, then the rest of what the collector does per line (mapping,
// event id, AppendJSON). Run with
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

// libEvent is ocsfEvent plus the two attributes the hand-written reader
// folds while decoding (the agent label, the container name), so that a
// struct-tag decoder fills the same struct.
type libEvent struct {
	ocsfEvent
	Metadata struct {
		UID    string   `json:"uid"`
		Labels []string `json:"labels"`
	} `json:"metadata"`
	Device struct {
		Container struct {
			Name string `json:"name"`
		} `json:"container"`
	} `json:"device"`
}

func (l *libEvent) fold() *ocsfEvent {
	ev := &l.ocsfEvent
	ev.Metadata.UID = l.Metadata.UID
	for _, s := range l.Metadata.Labels {
		if a, ok := strings.CutPrefix(s, "agent:"); ok {
			ev.Metadata.LabelAgent = a
		}
	}
	ev.ContainerName = l.Device.Container.Name
	return ev
}

// The three decoders. Each fills ev from line or fails.
var ocsfDecoders = []struct {
	name   string
	decode func(line []byte, ev *libEvent) error
}{
	{"handwritten", func(line []byte, ev *libEvent) error {
		d := decoder{b: line}
		return decodeEvent(&d, &ev.ocsfEvent)
	}},
	{"encoding_json", func(line []byte, ev *libEvent) error {
		if err := stdjson.Unmarshal(line, ev); err != nil {
			return err
		}
		ev.fold()
		return nil
	}},
	{"go-json-experiment", func(line []byte, ev *libEvent) error {
		// The hand-written reader's semantics: the last duplicate wins,
		// invalid UTF-8 becomes U+FFFD.
		err := jsonv2.Unmarshal(line, ev, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
		if err != nil {
			return err
		}
		ev.fold()
		return nil
	}},
}

// The three decoders read the benchmark lines into the same event, so the
// benchmark compares like with like.
func TestDecodersAgreeOnCollectorLines(t *testing.T) {
	for i, line := range collectorLines(t) {
		var want libEvent
		if err := ocsfDecoders[0].decode(line, &want); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		for _, dec := range ocsfDecoders[1:] {
			var got libEvent
			if err := dec.decode(line, &got); err != nil {
				t.Fatalf("%s: line %d: %v", dec.name, i, err)
			}
			if !reflect.DeepEqual(got.ocsfEvent, want.ocsfEvent) {
				t.Errorf("%s: line %d decodes to\n%+v\nthe hand-written reader to\n%+v", dec.name, i, got.ocsfEvent, want.ocsfEvent)
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
				var ev libEvent
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
				var ev libEvent
				if err := dec.decode(line, &ev); err != nil {
					b.Fatal(err)
				}
				r, err := fromEvent(&ev.ocsfEvent, line, "bench")
				if err != nil {
					b.Fatal(err)
				}
				buf = r.AppendJSON(buf[:0])
			}
			b.SetBytes(int64(size / max(n, 1)))
		})
	}
}
