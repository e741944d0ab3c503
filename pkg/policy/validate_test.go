package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// skeleton returns a valid policy with one network entry "e" whose first
// endpoint is given (YAML lines at endpoint-item indentation, the first
// without the "- "). The endpoint starts on line 9.
func withEndpoint(lines ...string) string {
	var b strings.Builder
	b.WriteString("version: 1\n")                            // 1
	b.WriteString("filesystem_policy:\n")                    // 2
	b.WriteString("  read_only: [/usr]\n")                   // 3
	b.WriteString("  read_write: [/tmp]\n")                  // 4
	b.WriteString("network_policies:\n")                     // 5
	b.WriteString("  e:\n")                                  // 6
	b.WriteString("    binaries: [{path: /usr/bin/curl}]\n") // 7
	b.WriteString("    endpoints:\n")                        // 8
	for i, l := range lines {
		if i == 0 {
			b.WriteString("      - " + l + "\n")
		} else {
			b.WriteString("        " + l + "\n")
		}
	}
	return b.String()
}

// withBinaries returns a valid policy with the given filesystem_policy
// body lines and binaries of entry "b".
func withBinaries(fs string, bins ...string) string {
	var b strings.Builder
	b.WriteString("version: 1\nfilesystem_policy:\n")
	for _, l := range strings.Split(fs, "\n") {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString("network_policies:\n  b:\n    endpoints: [{host: example.com, port: 443}]\n    binaries:\n")
	for _, p := range bins {
		b.WriteString("      - path: " + p + "\n")
	}
	return b.String()
}

const ep0 = "network_policies.e.endpoints[0]"

func TestParseRejects(t *testing.T) {
	long := "/" + strings.Repeat("a", MaxPathLen)
	many := make([]string, 0, MaxPaths+1)
	for i := range MaxPaths + 1 {
		many = append(many, fmt.Sprintf("/p%d", i))
	}
	tests := []struct {
		name string
		yaml string
		path string // the FieldError path that must be reported
		msg  string // a substring of its message
		line int    // the line it must carry, when non-zero
	}{
		// Document and top level.
		{"version 2", "version: 2\n", "version", "must be 1", 1},
		{"version missing", "process: {}\n", "version", "required", 0},
		{"version as string", "version: \"1\"\n", "version", "must be an integer", 1},
		{"version as float", "version: 1.0\n", "version", "must be an integer", 1},
		{"empty file", "", "version", "empty", 0},
		{"unknown top-level key", "version: 1\nfoo: bar\n", "foo", "unknown key", 2},
		{"duplicate top-level key", "version: 1\nprocess: {}\nprocess: {}\n", "process", "duplicate key (first defined on line 2)", 3},
		{"network_middlewares unsupported", "version: 1\nnetwork_middlewares: {}\n", "network_middlewares", "not supported by Palisade", 2},
		{"two documents", "version: 1\n---\nversion: 1\n", "", "multiple YAML documents", 0},
		{"alias", "version: 1\nfilesystem_policy:\n  read_only: &x [/usr]\n  read_write: *x\n", "filesystem_policy.read_write", "aliases are not allowed", 4},
		{"top level is a list", "- version: 1\n", "", "must be a mapping", 1},
		{"bad YAML", "version: 1\n  bad: [\n", "", "invalid YAML", 0},

		// Filesystem.
		{"relative read_only path", "version: 1\nfilesystem_policy:\n  read_only: [usr]\n", "filesystem_policy.read_only[0]", "absolute", 3},
		{"dot-dot in read_write", "version: 1\nfilesystem_policy:\n  read_write: [/tmp/../etc]\n", "filesystem_policy.read_write[0]", "'..'", 3},
		{"read_write root", "version: 1\nfilesystem_policy:\n  read_write: [/tmp, /]\n", "filesystem_policy.read_write[1]", `must not be "/"`, 3},
		{"read_write root spelled //.", "version: 1\nfilesystem_policy:\n  read_write: [\"//.\"]\n", "filesystem_policy.read_write[0]", `must not be "/"`, 3},
		{"path too long", "version: 1\nfilesystem_policy:\n  read_only: [" + long + "]\n", "filesystem_policy.read_only[0]", "at most 4096", 3},
		{"too many paths", "version: 1\nfilesystem_policy:\n  read_only: [" + strings.Join(many[:200], ", ") + "]\n  read_write: [" + strings.Join(many[200:], ", ") + "]\n", "filesystem_policy", "at most 256", 3},
		{"duplicate path after cleaning", "version: 1\nfilesystem_policy:\n  read_only: [/usr, /usr/]\n", "filesystem_policy.read_only[1]", "already listed at filesystem_policy.read_only[0]", 3},
		{"path in both lists", "version: 1\nfilesystem_policy:\n  read_only: [/tmp]\n  read_write: [/tmp]\n", "filesystem_policy.read_write[0]", "already listed", 4},
		{"include_workdir yes", "version: 1\nfilesystem_policy:\n  include_workdir: yes\n", "filesystem_policy.include_workdir", "true or false", 3},
		{"read_only not a list", "version: 1\nfilesystem_policy:\n  read_only: /usr\n", "filesystem_policy.read_only", "must be a list", 3},
		{"path not a string", "version: 1\nfilesystem_policy:\n  read_only: [42]\n", "filesystem_policy.read_only[0]", "must be a string", 3},
		{"control character in path", "version: 1\nfilesystem_policy:\n  read_only: [\"/us\\x01r\"]\n", "filesystem_policy.read_only[0]", "control characters", 3},

		// Landlock.
		{"unknown compatibility", "version: 1\nlandlock:\n  compatibility: strict\n", "landlock.compatibility", "best_effort, hard_requirement", 3},
		{"unknown landlock key", "version: 1\nlandlock:\n  mode: x\n", "landlock.mode", "unknown key", 3},

		// Process.
		{"run_as_user root", "version: 1\nprocess:\n  run_as_user: root\n", "process.run_as_user", "never be root", 3},
		{"run_as_user 0", "version: 1\nprocess:\n  run_as_user: \"0\"\n", "process.run_as_user", "never be 0", 3},
		{"run_as_group unquoted integer", "version: 1\nprocess:\n  run_as_group: 1000\n", "process.run_as_group", `quote it: "1000"`, 3},
		{"run_as_user above range", "version: 1\nprocess:\n  run_as_user: \"4294967295\"\n", "process.run_as_user", "out of range", 3},
		{"run_as_user other name", "version: 1\nprocess:\n  run_as_user: nobody\n", "process.run_as_user", `"sandbox" or a numeric ID`, 3},
		{"run_as_group negative", "version: 1\nprocess:\n  run_as_group: \"-1\"\n", "process.run_as_group", `"sandbox" or a numeric ID`, 3},
		{"run_as_user leading zeros", "version: 1\nprocess:\n  run_as_user: \"0100\"\n", "process.run_as_user", "leading zeros", 3},

		// Network entries and binaries.
		{"entry name with space", "version: 1\nnetwork_policies:\n  bad name:\n    endpoints: [{host: a.example.com, port: 1}]\n    binaries: [{path: /usr/bin/x}]\n", `network_policies["bad name"]`, "entry names", 3},
		{"entry without endpoints", "version: 1\nnetwork_policies:\n  e:\n    binaries: [{path: /usr/bin/x}]\n", "network_policies.e.endpoints", "required", 4},
		{"entry with empty endpoints", "version: 1\nnetwork_policies:\n  e:\n    endpoints: []\n    binaries: [{path: /usr/bin/x}]\n", "network_policies.e.endpoints", "at least one endpoint", 4},
		{"entry without binaries", "version: 1\nnetwork_policies:\n  e:\n    endpoints: [{host: a.example.com, port: 1}]\n", "network_policies.e.binaries", "required", 4},
		{"entry with empty binaries", "version: 1\nnetwork_policies:\n  e:\n    endpoints: [{host: a.example.com, port: 1}]\n    binaries: []\n", "network_policies.e.binaries", "at least one binary", 5},
		{"empty display name", "version: 1\nnetwork_policies:\n  e:\n    name: \"\"\n    endpoints: [{host: a.example.com, port: 1}]\n    binaries: [{path: /usr/bin/x}]\n", "network_policies.e.name", "must not be empty", 4},
		{"relative binary", withBinaries("read_only: [/usr]", "usr/bin/git"), "network_policies.b.binaries[0].path", "absolute", 8},
		{"binary with dot-dot", withBinaries("read_only: [/usr]", "/usr/../tmp/x"), "network_policies.b.binaries[0].path", "'..'", 8},
		{"binary under read_write", withBinaries("read_write: [/opt/tools]", "/usr/bin/git", "/opt/tools/bin/tool"), "network_policies.b.binaries[1].path", "under read_write path /opt/tools", 9},
		{"binary glob reaching read_write", withBinaries("read_write: [/tmp]", "/*/x"), "network_policies.b.binaries[0].path", "under read_write path /tmp", 8},
		{"binary ** glob reaching read_write", withBinaries("read_write: [/home/agent/work]", "/home/**/bin/tool"), "network_policies.b.binaries[0].path", "under read_write path /home/agent/work", 8},
		{"binary equal to read_write path", withBinaries("read_write: [/usr/local/bin/tool]", "/usr/local/bin/tool"), "network_policies.b.binaries[0].path", "under read_write path", 8},
		{"binary /** with include_workdir", withBinaries("include_workdir: true", "/**/python3"), "network_policies.b.binaries[0].path", "working directory", 8},
		{"binary bad glob", withBinaries("read_only: [/usr]", "\"/usr/bin/[x\""), "network_policies.b.binaries[0].path", "not a valid glob", 8},
		{"binary ** inside component", withBinaries("read_only: [/usr]", "/usr/bin/py**"), "network_policies.b.binaries[0].path", "whole path component", 8},
		{"binary harness key", "version: 1\nnetwork_policies:\n  e:\n    endpoints: [{host: a.example.com, port: 1}]\n    binaries: [{path: /usr/bin/x, harness: true}]\n", "network_policies.e.binaries[0].harness", "not supported by Palisade", 5},
		{"duplicate binary", withBinaries("read_only: [/usr]", "/usr/bin/git", "/usr//bin/git"), "network_policies.b.binaries[1].path", "already listed", 9},

		// Hosts.
		{"bare * host", withEndpoint(`host: "*"`, "port: 443"), ep0 + ".host", "TLD", 9},
		{"bare ** host", withEndpoint(`host: "**"`, "port: 443"), ep0 + ".host", "TLD", 9},
		{"TLD wildcard", withEndpoint(`host: "*.com"`, "port: 443"), ep0 + ".host", "TLD", 9},
		{"recursive TLD wildcard", withEndpoint(`host: "**.com"`, "port: 443"), ep0 + ".host", "TLD", 9},
		{"intra-label TLD wildcard", withEndpoint(`host: "*-x.com"`, "port: 443"), ep0 + ".host", "TLD", 9},
		{"wildcard in middle label", withEndpoint(`host: "api.*.example.com"`, "port: 443"), ep0 + ".host", "only in the first label", 9},
		{"wildcard in last label", withEndpoint(`host: "example.*"`, "port: 443"), ep0 + ".host", "only in the first label", 9},
		{"partial ** label", withEndpoint(`host: "a**b.example.com"`, "port: 443"), ep0 + ".host", `"**" must be the whole first label`, 9},
		{"host with space", withEndpoint(`host: "exa mple.com"`, "port: 443"), ep0 + ".host", "whitespace", 9},
		{"host with trailing dot", withEndpoint(`host: example.com.`, "port: 443"), ep0 + ".host", "trailing dot", 9},
		{"host label starting with dash", withEndpoint(`host: -bad.example.com`, "port: 443"), ep0 + ".host", "must not start or end with '-'", 9},
		{"loopback IP host", withEndpoint(`host: 127.0.0.1`, "port: 443"), ep0 + ".host", "loopback", 9},
		{"metadata IP host", withEndpoint(`host: 169.254.169.254`, "port: 80"), ep0 + ".host", "link-local", 9},
		{"invalid dotted quad", withEndpoint(`host: 256.1.1.1`, "port: 80"), ep0 + ".host", "neither a valid IP", 9},
		{"no host and no allowed_ips", withEndpoint("port: 443"), ep0 + ".host", "host or allowed_ips", 9},

		// Ports.
		{"port 0", withEndpoint("host: example.com", "port: 0"), ep0 + ".port", "1-65535", 10},
		{"port too big", withEndpoint("host: example.com", "port: 70000"), ep0 + ".port", "1-65535", 10},
		{"port and ports", withEndpoint("host: example.com", "port: 443", "ports: [80]"), ep0 + ".ports", "not both", 11},
		{"no port", withEndpoint("host: example.com"), ep0 + ".port", "set port or ports", 9},
		{"empty ports", withEndpoint("host: example.com", "ports: []"), ep0 + ".ports", "at least one port", 10},
		{"duplicate ports", withEndpoint("host: example.com", "ports: [443, 443]"), ep0 + ".ports[1]", "listed twice", 10},
		{"port as string", withEndpoint("host: example.com", `port: "443"`), ep0 + ".port", "must be an integer", 10},
		{"zero in ports", withEndpoint("host: example.com", "ports: [80, 0]"), ep0 + ".ports[1]", "1-65535", 10},

		// Protocol, tls, enforcement, access, rules.
		{"unknown protocol", withEndpoint("host: example.com", "port: 21", "protocol: ftp"), ep0 + ".protocol", "must be rest, websocket, tcp, mcp, json-rpc or graphql", 11},
		{"websocket without rules", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket"), ep0 + ".websocket", "required by protocol websocket", 11},
		{"websocket field without protocol", withEndpoint("host: ws.example.com", "port: 443", "websocket: {text: [{exact: a}]}"), ep0 + ".websocket", "requires protocol: websocket", 11},
		{"websocket empty text", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {text: []}"), ep0 + ".websocket.text", "must not be empty", 12},
		{"websocket no text", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {binary: true}"), ep0 + ".websocket.text", "is required", 12},
		{"websocket two matchers", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {text: [{exact: a, prefix: b}]}"), ep0 + ".websocket.text[0]", "exactly one of", 12},
		{"websocket empty prefix", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", `websocket: {text: [{prefix: ""}]}`), ep0 + ".websocket.text[0].prefix", "must not be empty", 12},
		{"websocket empty json", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {text: [{json: {}}]}"), ep0 + ".websocket.text[0].json", "1-16 fields", 12},
		{"websocket json bad path", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {text: [{json: {a..b: x}}]}"), ep0 + `.websocket.text[0].json["a..b"]`, "empty segment", 12},
		{"websocket json non-string", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {text: [{json: {n: 1}}]}"), ep0 + ".websocket.text[0].json.n", "must be a string", 12},
		{"websocket unknown key", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {text: [{exact: a}], compress: true}"), ep0 + ".websocket.compress", "unknown key", 12},
		{"websocket max too big", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {text: [{exact: a}], max_message_bytes: 99999999}"), ep0 + ".websocket.max_message_bytes", "must be 1-16777216", 12},
		{"websocket tls skip", withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "tls: skip", "websocket: {text: [{exact: a}]}"), ep0 + ".tls", "could not be enforced", 12},
		{"OpenShell protocol unsupported", withEndpoint("host: example.com", "port: 443", "protocol: sql", "access: full"), ep0 + ".protocol", "not supported by Palisade", 11},
		{"unknown enforcement", withEndpoint("host: example.com", "port: 443", "protocol: rest", "access: full", "enforcement: block"), ep0 + ".enforcement", "enforce, audit", 13},
		{"unknown access", withEndpoint("host: example.com", "port: 443", "protocol: rest", "access: write"), ep0 + ".access", "read-only, read-write, full", 12},
		{"access and rules", withEndpoint("host: example.com", "port: 443", "protocol: rest", "access: full", "rules: [{allow: {method: GET, path: /}}]"), ep0 + ".rules", "mutually exclusive", 13},
		{"rest without access or rules", withEndpoint("host: example.com", "port: 443", "protocol: rest"), ep0 + ".access", "requires access or rules", 11},
		{"empty rules", withEndpoint("host: example.com", "port: 443", "protocol: rest", "rules: []"), ep0 + ".rules", "must not be empty", 12},
		{"empty deny_rules", withEndpoint("host: example.com", "port: 443", "protocol: rest", "access: full", "deny_rules: []"), ep0 + ".deny_rules", "must not be empty", 13},
		{"deny_rules without protocol", withEndpoint("host: example.com", "port: 443", "deny_rules: [{method: POST, path: /}]"), ep0 + ".deny_rules", "require protocol", 11},
		{"access without protocol", withEndpoint("host: example.com", "port: 443", "access: read-only"), ep0 + ".access", "requires protocol: rest", 11},
		{"rules without protocol", withEndpoint("host: example.com", "port: 443", "rules: [{allow: {method: GET, path: /}}]"), ep0 + ".rules", "requires protocol: rest", 11},
		{"tcp with wildcard host", withEndpoint(`host: "*.example.com"`, "port: 22", "protocol: tcp"), ep0 + ".host", "not a wildcard", 9},
		{"tcp with IP host", withEndpoint("host: 192.0.2.10", "port: 22", "protocol: tcp"), ep0 + ".host", "not an IP address", 9},
		{"tcp without host", withEndpoint("port: 22", "protocol: tcp", "allowed_ips: [192.0.2.0/24]"), ep0 + ".host", "requires a DNS hostname", 10},
		{"tcp with access", withEndpoint("host: git.example.com", "port: 22", "protocol: tcp", "access: full"), ep0 + ".access", "protocol tcp does not inspect", 12},
		{"tcp with rules", withEndpoint("host: git.example.com", "port: 22", "protocol: tcp", "rules: [{allow: {method: GET, path: /}}]"), ep0 + ".rules", "protocol tcp does not inspect", 12},
		{"tcp with deny_rules", withEndpoint("host: git.example.com", "port: 22", "protocol: tcp", "deny_rules: [{method: GET, path: /}]"), ep0 + ".deny_rules", "protocol tcp does not inspect", 12},
		{"tcp with tls terminate", withEndpoint("host: git.example.com", "port: 22", "protocol: tcp", "tls: terminate"), ep0 + ".tls", "never terminates TLS", 12},
		{"tcp with enforcement", withEndpoint("host: git.example.com", "port: 22", "protocol: tcp", "enforcement: audit"), ep0 + ".enforcement", "protocol tcp has none", 12},
		{"rest with tls skip", withEndpoint("host: example.com", "port: 443", "protocol: rest", "access: full", "tls: skip"), ep0 + ".tls", "could not be enforced", 13},
		{"tls passthrough", withEndpoint("host: example.com", "port: 443", "tls: passthrough"), ep0 + ".tls", "deprecated", 11},
		{"unknown tls", withEndpoint("host: example.com", "port: 443", "tls: always"), ep0 + ".tls", "must be skip or terminate", 11},
		{"rule without allow", withEndpoint("host: example.com", "port: 443", "protocol: rest", "rules: [{}]"), ep0 + ".rules[0].allow", "required", 12},
		{"allow without method", withEndpoint("host: example.com", "port: 443", "protocol: rest", "rules: [{allow: {path: /}}]"), ep0 + ".rules[0].allow.method", "required", 12},
		{"allow without path", withEndpoint("host: example.com", "port: 443", "protocol: rest", "rules: [{allow: {method: GET}}]"), ep0 + ".rules[0].allow.path", "required", 12},
		{"allow relative path", withEndpoint("host: example.com", "port: 443", "protocol: rest", "rules: [{allow: {method: GET, path: v1/x}}]"), ep0 + ".rules[0].allow.path", `must start with "/"`, 12},
		{"allow encoded path", withEndpoint("host: example.com", "port: 443", "protocol: rest", `rules: [{allow: {method: GET, path: "/@types%2f*"}}]`), ep0 + ".rules[0].allow.path", `write "/@types/*"`, 12},
		{"deny encoded path", withEndpoint("host: example.com", "port: 443", "protocol: rest", "access: full", `deny_rules: [{method: GET, path: "/a%zz"}]`), ep0 + ".deny_rules[0].path", "must not contain '%'", 13},
		{"allow bad method", withEndpoint("host: example.com", "port: 443", "protocol: rest", `rules: [{allow: {method: "GET POST", path: /}}]`), ep0 + ".rules[0].allow.method", "HTTP method", 12},
		{"allow OpenShell-only key", withEndpoint("host: example.com", "port: 443", "protocol: rest", "rules: [{allow: {method: GET, path: /, command: SELECT}}]"), ep0 + ".rules[0].allow.command", "not supported by Palisade", 12},
		{"query any empty", withEndpoint("host: example.com", "port: 443", "protocol: rest", "rules: [{allow: {method: GET, path: /, query: {tag: {any: []}}}}]"), ep0 + ".rules[0].allow.query.tag.any", "at least one glob", 12},
		{"deny rule without method", withEndpoint("host: example.com", "port: 443", "protocol: rest", "access: full", "deny_rules: [{path: /admin}]"), ep0 + ".deny_rules[0].method", "required", 13},

		// allowed_ips.
		{"allowed_ips not an IP", withEndpoint("host: example.com", "port: 443", "allowed_ips: [not-an-ip]"), ep0 + ".allowed_ips[0]", "not a valid IP", 11},
		{"allowed_ips everything", withEndpoint("host: example.com", "port: 443", "allowed_ips: [0.0.0.0/0]"), ep0 + ".allowed_ips[0]", "overlaps loopback", 11},
		{"allowed_ips loopback", withEndpoint("host: example.com", "port: 443", "allowed_ips: [10.0.0.0/8, 127.0.0.0/8]"), ep0 + ".allowed_ips[1]", "loopback", 11},
		{"allowed_ips link-local IP", withEndpoint("host: example.com", "port: 443", "allowed_ips: [169.254.1.1]"), ep0 + ".allowed_ips[0]", "link-local", 11},
		{"allowed_ips IPv6 loopback", withEndpoint("host: example.com", "port: 443", `allowed_ips: ["::1"]`), ep0 + ".allowed_ips[0]", "loopback", 11},
		{"allowed_ips IPv6 everything", withEndpoint("host: example.com", "port: 443", `allowed_ips: ["::/0"]`), ep0 + ".allowed_ips[0]", "overlaps", 11},
		{"allowed_ips IPv6 link-local", withEndpoint("host: example.com", "port: 443", `allowed_ips: ["fe80::/64"]`), ep0 + ".allowed_ips[0]", "link-local", 11},
		{"allowed_ips mapped loopback", withEndpoint("host: example.com", "port: 443", `allowed_ips: ["::ffff:127.0.0.1"]`), ep0 + ".allowed_ips[0]", "loopback", 11},
		{"allowed_ips unspecified", withEndpoint("host: example.com", "port: 443", "allowed_ips: [0.0.0.0]"), ep0 + ".allowed_ips[0]", "unspecified", 11},
		{"allowed_ips host bits", withEndpoint("host: example.com", "port: 443", "allowed_ips: [10.0.0.1/8]"), ep0 + ".allowed_ips[0]", "did you mean 10.0.0.0/8", 11},
		{"allowed_ips duplicate", withEndpoint("host: example.com", "port: 443", "allowed_ips: [192.0.2.7, 192.0.2.7/32]"), ep0 + ".allowed_ips[1]", "already listed", 11},

		// Endpoint keys.
		{"OpenShell-only endpoint key", withEndpoint("host: example.com", "port: 443", "path: /v1"), ep0 + ".path", "not supported by Palisade", 11},
		{"misspelt endpoint key", withEndpoint("host: example.com", "port: 443", "hots: x"), ep0 + ".hots", "unknown key", 11},
		{"duplicate endpoint key", withEndpoint("host: example.com", "port: 443", "host: example.org"), ep0 + ".host", "duplicate key", 11},
		{"duplicate endpoint", withEndpoint("host: example.com", "port: 443") + "      - {host: EXAMPLE.com, ports: [443]}\n", "network_policies.e.endpoints[1]", "duplicates endpoints[0]", 11},
	}
	if len(tests) < 40 {
		t.Fatalf("only %d cases", len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s\nnormalised: %s", tc.yaml, p.Canonical())
			}
			if p != nil {
				t.Errorf("returned a policy together with an error")
			}
			errs, ok := AsErrors(err)
			if !ok {
				t.Fatalf("error is not an Errors: %T %v", err, err)
			}
			var found *FieldError
			for _, fe := range errs {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					found = fe
					break
				}
			}
			if found == nil {
				t.Fatalf("no problem at %q containing %q; got:\n%v", tc.path, tc.msg, err)
			}
			if tc.line != 0 && found.Line != tc.line {
				t.Errorf("%s reported on line %d, want %d", tc.path, found.Line, tc.line)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, p *Policy)
	}{
		{"one-label wildcard", withEndpoint(`host: "*.example.com"`, "port: 443"), nil},
		{"recursive wildcard", withEndpoint(`host: "**.example.com"`, "port: 443"), nil},
		{"intra-label wildcard", withEndpoint(`host: "*-aiplatform.googleapis.com"`, "port: 443"), nil},
		{"upper-case host is lower-cased", withEndpoint("host: API.Example.COM", "port: 443"), func(t *testing.T, p *Policy) {
			if h := p.NetworkPolicies["e"].Endpoints[0].Host; h != "api.example.com" {
				t.Errorf("host = %q", h)
			}
		}},
		{"IP host", withEndpoint("host: 192.0.2.10", "port: 443"), nil},
		{"hostless allowed_ips", withEndpoint("port: 443", "allowed_ips: [10.0.0.0/8, 192.0.2.7, \"2001:db8::/32\"]"), func(t *testing.T, p *Policy) {
			got := p.NetworkPolicies["e"].Endpoints[0].AllowedIPs
			want := []string{"10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("allowed_ips = %v, want %v", got, want)
			}
		}},
		{"tcp with DNS host", withEndpoint("host: git.example.com", "port: 22", "protocol: tcp", "tls: skip"), func(t *testing.T, p *Policy) {
			e := p.NetworkPolicies["e"].Endpoints[0]
			if e.Enforcement != "" || e.Protocol != ProtocolTCP || e.TLS != TLSSkip {
				t.Errorf("tcp endpoint normalised to %+v", e)
			}
		}},
		{"ports list", withEndpoint("host: example.com", "ports: [8443, 443]"), func(t *testing.T, p *Policy) {
			if got := fmt.Sprint(p.NetworkPolicies["e"].Endpoints[0].Ports); got != "[443 8443]" {
				t.Errorf("ports = %s", got)
			}
		}},
		{"rest rules with query and deny", withEndpoint("host: example.com", "port: 443", "protocol: rest", "enforcement: audit",
			`rules: [{allow: {method: get, path: "/repos/**", query: {tag: "v1*", ref: {any: [main, "release-*"]}}}}]`,
			"deny_rules: [{method: DELETE, path: /repos/*/x}]"), func(t *testing.T, p *Policy) {
			e := p.NetworkPolicies["e"].Endpoints[0]
			if e.Enforcement != EnforcementAudit || e.Rules[0].Allow.Method != "GET" || len(e.Rules[0].Allow.Query["ref"].Any) != 2 || e.Rules[0].Allow.Query["tag"].Any[0] != "v1*" {
				t.Errorf("endpoint = %+v", e)
			}
		}},
		{"access full with deny rules", withEndpoint("host: example.com", "port: 443", "protocol: rest", "access: full", `deny_rules: [{method: "*", path: "/admin/**"}]`), nil},
		{"tls terminate means auto", withEndpoint("host: example.com", "port: 443", "protocol: rest", "access: read-only", "tls: terminate"), func(t *testing.T, p *Policy) {
			if tls := p.NetworkPolicies["e"].Endpoints[0].TLS; tls != "" {
				t.Errorf("tls = %q", tls)
			}
		}},
		{"numeric identities at the bounds", "version: 1\nprocess:\n  run_as_user: \"1\"\n  run_as_group: \"4294967294\"\n", func(t *testing.T, p *Policy) {
			if p.Process.RunAsUser != "1" || p.Process.RunAsGroup != "4294967294" {
				t.Errorf("process = %+v", p.Process)
			}
		}},
		{"defaults materialised", "version: 1\n", func(t *testing.T, p *Policy) {
			if p.Landlock.Compatibility != CompatibilityHardRequirement || p.Process.RunAsUser != SandboxIdentity || p.Process.RunAsGroup != SandboxIdentity || p.NetworkPolicies == nil || p.Filesystem.IncludeWorkdir {
				t.Errorf("defaults = %+v", p)
			}
		}},
		{"network_policies null", "version: 1\nnetwork_policies:\n", nil},
		{"read_only root", "version: 1\nfilesystem_policy:\n  read_only: [/]\n", nil},
		{"binary glob outside read_write", withBinaries("read_write: [/tmp, /home/agent/work]", "/usr/lib/git-core/git-remote-http*", "/opt/**/bin/python3", "/home/agent/.local/bin/uv"), nil},
		{"name defaults to key", withEndpoint("host: example.com", "port: 443"), func(t *testing.T, p *Policy) {
			if n := p.NetworkPolicies["e"].Name; n != "e" {
				t.Errorf("name = %q", n)
			}
		}},
		{"canonical JSON parses", `{"version": 1, "process": {"run_as_user": "1500"}}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatalf("rejected:\n%s\n%v", tc.yaml, err)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

// Validation reports every problem, not just the first.
func TestParseReportsAllProblems(t *testing.T) {
	src := `version: 1
filesystem_policy:
  read_only: [relative]
  read_write: [/]
process:
  run_as_user: root
network_policies:
  github:
    endpoints:
      - host: "*.com"
        port: 0
      - host: github.com
        port: 443
        protocol: rest
        access: everything
    binaries:
      - path: bin/git
`
	_, err := Parse([]byte(src))
	errs, ok := AsErrors(err)
	if !ok {
		t.Fatalf("err = %v", err)
	}
	want := map[string]int{
		"filesystem_policy.read_only[0]":              3,
		"filesystem_policy.read_write[0]":             4,
		"process.run_as_user":                         6,
		"network_policies.github.endpoints[0].host":   10,
		"network_policies.github.endpoints[0].port":   11,
		"network_policies.github.endpoints[1].access": 15,
		"network_policies.github.binaries[0].path":    17,
	}
	if len(errs) != len(want) {
		t.Errorf("got %d problems, want %d:\n%v", len(errs), len(want), err)
	}
	for _, fe := range errs {
		if line, ok := want[fe.Path]; !ok || line != fe.Line {
			t.Errorf("unexpected problem %v", fe)
		}
	}
	// Document order.
	for i := 1; i < len(errs); i++ {
		if errs[i].Line < errs[i-1].Line {
			t.Errorf("problems out of order: %v before %v", errs[i-1], errs[i])
		}
	}
	if s := errs[3].Error(); s != `network_policies.github.endpoints[0].host (line 10): "*.com": a wildcard must be followed by at least two labels (TLD wildcards such as *.com are not allowed)` {
		t.Errorf("message format: %s", s)
	}
	if !strings.Contains(err.Error(), "7 problems") {
		t.Errorf("Error() = %s", err)
	}
}

func TestParseRejectsOversizedInput(t *testing.T) {
	big := append([]byte("version: 1\n#"), make([]byte, MaxPolicySize)...)
	_, err := Parse(big)
	if err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadFileNamesFileAndKeepsErrors(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/p.yaml"
	writeFile(t, path, "version: 3\n")
	_, err := LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v", err)
	}
	if errs, ok := AsErrors(err); !ok || !errs.Has("version") {
		t.Fatalf("Errors not reachable through %v", err)
	}
	if _, err := LoadFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory: err = %v", err)
	}
	if _, err := LoadFile(dir + "/missing.yaml"); !errors.Is(err, errNotExist) {
		t.Fatalf("missing: err = %v", err)
	}
}

func TestAccessAllows(t *testing.T) {
	for _, tc := range []struct {
		access, method string
		want           bool
	}{
		{AccessReadOnly, "GET", true}, {AccessReadOnly, "HEAD", true}, {AccessReadOnly, "OPTIONS", true},
		{AccessReadOnly, "POST", false}, {AccessReadOnly, "DELETE", false},
		{AccessReadWrite, "GET", true}, {AccessReadWrite, "POST", true}, {AccessReadWrite, "PUT", true},
		{AccessReadWrite, "PATCH", true}, {AccessReadWrite, "DELETE", false}, {AccessReadWrite, "CONNECT", false},
		{AccessFull, "DELETE", true}, {AccessFull, "PROPFIND", true},
		{"", "GET", false}, {"bogus", "GET", false}, {AccessReadOnly, "get", false},
	} {
		if got := AccessAllows(tc.access, tc.method); got != tc.want {
			t.Errorf("AccessAllows(%q, %q) = %v", tc.access, tc.method, got)
		}
	}
}

func TestNullSectionsMeanOmitted(t *testing.T) {
	p := mustParse(t, "version: 1\nfilesystem_policy:\nlandlock:\nprocess:\nnetwork_policies:\n")
	if p.Checksum() != mustParse(t, "version: 1\n").Checksum() {
		t.Errorf("null sections differ from omitted: %s", p.Canonical())
	}
}

func TestDottedEntryNameIsQuotedInPaths(t *testing.T) {
	_, err := Parse([]byte("version: 1\nnetwork_policies:\n  a.b:\n    endpoints: [{host: example.com, port: 0}]\n    binaries: [{path: /usr/bin/x}]\n"))
	if errs, ok := AsErrors(err); !ok || !errs.Has(`network_policies["a.b"].endpoints[0].port`) {
		t.Errorf("err = %v", err)
	}
}

// TestWebSocketEndpointParses checks a protocol: websocket endpoint's
// normalised form: defaults materialised, matchers sorted, and the
// checksum independent of their order.
func TestWebSocketEndpointParses(t *testing.T) {
	a := withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket",
		`websocket: {text: [{prefix: "SUB "}, {json: {type: subscribe, "params.channel": "ticker.*"}}, {exact: ping}], deny_text: [{prefix: "SUB admin"}]}`)
	b := withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket",
		`websocket: {text: [{exact: ping}, {json: {"params.channel": "ticker.*", type: subscribe}}, {prefix: "SUB "}], deny_text: [{prefix: "SUB admin"}], binary: false, max_message_bytes: 1048576}`)
	pa, err := Parse([]byte(a))
	if err != nil {
		t.Fatal(err)
	}
	pb, err := Parse([]byte(b))
	if err != nil {
		t.Fatal(err)
	}
	if pa.Checksum() != pb.Checksum() {
		t.Fatalf("checksums differ:\n%s\n%s", pa.Canonical(), pb.Canonical())
	}
	ep := pa.NetworkPolicies["e"].Endpoints[0]
	if ep.Protocol != ProtocolWebSocket || ep.WebSocket == nil || ep.WebSocket.MaxMessageBytes != DefaultWebSocketMaxMessage || ep.WebSocket.Binary || len(ep.WebSocket.Text) != 3 {
		t.Fatalf("endpoint = %+v, websocket %+v", ep, ep.WebSocket)
	}
	if !ep.Inspected() || ep.L7() {
		t.Fatalf("Inspected %v L7 %v: a websocket endpoint is inspected and has no REST rules", ep.Inspected(), ep.L7())
	}
	back, err := Parse([]byte(pa.Canonical()))
	if err != nil || back.Checksum() != pa.Checksum() {
		t.Fatalf("canonical form does not parse back to itself: %v", err)
	}
}
