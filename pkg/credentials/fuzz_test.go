package credentials

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzResolve feeds request text to the placeholder scanner: it never
// panics; for a target nothing is bound to, no value is ever written
// and the text comes back unchanged; for a bound target, every
// placeholder it reports resolved is gone and the value is in its place.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		"Bearer openshell:resolve:env:GH_TOKEN",
		"a=openshell%3Aresolve%3Aenv%3AGH_TOKEN&b=openshell:resolve:env:GH_TOKEN",
		"openshellopenshell:resolve:env:openshell:resolve:env:GH_TOKENx",
		"openshell:resolve:env:",
		"openshell%3aresolve:env%3AGH_OTHER",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	s, err := Build(mustParseF(goodFile), env(map[string]string{"PALISADE_TEST_GH_OTHER": secretEnv}))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in string, query bool) {
		enc := encRaw
		if query {
			enc = encQuery
		}
		r := s.Resolver(&Target{Host: "evil.test", Port: 443})
		if out := r.resolve(in, enc); out != in || r.Injected() {
			t.Fatalf("unbound target changed %q to %q", in, out)
		}
		r = s.Resolver(&Target{Host: "api.github.com", Port: 443, Binding: "github"})
		out := r.resolve(in, enc)
		if r.Err() == nil && strings.Count(in, "openshell") > 0 {
			if _, _, key, ok := find(out, 0, enc); ok && (key == "GH_TOKEN" || key == "GH_OTHER") && !strings.Contains(in, secretGitHub) && !strings.Contains(in, secretEnv) && !strings.Contains(in, url.QueryEscape(secretGitHub)) {
				t.Fatalf("%q still holds a bound placeholder after resolving: %q", in, out)
			}
		}
	})
}

func mustParseF(text string) *File {
	f, err := Parse([]byte(text))
	if err != nil {
		panic(err)
	}
	return f
}
