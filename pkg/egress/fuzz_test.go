package egress

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse feeds arbitrary bytes to every lockfile parser and checks the
// parsers' and host extraction's invariants: no panic, bounded values,
// plausible line numbers, and every accepted host a valid lower-case DNS
// name. Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add(uint8(0), []byte("registry=https://registry.npmjs.org/\n@a:registry=https://npm.corp.example/\n"))
	f.Add(uint8(1), []byte(evilLock))
	f.Add(uint8(2), []byte("\"a@^1\":\n  resolved \"https://registry.yarnpkg.com/a.tgz#x\"\n"))
	f.Add(uint8(3), []byte("packages:\n  a@1:\n    resolution: {tarball: https://npm.corp.example/a.tgz}\n"))
	f.Add(uint8(4), []byte("-i https://pypi.org/simple\nx @ https://files.example.com/x.whl\n"))
	f.Add(uint8(5), []byte(uvLock))
	f.Add(uint8(6), []byte("[package.source]\nurl = \"https://pypi.corp.example/simple\"\n"))
	f.Fuzz(func(t *testing.T, k uint8, data []byte) {
		kind := Kinds[int(k)%len(Kinds)]
		refs, _ := Parse(kind, data)
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, r := range refs {
			if len(r.Value) > maxValueLen {
				t.Fatalf("value of %d bytes", len(r.Value))
			}
			if r.Line < 1 || r.Line > lines {
				t.Fatalf("line %d of %d", r.Line, lines)
			}
			host, reason, _ := HostOfURL(r.Value)
			if reason == "" {
				h, why, _ := CheckHost(host)
				if why != "" || h != host || host != strings.ToLower(host) {
					t.Fatalf("accepted host %q fails CheckHost: %s", host, why)
				}
			} else if len(host) > 84 || !utf8.ValidString(host) {
				t.Fatalf("reported host %q not sanitised", host)
			}
		}
	})
}

// FuzzParseTaskMetadata checks that any task document either fails with
// an error or yields declared hosts the classifier can judge.
func FuzzParseTaskMetadata(f *testing.F) {
	f.Add([]byte(`{"metadata":{"egress_contract":{"hosts":["pypi.org",1,null]},"runtime":{"egress_contract":{"hosts":["x.example.com"]}}}}`))
	f.Add([]byte(`{"metadata":null}`))
	f.Add([]byte(`{"metadata":{"egress_contract":{"hosts":{}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseTaskMetadata(data)
		if err != nil {
			return
		}
		cl := Classify(nil, d, DefaultTrustedRegistries)
		for _, g := range cl.Grants {
			if h, why, _ := CheckHost(g.Host); why != "" || h != g.Host || g.Tier != TierHubDeclared {
				t.Fatalf("granted %+v", g)
			}
		}
	})
}
