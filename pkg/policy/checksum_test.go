package policy

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// base is a policy touching every field; variants of it must keep or
// change its checksum.
const base = `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /etc, /lib]
  read_write: [/tmp, /var/tmp]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: sandbox
  run_as_group: "1500"
network_policies:
  github:
    name: github
    endpoints:
      - host: github.com
        ports: [443, 80]
        protocol: rest
        access: read-write
        deny_rules:
          - method: DELETE
            path: /repos/**
          - method: PUT
            path: /repos/*/branches/*/protection
      - host: api.github.com
        port: 443
        protocol: rest
        enforcement: audit
        rules:
          - allow: {method: GET, path: /repos/**, query: {per_page: {any: ["1*", "2*"]}}}
          - allow: {method: POST, path: /graphql}
        allowed_ips: [192.0.2.0/24, 198.51.100.7]
    binaries:
      - path: /usr/bin/git
      - path: /usr/bin/gh
  ssh:
    endpoints:
      - host: git.example.com
        port: 22
        protocol: tcp
    binaries:
      - path: /usr/bin/ssh
`

func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("parse:\n%s\n%v", src, err)
	}
	return p
}

func TestChecksumStableUnderPresentation(t *testing.T) {
	want := mustParse(t, base).Checksum()
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(want) {
		t.Fatalf("checksum %q is not hex sha256", want)
	}
	same := map[string]string{
		"comments and blank lines": "# a comment\n\n" + strings.ReplaceAll(base, "  ssh:\n", "\n  # ssh access\n  ssh:   # trailing\n"),
		"key order": `network_policies:
  ssh:
    binaries: [{path: /usr/bin/ssh}]
    endpoints: [{protocol: tcp, port: 22, host: git.example.com}]
  github:
    binaries: [{path: /usr/bin/gh}, {path: /usr/bin/git}]
    endpoints:
      - allowed_ips: [198.51.100.7/32, 192.0.2.0/24]
        rules:
          - allow: {path: /graphql, method: POST}
          - allow: {query: {per_page: {any: ["2*", "1*"]}}, path: /repos/**, method: get}
        enforcement: audit
        protocol: rest
        ports: [443]
        host: API.GITHUB.COM
      - deny_rules:
          - {path: /repos/*/branches/*/protection, method: PUT}
          - {path: /repos/**, method: DELETE}
        access: read-write
        protocol: rest
        ports: [80, 443]
        host: github.com
    name: github
process: {run_as_group: "1500"}
landlock: {}
filesystem_policy:
  read_write: [/var/tmp/, /tmp]
  read_only: [/lib, /etc, //usr]
  include_workdir: true
version: 1
`,
		"flow style and defaults spelt out": strings.Replace(base, "        port: 22\n        protocol: tcp\n", "        ports: [22]\n        protocol: tcp\n", 1),
		"enforce spelt out":                 strings.Replace(base, "        access: read-write\n", "        access: read-write\n        enforcement: enforce\n", 1),
		"tls terminate is auto":             strings.Replace(base, "        access: read-write\n", "        access: read-write\n        tls: terminate\n", 1),
		"single query glob":                 strings.Replace(base, `{per_page: {any: ["1*", "2*"]}}`, `{per_page: {any: ["1*", "2*", "1*"]}}`, 1),
	}
	// The canonical form itself parses back to the same checksum.
	same["canonical JSON"] = string(mustParse(t, base).Canonical())
	same["normalised YAML"] = string(mustParse(t, base).YAML())
	for name, src := range same {
		t.Run(name, func(t *testing.T) {
			if src == base {
				t.Fatal("variant did not change the text")
			}
			p, err := Parse([]byte(src))
			if name == "single query glob" {
				// A repeated glob is a mistake worth reporting, not a variant.
				if err == nil {
					t.Fatal("duplicate query glob accepted")
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if got := p.Checksum(); got != want {
				t.Errorf("checksum changed: %s != %s\ncanonical: %s\nbase:      %s", got, want, p.Canonical(), mustParse(t, base).Canonical())
			}
		})
	}
}

func TestChecksumChangesWithEverySemanticChange(t *testing.T) {
	basePolicy := mustParse(t, base)
	want := basePolicy.Checksum()
	changes := map[string][2]string{ // name -> {old, new}
		"include_workdir":       {"include_workdir: true", "include_workdir: false"},
		"read_only path":        {"[/usr, /etc, /lib]", "[/usr, /etc, /lib64]"},
		"read_only extra path":  {"[/usr, /etc, /lib]", "[/usr, /etc, /lib, /opt]"},
		"read_write path":       {"[/tmp, /var/tmp]", "[/tmp]"},
		"path moved to rw":      {"read_only: [/usr, /etc, /lib]\n  read_write: [/tmp, /var/tmp]", "read_only: [/usr, /etc]\n  read_write: [/tmp, /var/tmp, /lib]"},
		"compatibility":         {"compatibility: hard_requirement", "compatibility: best_effort"},
		"run_as_user":           {"run_as_user: sandbox", `run_as_user: "1500"`},
		"run_as_group":          {`run_as_group: "1500"`, `run_as_group: "1501"`},
		"entry key":             {"  ssh:\n", "  ssh2:\n"},
		"display name":          {"    name: github\n", "    name: GitHub\n"},
		"host":                  {"- host: github.com", "- host: gist.github.com"},
		"port":                  {"ports: [443, 80]", "ports: [443, 8080]"},
		"port removed":          {"ports: [443, 80]", "ports: [443]"},
		"protocol":              {"        port: 22\n        protocol: tcp\n", "        port: 22\n"},
		"tls skip":              {"        port: 22\n        protocol: tcp\n", "        port: 22\n        protocol: tcp\n        tls: skip\n"},
		"enforcement":           {"enforcement: audit", "enforcement: enforce"},
		"access":                {"access: read-write", "access: read-only"},
		"rule method":           {"{method: POST, path: /graphql}", "{method: PUT, path: /graphql}"},
		"rule path":             {"{method: POST, path: /graphql}", "{method: POST, path: /graphql/**}"},
		"rule removed":          {"          - allow: {method: POST, path: /graphql}\n", ""},
		"query glob":            {`["1*", "2*"]`, `["1*", "3*"]`},
		"deny rule":             {"            path: /repos/**\n", "            path: /repos/*\n"},
		"allowed_ips":           {"198.51.100.7]", "198.51.100.8]"},
		"binary":                {"/usr/bin/gh\n", "/usr/local/bin/gh\n"},
		"binary moved to entry": {"      - path: /usr/bin/gh\n  ssh:\n", "  ssh:\n"},
	}
	// "binary moved to entry" needs the binary added to ssh as well.
	seen := map[string]string{want: "base"}
	for name, ch := range changes {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(base, ch[0]) {
				t.Fatalf("base does not contain %q", ch[0])
			}
			src := strings.Replace(base, ch[0], ch[1], 1)
			if name == "binary moved to entry" {
				src = strings.Replace(src, "      - path: /usr/bin/ssh\n", "      - path: /usr/bin/ssh\n      - path: /usr/bin/gh\n", 1)
			}
			got := mustParse(t, src).Checksum()
			if got == want {
				t.Errorf("checksum unchanged by %s", name)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("%s and %s give the same checksum", name, other)
			}
			seen[got] = name
		})
	}
}

