package ceiling

import (
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/l7/rest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

const testCeiling = `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /etc]
  read_write: [/tmp, /var/cache]
network_policies:
  github:
    endpoints:
      - host: "*.github.com"
        port: 443
        protocol: rest
        access: read-only
      - host: api.github.com
        port: 443
        protocol: rest
        rules:
          - allow: {method: GET, path: /repos/**}
          - allow: {method: POST, path: /repos/*/issues}
        deny_rules:
          - {method: POST, path: /repos/*/admin/**}
    binaries: [{path: /usr/bin/git}, {path: /usr/bin/gh}]
  gl:
    endpoints: [{host: "*.gitlab.test", port: 443, protocol: rest, access: read-only}]
    binaries: [{path: /usr/bin/git}]
  npm:
    endpoints:
      - host: registry.npmjs.org
        port: 443
    binaries: [{path: /usr/bin/node}]
  pg:
    endpoints:
      - host: db.internal.test
        port: 5432
        protocol: tcp
    binaries: [{path: /usr/bin/psql}]
  lan:
    endpoints:
      - allowed_ips: [10.1.0.0/16]
        port: 8080
      - host: "*.corp.test"
        port: 443
        allowed_ips: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, "fc00::/7"]
    binaries: [{path: /usr/lib/tools/*}]
`

func mustParse(t *testing.T, s string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(s))
	if err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	return p
}

// entry renders one network entry as a whole policy.
func entry(name, body string) string {
	return "version: 1\nnetwork_policies:\n  " + name + ":\n" + body
}

// Each refusal names the policy field and says why; the first excess is
// what the entry points report.
func TestRefusalMessages(t *testing.T) {
	c := mustParse(t, testCeiling)
	for _, tc := range []struct {
		name, policy, want string
	}{
		{"host", entry("gh", `    endpoints: [{host: api.gitlab.com, port: 443}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gh.endpoints[0]: host api.gitlab.com not within the ceiling"},
		{"wildcard host", entry("gh", `    endpoints: [{host: "**.github.com", port: 443, protocol: rest, access: read-only}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gh.endpoints[0]: host **.github.com not within the ceiling"},
		{"port", entry("gh", `    endpoints: [{host: api.github.com, port: 8443}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gh.endpoints[0].ports: port 8443 of host api.github.com not within the ceiling"},
		{"binary", entry("gh", `    endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: /repos/x}}]}]
    binaries: [{path: /usr/bin/curl}]
`), "network_policies.gh.binaries[0]: binary /usr/bin/curl may not reach api.github.com on port 443 within the ceiling"},
		{"binary glob", entry("tools", `    endpoints: [{host: x.corp.test, port: 443}]
    binaries: [{path: /usr/lib/**}]
`), "network_policies.tools.binaries[0]: binary /usr/lib/** may not reach x.corp.test on port 443 within the ceiling"},
		{"rule", entry("gh", `    endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{allow: {method: POST, path: /repos/x/pulls}}], deny_rules: [{method: POST, path: /repos/*/admin/**}]}]
    binaries: [{path: /usr/bin/gh}]
`), "network_policies.gh.endpoints[0].rules[0]: api.github.com:443 POST /repos/x/pulls is not inside any one allow rule of the ceiling's network_policies.github.endpoints[1]"},
		{"deny rule", entry("gh", `    endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{allow: {method: POST, path: /repos/*/issues}}]}]
    binaries: [{path: /usr/bin/gh}]
`), "network_policies.gh.endpoints[0].rules[0]: api.github.com:443 POST /repos/*/issues is not held to the ceiling's deny rule POST /repos/*/admin/** (network_policies.github.endpoints[1].deny_rules[0]); copy it into the policy"},
		{"uninspected", entry("gh", `    endpoints: [{host: api.github.com, port: 443}]
    binaries: [{path: /usr/bin/gh}]
`), "network_policies.gh.endpoints[0]: api.github.com:443 relays tunnels without inspection (no protocol), but the ceiling's network_policies.github.endpoints[1] inspects them (protocol rest)"},
		{"tcp under rest", entry("gh", `    endpoints: [{host: api.github.com, port: 443, protocol: tcp}]
    binaries: [{path: /usr/bin/gh}]
