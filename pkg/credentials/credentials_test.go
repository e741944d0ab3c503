package credentials

import (
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The secrets of these tests are made-up strings; the tests check that
// no error, refusal or scrubbed message ever holds one.
const (
	secretOpenAI = "sk-test-0123456789abcdef"
	secretGitHub = "ghp_test/9876+543=="
	secretEnv    = "env-secret-value-42"
)

const goodFile = `version: 1
providers:
  openai:
    credentials:
      OPENAI_API_KEY: {value: "` + secretOpenAI + `"}
    endpoints:
      - host: api.openai.com
        port: 443
        path: /v1
      - host: "*.openai.test"
        ports: [443, 8443]
  github:
    credentials:
      GH_TOKEN: {value: "` + secretGitHub + `"}
      GH_OTHER: {env: PALISADE_TEST_GH_OTHER}
`

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func mustStore(t *testing.T, text string, vars map[string]string) *Store {
	t.Helper()
	f, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Build(f, env(vars))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseGood(t *testing.T) {
	f, err := Parse([]byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Keys(), ","); got != "GH_OTHER,GH_TOKEN,OPENAI_API_KEY" {
		t.Errorf("keys %s", got)
	}
	if got := strings.Join(f.EnvNames(), ","); got != "PALISADE_TEST_GH_OTHER" {
		t.Errorf("env names %s", got)
	}
	if e := f.Providers["openai"].Endpoints[1]; e.Host.String() != "*.openai.test" || len(e.Ports) != 2 {
		t.Errorf("endpoint %+v", e)
	}
}

// Every mistake is an error naming its field; none quotes a value.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "version: file is empty"},
		{"version", "version: 2\nproviders: {a: {credentials: {K: {value: x}}}}\n", "version: must be 1"},
		{"unknown top", "version: 1\nprovider: {}\n", `unknown key "provider"`},
		{"no providers", "version: 1\n", "providers: is required"},
		{"provider name", "version: 1\nproviders: {'-x': {credentials: {K: {value: v}}}}\n", "providers.-x: provider names"},
		{"unknown provider key", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoint: []}}\n", `providers.a.endpoint: unknown key "endpoint"`},
		{"no credentials", "version: 1\nproviders: {a: {endpoints: [{host: x.test, port: 1}]}}\n", "providers.a.credentials: is required"},
		{"bad key", "version: 1\nproviders: {a: {credentials: {1KEY: {value: " + secretOpenAI + "}}}}\n", "providers.a.credentials.1KEY: a credential's key"},
		{"reserved key", "version: 1\nproviders: {a: {credentials: {v1_KEY: {value: " + secretOpenAI + "}}}}\n", "reserved for OpenShell"},
		{"duplicate key", "version: 1\nproviders: {a: {credentials: {K: {value: v}}}, b: {credentials: {K: {value: " + secretOpenAI + "}}}}\n", "key K is already defined at providers.a.credentials.K"},
		{"both sources", "version: 1\nproviders: {a: {credentials: {K: {value: " + secretOpenAI + ", env: X}}}}\n", "set exactly one of value"},
		{"scalar source", "version: 1\nproviders: {a: {credentials: {K: " + secretOpenAI + "}}}\n", "providers.a.credentials.K: must be a mapping"},
		{"number value", "version: 1\nproviders: {a: {credentials: {K: {value: 123456}}}}\n", "providers.a.credentials.K.value: must be a string"},
		{"empty value", "version: 1\nproviders: {a: {credentials: {K: {value: ''}}}}\n", "value: is empty"},
		{"newline value", "version: 1\nproviders: {a: {credentials: {K: {value: \"" + secretOpenAI + "\\r\\nX: y\"}}}}\n", "contains a NUL, CR or LF"},
		{"placeholder value", "version: 1\nproviders: {a: {credentials: {K: {value: 'openshell:resolve:env:K'}}}}\n", "contains a placeholder"},
		{"bad env name", "version: 1\nproviders: {a: {credentials: {K: {env: 'A-B'}}}}\n", "env: must name an environment variable"},
		{"unknown source key", "version: 1\nproviders: {a: {credentials: {K: {file: /x}}}}\n", `unknown key "file"`},
		{"empty endpoints", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: []}}\n", "providers.a.endpoints: must not be empty"},
		{"endpoint host", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: [{host: '*.com', port: 443}]}}\n", "providers.a.endpoints[0].host"},
		{"endpoint no host", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: [{port: 443}]}}\n", "providers.a.endpoints[0].host: is required"},
		{"endpoint no port", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: [{host: x.test}]}}\n", "providers.a.endpoints[0].port: is required"},
		{"endpoint port range", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: [{host: x.test, port: 70000}]}}\n", "providers.a.endpoints[0].port: must be a port"},
		{"endpoint both ports", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: [{host: x.test, port: 1, ports: [2]}]}}\n", "set either port or ports"},
		{"endpoint path", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: [{host: x.test, port: 1, path: v1}]}}\n", `path: must start with "/"`},
		{"endpoint path dots", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: [{host: x.test, port: 1, path: /a/../b}]}}\n", "path: must not contain . or .. segments"},
		{"endpoint path escape", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: [{host: x.test, port: 1, path: /a%2Fb}]}}\n", "path: is a decoded path prefix"},
		{"endpoint unknown key", "version: 1\nproviders: {a: {credentials: {K: {value: v}}, endpoints: [{host: x.test, port: 1, scheme: https}]}}\n", `unknown key "scheme"`},
		{"alias", "version: 1\nproviders: {a: &x {credentials: {K: {value: v}}}, b: *x}\n", "aliases are not allowed"},
		{"two documents", "version: 1\nproviders: {a: {credentials: {K: {value: v}}}}\n---\nversion: 1\n", "multiple YAML documents"},
		{"bad yaml", "version: 1\nproviders: {a: \"" + secretOpenAI + "\n", "invalid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.text)
			}
			msg := regexp.MustCompile(` \(line \d+\)`).ReplaceAllString(err.Error(), "")
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secretOpenAI) {
				t.Errorf("error quotes a value: %v", err)
			}
		})
	}
}

