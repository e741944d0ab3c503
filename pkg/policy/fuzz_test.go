package policy

import (
	"bytes"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to the loader. It must never panic, must
// reject with a non-empty Errors, and whatever it accepts must round-trip:
// the canonical form and the normalised YAML parse back to the same
// checksum. The seed corpus is testdata/fuzz/FuzzLoad (run by `make test`).
func FuzzLoad(f *testing.F) {
	f.Add([]byte(base))
	f.Add(DefaultRaw())
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			errs, ok := AsErrors(err)
			if !ok || len(errs) == 0 {
				t.Fatalf("rejection is not a non-empty Errors: %T %v", err, err)
			}
			if p != nil {
				t.Fatal("policy returned with an error")
			}
			return
		}
		n := p.Clone()
		normalise(n)
		if got, want := canonicalJSON(n), mustJSON(n); !bytes.Equal(got, want) {
			t.Fatalf("canonicalJSON differs from encoding/json:\n%s\n%s", got, want)
		}
		sum := p.Checksum()
		c := p.Canonical()
		q, err := Parse(c)
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, c)
		}
		if q.Checksum() != sum || !bytes.Equal(q.Canonical(), c) {
			t.Fatalf("canonical form is not a fixed point:\n%s\n%s", c, q.Canonical())
		}
		y, err := Parse(p.YAML())
		if err != nil {
			t.Fatalf("normalised YAML does not parse: %v\n%s", err, p.YAML())
		}
		if y.Checksum() != sum {
			t.Fatalf("normalised YAML changes the checksum:\n%s", p.YAML())
		}
	})
}