`), "network_policies.gh.endpoints[0]: api.github.com:443 relays tunnels without inspection (protocol tcp), but the ceiling's network_policies.github.endpoints[1] inspects them (protocol rest)"},
		{"credential binding", entry("gl", `    endpoints: [{host: "*.gitlab.test", port: 443, protocol: rest, access: read-only, credential_binding: {provider: gitlab}}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gl.endpoints[0].credential_binding: *.gitlab.test:443 resolves provider gitlab's credentials in its requests, but the ceiling's network_policies.gl.endpoints[0] does not bind them"},
		{"body rewrite", entry("gl", `    endpoints: [{host: "*.gitlab.test", port: 443, protocol: rest, access: read-only, request_body_credential_rewrite: true}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gl.endpoints[0].request_body_credential_rewrite: *.gitlab.test:443 resolves credential placeholders in request bodies, but the ceiling's network_policies.gl.endpoints[0] does not"},
		{"signing", entry("gl", `    endpoints: [{host: "*.gitlab.test", port: 443, protocol: rest, access: read-only, credential_signing: sigv4, signing_service: s3}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gl.endpoints[0].credential_signing: *.gitlab.test:443 re-signs requests for s3 with AWS credentials, but the ceiling's network_policies.gl.endpoints[0] does not (for that service and region)"},
		{"tls skip", entry("npm", `    endpoints: [{host: registry.npmjs.org, port: 443, tls: skip}]
    binaries: [{path: /usr/bin/node}]
`), "network_policies.npm.endpoints[0].tls: registry.npmjs.org:443 tls: skip relays tunnels without checking the TLS server name, but the ceiling's network_policies.npm.endpoints[0] checks it"},
		{"audit", entry("gl", `    endpoints: [{host: "*.gitlab.test", port: 443, protocol: rest, access: read-only, enforcement: audit}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gl.endpoints[0]: *.gitlab.test:443 has enforcement: audit, so every HTTP request passes, but the ceiling's network_policies.gl.endpoints[0] enforces L7 rules"},
		{"preset", entry("gl", `    endpoints: [{host: "*.gitlab.test", port: 443, protocol: rest, access: read-write}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gl.endpoints[0].access: *.gitlab.test:443 GET * admits git's push discovery (.../info/refs?service=git-receive-pack), which the ceiling's access: read-only (network_policies.gl.endpoints[0]) refuses"},
		{"preset method", entry("gl", `    endpoints: [{host: "*.gitlab.test", port: 443, protocol: rest, rules: [{allow: {method: "*", path: /x}}]}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gl.endpoints[0].rules[0]: *.gitlab.test:443 every method on /x is outside the ceiling's access: read-only (network_policies.gl.endpoints[0])"},
		{"method case", entry("gl", `    endpoints: [{host: "*.gitlab.test", port: 443, protocol: rest, rules: [{allow: {method: GET, path: /x}}]}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gl.endpoints[0].rules[0]: *.gitlab.test:443 the rule for GET /x also admits other letter cases of the method (a rule compares methods case-insensitively), which the ceiling's access: read-only (network_policies.gl.endpoints[0]) refuses"},
		{"outranked", entry("gh", `    endpoints: [{host: "*.github.com", port: 443, protocol: rest, access: read-only}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gh.endpoints[0].access: *.github.com:443 GET * is not inside any one allow rule of the ceiling's network_policies.github.endpoints[1]"},
		{"private addresses", entry("gh", `    endpoints: [{host: uploads.github.com, port: 443, protocol: rest, access: read-only}]
    binaries: [{path: /usr/bin/git}]
`), "network_policies.gh.endpoints[0]: uploads.github.com:443 may reach private addresses (10.0.0.0/8: an exact host may), but the ceiling's *.github.com reaches private addresses only inside its allowed_ips"},
		{"hostless", entry("lan", `    endpoints: [{allowed_ips: [10.0.0.0/8], port: 8080}]
    binaries: [{path: /usr/lib/tools/x}]
`), "network_policies.lan.endpoints[0]: allowed_ips [10.0.0.0/8] not within the ceiling"},
		{"read_write", "version: 1\nfilesystem_policy: {read_write: [/var]}\n", "filesystem_policy.read_write[0]: /var is not within the ceiling's filesystem_policy.read_write"},
		{"read_only", "version: 1\nfilesystem_policy: {read_only: [/opt/x]}\n", "filesystem_policy.read_only[0]: /opt/x is not within the ceiling's filesystem_policy"},
		{"landlock", "version: 1\nlandlock: {compatibility: best_effort}\n", "landlock.compatibility: best_effort may run without Landlock, but the ceiling requires hard_requirement"},
		{"user", "version: 1\nprocess: {run_as_user: \"1500\"}\n", "process.run_as_user: 1500 is not the ceiling's sandbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xs := Contains(c, mustParse(t, tc.policy), Options{})
			if len(xs) == 0 {
				t.Fatalf("accepted:\n%s", tc.policy)
			}
			if got := xs[0].Error(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// Policies inside the ceiling are proved, including the cases that need
// the prover's finer rules.
func TestWithinCeiling(t *testing.T) {
	c := mustParse(t, testCeiling)
	for _, p := range []string{
		testCeiling,
		"version: 1\n",
		"version: 1\nfilesystem_policy: {include_workdir: true, read_only: [/usr/bin, /var/cache/x], read_write: [/tmp/x]}\n",
		// A narrower rule set with the ceiling's deny rule copied.
		entry("gh", `    endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: /repos/x/**}}, {allow: {method: POST, path: /repos/x/issues}}], deny_rules: [{method: POST, path: /repos/*/admin/**}]}]
    binaries: [{path: /usr/bin/gh}]
`),
		// GET only: the ceiling's POST deny rule cannot meet it.
		entry("gh", `    endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: /repos/x}}]}]
    binaries: [{path: /usr/bin/gh}]
`),
		// *.github.com read-only, with api.github.com taken by the
		// policy's own exact endpoint, as in the ceiling.
		entry("gh", `    endpoints:
      - {host: "*.github.com", port: 443, protocol: rest, access: read-only}
      - {host: api.github.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: /repos/**}}]}
    binaries: [{path: /usr/bin/git}]
`),
		entry("pg", `    endpoints: [{host: db.internal.test, port: 5432, protocol: tcp}]
    binaries: [{path: /usr/bin/psql}]
`),
		entry("npm", `    endpoints: [{host: registry.npmjs.org, port: 443, protocol: rest, access: read-only}]
    binaries: [{path: /usr/bin/node}]
`),
		// protocol tcp relays what the ceiling's uninspected endpoint
		// does: a transparent connection is decided as a CONNECT.
		entry("npm", `    endpoints: [{host: registry.npmjs.org, port: 443, protocol: tcp}]
    binaries: [{path: /usr/bin/node}]
`),
		// An exact host under a wildcard whose allowed_ips hold every
		// private range.
		entry("lan", `    endpoints: [{host: git.corp.test, port: 443}, {allowed_ips: [10.1.2.0/24], port: 8080}]
    binaries: [{path: /usr/lib/tools/git}]
`),
	} {
		if xs := Contains(c, mustParse(t, p), Options{}); len(xs) > 0 {
			t.Errorf("refused: %v\n%s", xs[0], p)
		}
	}
}

// Resolve: a read_only path that is a symlink out of the ceiling's tree
// is refused once resolved, though it is inside by name.
func TestFilesystemResolved(t *testing.T) {
	c := mustParse(t, "version: 1\nfilesystem_policy: {read_only: [/etc]}\n")
	p := mustParse(t, "version: 1\nfilesystem_policy: {read_only: [/etc/link]}\n")
	if xs := Contains(c, p, Options{}); len(xs) > 0 {
		t.Fatalf("lexically inside, refused: %v", xs[0])
	}
	resolve := func(s string) string { return strings.Replace(s, "/etc/link", "/root", 1) }
	xs := Contains(c, p, Options{Resolve: resolve})
	if len(xs) != 1 || xs[0].Field != "filesystem_policy.read_only[0]" {
		t.Fatalf("a symlink out of /etc was accepted: %v", xs)
	}
}

// A path outside ASCII passes an endpoint whose rules for the method name
// no path, and is refused as ambiguous by one whose rules do (pkg/l7):
// such a policy is not within such a ceiling, and the real check agrees.
func TestNonASCIIPathRule(t *testing.T) {
	c := mustParse(t, entry("api", `    endpoints: [{host: api.test, port: 443, protocol: rest, rules: [{allow: {method: GET, path: "**"}}, {allow: {method: GET, path: /v1/x}}]}]
    binaries: [{path: /usr/bin/curl}]
`))
	p := mustParse(t, entry("api", `    endpoints: [{host: api.test, port: 443, protocol: rest, rules: [{allow: {method: GET, path: "**"}}]}]
    binaries: [{path: /usr/bin/curl}]
`))
	xs := Contains(c, p, Options{})
	want := "network_policies.api.endpoints[0].rules[0]: api.test:443 GET ** lets a request with a path outside ASCII through by method, but the ceiling's network_policies.api.endpoints[0] has a rule for GET naming a path, so it refuses such a path as ambiguous"
	if len(xs) == 0 || xs[0].Error() != want {
		t.Fatalf("got %v\nwant %s", xs, want)
	}
	path, err := l7.ParsePath("/%C3%A9")
	if err != nil {
		t.Fatal(err)
	}
	req := &l7.Request{Method: "GET", Path: &path, Field: func(string) []string { return nil }}
	pok, _ := rest.Check(p.NetworkPolicies["api"].Endpoints[0], req)
	cok, _ := rest.Check(c.NetworkPolicies["api"].Endpoints[0], req)
	if !pok || cok {
		t.Fatalf("the witness does not hold: policy %v, ceiling %v", pok, cok)
	}
}

// A narrower ceiling wildcard outranks a wider one for the names under it
// (*.x.b.test before **.b.test): a policy allowing more than it there is
// refused, even though the wider one covers the host.
func TestNarrowerWildcardOutranks(t *testing.T) {
	c := mustParse(t, entry("w", `    endpoints:
      - {host: "**.b.test", port: 443, protocol: rest, access: read-write}
      - {host: "*.x.b.test", port: 443, protocol: rest, access: read-only}
    binaries: [{path: /usr/bin/curl}]
`))
	p := mustParse(t, entry("w", `    endpoints: [{host: "**.b.test", port: 443, protocol: rest, access: read-write}]
    binaries: [{path: /usr/bin/curl}]
`))
	xs := Contains(c, p, Options{})
	want := "network_policies.w.endpoints[0].access: **.b.test:443 GET * admits git's push discovery (.../info/refs?service=git-receive-pack), which the ceiling's access: read-only (network_policies.w.endpoints[1]) refuses"
	if len(xs) == 0 || xs[0].Error() != want {
		t.Fatalf("got %v\nwant %s", xs, want)
	}
}

// TestWebSocketWithin: a protocol websocket endpoint is within a
// ceiling's only when its message rules are provably narrower (as
// written) and its upgrades are within the ceiling's REST rules.
func TestWebSocketWithin(t *testing.T) {
	ceil := mustParse(t, entry("ws", `    endpoints:
      - host: ws.example.test
        port: 443
        protocol: websocket
        rules: [{allow: {method: GET, path: /stream}}]
        websocket: {text: [{exact: ping}, {json: {type: subscribe}}], deny_text: [{prefix: "SUB admin"}], max_message_bytes: 4096}
    binaries: [{path: /usr/bin/node}]
`))
	ep := func(rest, ws string) *policy.Policy {
		return mustParse(t, entry("ws", `    endpoints:
      - host: ws.example.test
        port: 443
        protocol: websocket
`+rest+`        websocket: `+ws+`
    binaries: [{path: /usr/bin/node}]
`))
	}
	within := ep("        rules: [{allow: {method: GET, path: /stream}}]\n", `{text: [{json: {type: subscribe}}], deny_text: [{prefix: "SUB admin"}], max_message_bytes: 1024}`)
	if xs := Contains(ceil, within, Options{}); len(xs) > 0 {
		t.Errorf("narrower websocket endpoint refused: %v", xs[0])
	}
	// Resolving placeholders in messages is a grant of its own.
	rw := ep("        rules: [{allow: {method: GET, path: /stream}}]\n        websocket_credential_rewrite: true\n", `{text: [{json: {type: subscribe}}], deny_text: [{prefix: "SUB admin"}], max_message_bytes: 1024}`)
	want := "network_policies.ws.endpoints[0].websocket_credential_rewrite: ws.example.test:443 resolves credential placeholders in WebSocket messages, but the ceiling's network_policies.ws.endpoints[0] does not"
	if xs := Contains(ceil, rw, Options{}); len(xs) == 0 || xs[0].Error() != want {
		t.Errorf("websocket_credential_rewrite: %v, want %s", xs, want)
	}
	for name, p := range map[string]*policy.Policy{
		"other text":         ep("        rules: [{allow: {method: GET, path: /stream}}]\n", `{text: [{prefix: "SUB "}], deny_text: [{prefix: "SUB admin"}]}`),
		"deny dropped":       ep("        rules: [{allow: {method: GET, path: /stream}}]\n", `{text: [{exact: ping}]}`),
		"binary":             ep("        rules: [{allow: {method: GET, path: /stream}}]\n", `{text: [{exact: ping}], deny_text: [{prefix: "SUB admin"}], binary: true}`),
		"bigger messages":    ep("        rules: [{allow: {method: GET, path: /stream}}]\n", `{text: [{exact: ping}], deny_text: [{prefix: "SUB admin"}], max_message_bytes: 8192}`),
		"any upgrade path":   ep("", `{text: [{exact: ping}], deny_text: [{prefix: "SUB admin"}]}`),
		"rest not websocket": mustParse(t, entry("ws", "    endpoints: [{host: ws.example.test, port: 443, protocol: rest, rules: [{allow: {method: GET, path: /stream}}]}]\n    binaries: [{path: /usr/bin/node}]\n")),
	} {
		if xs := Contains(ceil, p, Options{}); len(xs) == 0 {
			t.Errorf("%s: within the ceiling, but it relays what the ceiling refuses", name)
		}
	}
}