func TestCanonicalDoesNotMutateAndIsJSON(t *testing.T) {
	p := mustParse(t, base)
	p.Filesystem.ReadOnly = append(p.Filesystem.ReadOnly, "/aaa") // unsorted now
	before := append([]string(nil), p.Filesystem.ReadOnly...)
	c := p.Canonical()
	if !bytes.HasPrefix(c, []byte(`{"version":1,"filesystem_policy":{"include_workdir":true,"read_only":["/aaa",`)) {
		t.Errorf("canonical = %s", c)
	}
	if strings.Join(before, ",") != strings.Join(p.Filesystem.ReadOnly, ",") {
		t.Errorf("Canonical reordered the caller's slice: %v", p.Filesystem.ReadOnly)
	}
}

func TestCloneIsDeep(t *testing.T) {
	p := mustParse(t, base)
	sum := p.Checksum()
	c := p.Clone()
	c.Filesystem.ReadOnly[0] = "/changed"
	for _, e := range c.NetworkPolicies["github"].Endpoints {
		e.Ports[0] = 1
		for _, r := range e.Rules {
			for _, q := range r.Allow.Query {
				q.Any[0] = "x"
			}
		}
	}
	c.NetworkPolicies["github"].Binaries[0].Path = "/x"
	if p.Checksum() != sum {
		t.Error("mutating a clone changed the original")
	}
}