func TestBuildEnv(t *testing.T) {
	f, err := Parse([]byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(f, env(nil))
	if err == nil || !strings.Contains(err.Error(), "providers.github.credentials.GH_OTHER.env: environment variable PALISADE_TEST_GH_OTHER is not set") {
		t.Errorf("unset variable: %v", err)
	}
	_, err = Build(f, env(map[string]string{"PALISADE_TEST_GH_OTHER": secretEnv + "\n"}))
	if err == nil || !strings.Contains(err.Error(), "contains a NUL, CR or LF") || strings.Contains(err.Error(), secretEnv) {
		t.Errorf("bad value: %v", err)
	}
	s, err := Build(f, env(map[string]string{"PALISADE_TEST_GH_OTHER": secretEnv}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 || s.Providers() != 2 {
		t.Errorf("len %d providers %d", s.Len(), s.Providers())
	}
}

func paths(p ...string) func() ([]string, bool) {
	return func() ([]string, bool) { return p, p != nil }
}

// A value is written only where its provider is bound: host, port, path
// prefix (every reading), or the policy endpoint's credential_binding
// for a provider without endpoints.
func TestBinding(t *testing.T) {
	s := mustStore(t, goodFile, map[string]string{"PALISADE_TEST_GH_OTHER": secretEnv})
	h := "Bearer " + Placeholder("OPENAI_API_KEY")
	for _, tc := range []struct {
		name   string
		t      Target
		header string
		want   string // resolved header, or the refusal reason
	}{
		{"bound", Target{Host: "api.openai.com", Port: 443, Paths: paths("/v1/chat")}, h, "Bearer " + secretOpenAI},
		{"prefix itself", Target{Host: "api.openai.com", Port: 443, Paths: paths("/v1")}, h, "Bearer " + secretOpenAI},
		{"outside prefix", Target{Host: "api.openai.com", Port: 443, Paths: paths("/v1beta/x")}, h, ReasonEndpointMismatch},
		{"a reading outside", Target{Host: "api.openai.com", Port: 443, Paths: paths("/v1/x", "/admin")}, h, ReasonEndpointMismatch},
		{"unreadable path", Target{Host: "api.openai.com", Port: 443, Paths: paths()}, h, ReasonEndpointMismatch},
		{"other port", Target{Host: "api.openai.com", Port: 8443, Paths: paths("/v1")}, h, ReasonEndpointMismatch},
		{"other host", Target{Host: "evil.test", Port: 443, Paths: paths("/v1")}, h, ReasonEndpointMismatch},
		{"wildcard", Target{Host: "eu.openai.test", Port: 8443}, h, "Bearer " + secretOpenAI},
		{"wildcard apex", Target{Host: "openai.test", Port: 443}, h, ReasonEndpointMismatch},
		{"binding ignored for endpointful provider", Target{Host: "evil.test", Port: 443, Binding: "openai"}, h, ReasonEndpointMismatch},
		{"bound by policy", Target{Host: "api.github.com", Port: 443, Binding: "github"}, "token " + Placeholder("GH_TOKEN"), "token " + secretGitHub},
		{"env value", Target{Host: "api.github.com", Port: 443, Binding: "github"}, Placeholder("GH_OTHER"), secretEnv},
		{"unbound", Target{Host: "api.github.com", Port: 443}, "token " + Placeholder("GH_TOKEN"), ReasonEndpointMismatch},
		{"other binding", Target{Host: "api.github.com", Port: 443, Binding: "openai"}, "token " + Placeholder("GH_TOKEN"), ReasonEndpointMismatch},
		{"unknown key", Target{Host: "api.openai.com", Port: 443, Paths: paths("/v1")}, Placeholder("NOPE"), ReasonUnknown},
		{"mismatch outranks unknown", Target{Host: "api.openai.com", Port: 443, Paths: paths("/v1")}, Placeholder("NOPE") + " " + Placeholder("GH_TOKEN"), ReasonEndpointMismatch},
		{"no placeholder", Target{Host: "evil.test", Port: 443}, "Bearer openshell:resolve:other:X openshell:resolve:env:", "Bearer openshell:resolve:other:X openshell:resolve:env:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{"Authorization": {tc.header}}
			orig := hdr["Authorization"]
			r := s.Resolver(&tc.t)
			r.Header(hdr)
			got := hdr.Get("Authorization")
			if err := r.Err(); err != nil {
				var rf *Refusal
				if !errors.As(err, &rf) {
					t.Fatalf("error %v is not a *Refusal", err)
				}
				got = rf.Reason
				for _, v := range []string{secretOpenAI, secretGitHub, secretEnv, "GH_TOKEN", "OPENAI_API_KEY", Prefix} {
					if strings.Contains(err.Error(), v) {
						t.Errorf("refusal %q names %q", err, v)
					}
				}
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if orig[0] != tc.header {
				t.Errorf("the client's header slice changed to %q", orig[0])
			}
		})
	}
}

func TestRevokedAndNone(t *testing.T) {
	hdr := http.Header{"X-Api-Key": {Placeholder("OPENAI_API_KEY")}}
	r := Revoked().Resolver(&Target{Host: "api.openai.com", Port: 443})
	r.Header(hdr)
	var rf *Refusal
	if !errors.As(r.Err(), &rf) || rf.Reason != ReasonRevoked {
		t.Errorf("revoked store: %v", r.Err())
	}
	var none *Store
	r = none.Resolver(&Target{Host: "x.test", Port: 443})
	r.Header(hdr)
	if r.Err() != nil || hdr.Get("X-Api-Key") != Placeholder("OPENAI_API_KEY") || r.Injected() {
		t.Errorf("no store: %v %q", r.Err(), hdr.Get("X-Api-Key"))
	}
}

// Query placeholders are found written as they are or with ':'
// percent-encoded (Python's urlencode), and values go in
// percent-encoded, so the query still parses to the value.
func TestQuery(t *testing.T) {
	s := mustStore(t, goodFile, map[string]string{"PALISADE_TEST_GH_OTHER": secretEnv})
	tg := &Target{Host: "api.github.com", Port: 443, Binding: "github"}
	for _, raw := range []string{
		"a=1&token=" + Placeholder("GH_TOKEN") + "&b=2",
		"a=1&token=" + url.QueryEscape(Placeholder("GH_TOKEN")) + "&b=2",
		"a=1&token=openshell%3aresolve%3Aenv:GH_TOKEN&b=2",
	} {
		r := s.Resolver(tg)
		out := r.Query(raw)
		if r.Err() != nil {
			t.Fatalf("%s: %v", raw, r.Err())
		}
		q, err := url.ParseQuery(out)
		if err != nil || q.Get("token") != secretGitHub || q.Get("a") != "1" || q.Get("b") != "2" {
			t.Errorf("%s -> %s (%v)", raw, out, err)
		}
		if !r.Injected() {
			t.Errorf("%s: not injected", raw)
		}
	}
	r := s.Resolver(&Target{Host: "evil.test", Port: 443})
	if out := r.Query("x=" + url.QueryEscape(Placeholder("GH_TOKEN"))); r.Err() == nil || strings.Contains(out, secretGitHub) {
		t.Errorf("unbound query resolved: %s %v", out, r.Err())
	}
	// Encoded separators count only in a query: a header keeps %3A.
	hdr := http.Header{"X": {url.QueryEscape(Placeholder("GH_TOKEN"))}}
	r = s.Resolver(tg)
	r.Header(hdr)
	if r.Injected() {
		t.Errorf("header with encoded placeholder resolved")
	}
}

func TestScrub(t *testing.T) {
	s := mustStore(t, goodFile, map[string]string{"PALISADE_TEST_GH_OTHER": secretEnv})
	r := s.Resolver(&Target{Host: "api.github.com", Port: 443, Binding: "github"})
	r.Header(http.Header{"A": {Placeholder("GH_TOKEN")}})
	msg := r.Scrub("upstream said: bad token " + secretGitHub + "!")
	if strings.Contains(msg, secretGitHub) || !strings.Contains(msg, "[credential]") {
		t.Errorf("scrubbed %q", msg)
	}
}

const checkPolicy = `version: 1
network_policies:
  ai:
    endpoints:
      - host: api.openai.com
        port: 443
        protocol: rest
        access: full
    binaries: [{path: /usr/bin/curl}]
  gh:
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        access: read-only
        credential_binding: {provider: github}
    binaries: [{path: /usr/bin/curl}]
`

func TestCheckPolicy(t *testing.T) {
	f, err := Parse([]byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse([]byte(checkPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPolicy(p, f); err != nil {
		t.Fatalf("good policy refused: %v", err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"passthrough", "        protocol: rest\n        access: full\n", "", "network_policies.ai.endpoints[0]: admits api.openai.com:443, where provider openai's credentials are bound, but does not inspect its CONNECT tunnels (no protocol: rest)"},
		{"passthrough wildcard", "host: api.openai.com\n        port: 443\n        protocol: rest\n        access: full\n", "host: \"**.openai.test\"\n        port: 8443\n", "admits *.openai.test:443,8443"},
		{"tls skip accepted", "        protocol: rest\n        access: full\n", "        allow_uninspected_credentials: true\n", ""},
		{"no such provider", "provider: github", "provider: gitlab", "network_policies.gh.endpoints[0].credential_binding.provider: the credentials file has no provider gitlab"},
		{"endpointful provider", "provider: github", "provider: openai", "provider openai lists its own endpoints"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(checkPolicy, tc.from, tc.to, 1)
			p, err := policy.Parse([]byte(text))
			if err != nil {
				t.Fatalf("%v\n%s", err, text)
			}
			err = CheckPolicy(p, f)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	if err := CheckPolicy(p, nil); err == nil || !strings.Contains(err.Error(), "no credentials file is loaded") {
		t.Errorf("binding without a file: %v", err)
	}
}

// The file must be root's and unreadable by group and others; each
// refusal names the file.
func TestReadFile(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "credentials.yaml")
	if err := os.WriteFile(path, []byte(goodFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); err != nil {
		t.Fatalf("good file: %v", err)
	}
	os.Chmod(path, 0o400)
	if _, err := LoadFile(path); err != nil {
		t.Fatalf("mode 0400: %v", err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660} {
		os.Chmod(path, mode)
		_, err := ReadFile(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "group and others must have no access") {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	os.Chmod(path, 0o600)
	os.Chown(path, 10001, 10001)
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), path+" is owned by uid 10001") {
		t.Errorf("not root's: %v", err)
	}
	os.Chown(path, 0, 0)
	// A symbolic link of another user's on the way is refused.
	link := filepath.Join(dir, "link.yaml")
	os.Symlink(path, link)
	os.Lchown(link, 10001, 10001)
	if _, err := ReadFile(link); err == nil || !strings.Contains(err.Error(), "symbolic link owned by uid 10001") {
		t.Errorf("foreign symlink: %v", err)
	}
	if _, err := ReadFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing: %v", err)
	}
	// A parse error names the file, never a value.
	os.WriteFile(path, []byte("version: 1\nproviders: {a: {credentials: {K: \""+secretOpenAI+"\"}}}\n"), 0o600)
	if _, err := LoadFile(path); err == nil || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), secretOpenAI) {
		t.Errorf("parse error: %v", err)
	}
}

// Bodies are read for placeholders by content type: JSON (escaped into
// the string), form (percent-encoded), text (as is); other types and
// charsets pass unchanged.
func TestBody(t *testing.T) {
	s := mustStore(t, goodFile, map[string]string{"PALISADE_TEST_GH_OTHER": `env"value`})
	tg := &Target{Host: "api.github.com", Port: 443, Binding: "github"}
	ph := Placeholder("GH_OTHER")
	for _, tc := range []struct{ ctype, in, want string }{
		{"application/json", `{"a":"` + ph + `"}`, `{"a":"env\"value"}`},
		{"application/vnd.api+json; charset=UTF-8", `["` + ph + `"]`, `["env\"value"]`},
		{"application/x-www-form-urlencoded", "a=" + url.QueryEscape(ph), "a=env%22value"},
		{"text/plain; charset=us-ascii", "x " + ph, `x env"value`},
		{"text/plain; charset=iso-8859-1", "x " + ph, "x " + ph},
		{"application/octet-stream", ph, ph},
		{"", ph, ph},
		{"not a type", ph, ph},
	} {
		r := s.Resolver(tg)
		if got := string(r.Body([]byte(tc.in), tc.ctype)); got != tc.want || r.Err() != nil {
			t.Errorf("%q %q: %q %v, want %q", tc.ctype, tc.in, got, r.Err(), tc.want)
		}
		if RewritableBody(tc.ctype) != (tc.in != tc.want) {
			t.Errorf("RewritableBody(%q) = %v", tc.ctype, RewritableBody(tc.ctype))
		}
	}
}

// A WebSocket text message resolves like a JSON body when it is JSON
// (the value escaped into the string, so the message stays JSON) and as
// it is otherwise; a placeholder the target does not bind is refused
// (credential_endpoint_mismatch) and left as it is. Mutation-checked:
// with encRaw for JSON messages the first case fails.
func TestText(t *testing.T) {
	s := mustStore(t, goodFile, map[string]string{"PALISADE_TEST_GH_OTHER": `env"value`})
	ph := Placeholder("GH_OTHER")
	for _, tc := range []struct{ in, want string }{
		{`{"auth":"` + ph + `"}`, `{"auth":"env\"value"}`},
		{"auth " + ph, `auth env"value`},
		{"no placeholder", "no placeholder"},
	} {
		r := s.Resolver(&Target{Host: "api.github.com", Port: 443, Binding: "github"})
		if got := string(r.Text([]byte(tc.in))); got != tc.want || r.Err() != nil {
			t.Errorf("%q: %q %v, want %q", tc.in, got, r.Err(), tc.want)
		}
	}
	r := s.Resolver(&Target{Host: "api.github.com", Port: 443, Binding: "other"})
	in := `{"auth":"` + ph + `"}`
	var cr *Refusal
	if got := string(r.Text([]byte(in))); got != in || !errors.As(r.Err(), &cr) || cr.Reason != ReasonEndpointMismatch {
		t.Errorf("unbound: %q %v", got, r.Err())
	}
}
