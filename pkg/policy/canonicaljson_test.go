package policy

import (
	"bytes"
	"reflect"
	"testing"
)

// trickyStrings are strings whose JSON encodings differ between encoders:
// HTML characters (encoding/json with SetEscapeHTML(false) keeps them),
// quotes and backslashes, control characters, U+2028 and U+2029, and
// invalid UTF-8.
var trickyStrings = []string{"", "/usr/bin", `<a href="x">&amp;</a>`, "tab\there\nnew\x00nul\x1f", "line\u2028sep\u2029", "bad\xff\xfeutf8", `back\slash "quote"`, "ünïcødé 😀"}

// fillTop sets every field of v (a struct reached from Policy's top level,
// not its network policies) to a value that is not its zero value, so
// that a field added to Policy, FilesystemPolicy, Landlock or Process and
// not written by canonicalJSON makes TestCanonicalJSONMatchesEncodingJSON
// fail even when its tag has omitempty.
func fillTop(t *testing.T, v reflect.Value, n int) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		name := v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.Int:
			f.SetInt(int64(n + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.String:
			f.SetString(trickyStrings[(n+i)%len(trickyStrings)])
		case reflect.Slice:
			if f.Type().Elem().Kind() != reflect.String {
				t.Fatalf("field %s: fillTop fills only string slices", name)
			}
			s := reflect.MakeSlice(f.Type(), 0, len(trickyStrings))
			for j := range trickyStrings {
				s = reflect.Append(s, reflect.ValueOf(trickyStrings[(n+i+j)%len(trickyStrings)]))
			}
			f.Set(s)
		case reflect.Struct:
			fillTop(t, f, n+i)
		case reflect.Map:
			if name != "NetworkPolicies" {
				t.Fatalf("field %s: a map canonicalJSON does not know", name)
			}
		default:
			t.Fatalf("field %s: kind %s that canonicalJSON does not write", name, f.Kind())
		}
	}
}

func TestCanonicalJSONMatchesEncodingJSON(t *testing.T) {
	withNetwork := mustParse(t, base)
	cases := map[string]*Policy{
		"bundled default": mustParse(t, string(DefaultRaw())),
		"base":            withNetwork,
		"zero":            {},
		"empty network":   {NetworkPolicies: map[string]*NetworkPolicy{}},
	}
	for n := range 8 {
		p := &Policy{}
		fillTop(t, reflect.ValueOf(p).Elem(), n)
		if n%2 == 0 {
			p.NetworkPolicies = withNetwork.Clone().NetworkPolicies
		}
		cases["filled "+string(rune('a'+n))] = p
	}
	for name, p := range cases {
		for _, norm := range []bool{false, true} {
			c := p.Clone()
			if c == nil {
				c = &Policy{}
			}
			if norm {
				normalise(c)
			}
			got, want := canonicalJSON(c), mustJSON(c)
			if !bytes.Equal(got, want) {
				t.Errorf("%s (normalised %v):\ncanonicalJSON %s\nencoding/json %s", name, norm, got, want)
			}
		}
	}
}

// BenchmarkCanonical compares canonicalJSON with encoding/json on the
// whole policy (base: every field set, two network policies; then the
// bundled policy, "bundled/"), both with their encoders already built.
func BenchmarkCanonical(b *testing.B) {
	for _, in := range []struct{ prefix, raw string }{{"", base}, {"bundled/", string(DefaultRaw())}} {
		p, err := Parse([]byte(in.raw))
		if err != nil {
			b.Fatal(err)
		}
		normalise(p)
		b.Run(in.prefix+"encoding-json", func(b *testing.B) {
			for b.Loop() {
				mustJSON(p)
			}
		})
		b.Run(in.prefix+"top-level-by-hand", func(b *testing.B) {
			for b.Loop() {
				canonicalJSON(p)
			}
		})
	}
}
