package policy

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// mcpEP is an mcp endpoint on line 9 whose further lines start on 10.
func mcpEP(lines ...string) string {
	return withEndpoint(append([]string{"host: mcp.example.com", "port: 443", "protocol: mcp"}, lines...)...)
}

const toolRules = "rules: [{allow: {method: initialize}}, {allow: {method: tools/call, tool: search}}]"

func TestProtocolsReject(t *testing.T) {
	tests := []struct {
		name, yaml, path, msg string
		line                  int
	}{
		// mcp.versions: a closed registry, defaults only for an absent key.
		{"mcp null", mcpEP("mcp: null", toolRules), ep0 + ".mcp", "not null (omit it for the defaults)", 12},
		{"versions null", mcpEP("mcp: {versions: null}", toolRules), ep0 + ".mcp.versions", "not null", 12},
		{"versions empty", mcpEP("mcp: {versions: []}", toolRules), ep0 + ".mcp.versions", "must not be empty", 12},
		{"versions unknown date", mcpEP("mcp: {versions: [2024-11-05]}", toolRules), ep0 + ".mcp.versions[0]", "not an MCP revision", 12},
		{"versions sessionless", mcpEP(`mcp: {versions: ["2026-07-28"]}`, toolRules), ep0 + ".mcp.versions[0]", "not an MCP revision", 12},
		{"versions alias latest", mcpEP("mcp: {versions: [latest]}", toolRules), ep0 + ".mcp.versions[0]", "no aliases", 12},
		{"versions alias draft", mcpEP("mcp: {versions: [draft]}", toolRules), ep0 + ".mcp.versions[0]", "no aliases", 12},
		{"versions padded", mcpEP(`mcp: {versions: [" 2025-11-25"]}`, toolRules), ep0 + ".mcp.versions[0]", "spelt exactly", 12},
		{"versions padded after", mcpEP(`mcp: {versions: ["2025-11-25 "]}`, toolRules), ep0 + ".mcp.versions[0]", "spelt exactly", 12},
		{"versions duplicate", mcpEP(`mcp: {versions: [2025-06-18, "2025-06-18"]}`, toolRules), ep0 + ".mcp.versions[1]", "listed twice", 12},
		{"versions not a list", mcpEP("mcp: {versions: 2025-11-25}", toolRules), ep0 + ".mcp.versions", "must be a list", 12},
		{"versions integer", mcpEP("mcp: {versions: [20251125]}", toolRules), ep0 + ".mcp.versions[0]", "must be a string", 12},
		{"mcp unknown key", mcpEP("mcp: {version: [2025-11-25]}", toolRules), ep0 + ".mcp.version", "unknown key", 12},
		{"mcp allow_all_known_mcp_methods", mcpEP("mcp: {allow_all_known_mcp_methods: true}", toolRules), ep0 + ".mcp.allow_all_known_mcp_methods", "not supported by Palisade", 12},
		{"mcp body bound zero", mcpEP("mcp: {max_body_bytes: 0}", toolRules), ep0 + ".mcp.max_body_bytes", "must be 1-1048576", 12},
		{"mcp body bound too big", mcpEP("mcp: {max_body_bytes: 1048577}", toolRules), ep0 + ".mcp.max_body_bytes", "must be 1-1048576", 12},
		{"mcp strict not bool", mcpEP("mcp: {strict_tool_names: no}", toolRules), ep0 + ".mcp.strict_tool_names", "true or false", 12},
		{"mcp on rest", withEndpoint("host: a.example.com", "port: 443", "protocol: rest", "access: full", "mcp: {}"), ep0 + ".mcp", "applies to protocol mcp only", 13},
		{"json_rpc on mcp", mcpEP("json_rpc: {max_body_bytes: 10}", toolRules), ep0 + ".json_rpc", "applies to protocol json-rpc only", 12},
		{"graphql option on mcp", mcpEP("graphql_max_body_bytes: 10", toolRules), ep0 + ".graphql_max_body_bytes", "applies to protocol graphql only", 12},

		// mcp endpoints and rules.
		{"mcp access", mcpEP("access: full"), ep0 + ".access", "not valid on protocol mcp", 12},
		{"mcp without rules", mcpEP(), ep0 + ".rules", "requires rules", 9},
		{"mcp hostless", withEndpoint("port: 443", "protocol: mcp", "allowed_ips: [10.0.0.0/8]", toolRules), ep0 + ".host", "requires a host", 9},
		{"mcp tls skip", mcpEP("tls: skip", toolRules), ep0 + ".tls", "could not be enforced", 12},
		{"mcp rule without method", mcpEP("rules: [{allow: {tool: search}}]"), ep0 + ".rules[0].allow.method", "required", 12},
		{"mcp method star", mcpEP(`rules: [{allow: {method: "*"}}]`), ep0 + ".rules[0].allow.method", "only within the tools/ family", 12},
		{"mcp method glob outside tools", mcpEP(`rules: [{allow: {method: "resources/*"}}]`), ep0 + ".rules[0].allow.method", "only within the tools/ family", 12},
		{"mcp rule with path", mcpEP("rules: [{allow: {method: initialize, path: /mcp}}]"), ep0 + ".rules[0].allow.path", "not supported by Palisade", 12},
		{"mcp tool on other method", mcpEP("rules: [{allow: {method: tools/list, tool: search}}]"), ep0 + ".rules[0].allow.method", "must be tools/call", 12},
		{"mcp tool and params", mcpEP("rules: [{allow: {method: tools/call, tool: a, params: {name: b}}}]"), ep0 + ".rules[0].allow.params", "set one", 12},
		{"mcp params argument", mcpEP("rules: [{allow: {method: tools/call, params: {name: a, path: /etc}}}]"), ep0 + ".rules[0].allow.params.path", "tool arguments cannot", 12},
		{"mcp tool outside syntax", mcpEP("rules: [{allow: {method: tools/call, tool: \"send mail\"}}]"), ep0 + ".rules[0].allow.tool", "can never match", 12},
		{"mcp tool too long", mcpEP("rules: [{allow: {method: tools/call, tool: " + strings.Repeat("a", 129) + "}}]"), ep0 + ".rules[0].allow.tool", "can never match", 12},
		{"mcp tool glob without strict", mcpEP("mcp: {strict_tool_names: false}", `rules: [{allow: {method: tools/call, tool: "se*"}}]`), ep0 + ".rules[0].allow.tool", "need mcp.strict_tool_names", 13},
		{"mcp params glob without strict", mcpEP("mcp: {strict_tool_names: false}", `rules: [{allow: {method: tools/call, params: {name: {any: [a, "b?"]}}}}]`), ep0 + ".rules[0].allow.params.name", "need mcp.strict_tool_names", 13},
		{"mcp broad allow beside tool rule", mcpEP(`rules: [{allow: {method: "tools/*"}}, {allow: {method: tools/call, tool: search}}]`), ep0 + ".rules[0]", "undoes the rules that allow named tools", 12},
		{"mcp broad deny beside tool rule", mcpEP(toolRules, "deny_rules: [{method: tools/call}]"), ep0 + ".deny_rules[0]", "erases the rules", 13},
		{"mcp access deny without rules", mcpEP("deny_rules: [{method: tools/call, tool: x}]"), ep0 + ".rules", "requires rules", 9},

		// json-rpc.
		{"json-rpc without rules", withEndpoint("host: rpc.example.com", "port: 443", "protocol: json-rpc"), ep0 + ".rules", "requires rules", 9},
		{"json-rpc access", withEndpoint("host: rpc.example.com", "port: 443", "protocol: json-rpc", "access: read-only"), ep0 + ".access", "not valid on protocol json-rpc", 12},
		{"json-rpc params", withEndpoint("host: rpc.example.com", "port: 443", "protocol: json-rpc", "rules: [{allow: {method: a, params: {name: x}}}]"), ep0 + ".rules[0].allow.params", "unknown key", 12},
		{"json-rpc tool", withEndpoint("host: rpc.example.com", "port: 443", "protocol: json-rpc", "rules: [{allow: {method: a, tool: x}}]"), ep0 + ".rules[0].allow.tool", "unknown key", 12},
		{"json-rpc glob", withEndpoint("host: rpc.example.com", "port: 443", "protocol: json-rpc", `rules: [{allow: {method: "reports.*"}}]`), ep0 + ".rules[0].allow.method", "not a pattern", 12},
		{"json-rpc empty method", withEndpoint("host: rpc.example.com", "port: 443", "protocol: json-rpc", `rules: [{allow: {method: ""}}]`), ep0 + ".rules[0].allow.method", "must not be empty", 12},
		{"json_rpc null", withEndpoint("host: rpc.example.com", "port: 443", "protocol: json-rpc", "json_rpc: null", "rules: [{allow: {method: a}}]"), ep0 + ".json_rpc", "not null", 12},

		// graphql.
		{"graphql without access or rules", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql"), ep0 + ".access", "requires access or rules", 9},
		{"graphql access and rules", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "access: read-only", "rules: [{allow: {operation_type: query}}]"), ep0 + ".rules", "mutually exclusive", 13},
		{"graphql rule without type", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "rules: [{allow: {operation_name: Foo}}]"), ep0 + ".rules[0].allow.operation_type", "required", 12},
		{"graphql rule bad type", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "rules: [{allow: {operation_type: read}}]"), ep0 + ".rules[0].allow.operation_type", "must be one of", 12},
		{"graphql rule method", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "rules: [{allow: {operation_type: query, method: POST}}]"), ep0 + ".rules[0].allow.method", "unknown key", 12},
		{"graphql rule fields", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "rules: [{allow: {operation_type: query, fields: [viewer]}}]"), ep0 + ".rules[0].allow.fields", "not supported by Palisade", 12},
		{"graphql bad name glob", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "rules: [{allow: {operation_type: query, operation_name: \"a-b\"}}]"), ep0 + ".rules[0].allow.operation_name", "operation-name glob", 12},
		{"graphql registry without allow", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "access: read-only", "graphql_persisted_queries: {abc: {operation_type: query}}"), ep0 + ".graphql_persisted_queries", "has no effect", 13},
		{"graphql allow_registered without registry", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "access: read-only", "persisted_queries: allow_registered"), ep0 + ".graphql_persisted_queries", "is required", 13},
		{"graphql registry star type", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "access: read-only", "persisted_queries: allow_registered", `graphql_persisted_queries: {abc: {operation_type: "*"}}`), ep0 + ".graphql_persisted_queries.abc.operation_type", "must be one of", 14},
		{"graphql bad persisted_queries", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "access: read-only", "persisted_queries: allow"), ep0 + ".persisted_queries", "must be one of", 13},
		{"graphql batch zero", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "access: read-only", "graphql_max_batch_size: 0"), ep0 + ".graphql_max_batch_size", "must be 1-64", 13},
		{"graphql body bound", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "access: read-only", "graphql_max_body_bytes: -1"), ep0 + ".graphql_max_body_bytes", "must be 1-1048576", 13},
		{"rest rule with operation_type", withEndpoint("host: api.example.com", "port: 443", "protocol: rest", "rules: [{allow: {method: GET, path: /, operation_type: query}}]"), ep0 + ".rules[0].allow.operation_type", "unknown key", 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s\nnormalised: %s", tc.yaml, p.Canonical())
			}
			errs, _ := AsErrors(err)
			for _, fe := range errs {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					if tc.line != 0 && fe.Line != tc.line {
						t.Errorf("%s reported on line %d, want %d", tc.path, fe.Line, tc.line)
					}
					return
				}
			}
			t.Fatalf("no problem at %q containing %q; got:\n%v", tc.path, tc.msg, err)
		})
	}
}

func TestMCPOptionsMaterialised(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  MCPOptions
	}{
		{"mcp omitted", nil, MCPOptions{Versions: []string{"2025-11-25"}, StrictToolNames: true, MaxBodyBytes: 65536}},
		{"versions omitted", []string{"mcp: {strict_tool_names: false}"}, MCPOptions{Versions: []string{"2025-11-25"}, MaxBodyBytes: 65536}},
		{"mcp empty mapping", []string{"mcp: {}"}, MCPOptions{Versions: []string{"2025-11-25"}, StrictToolNames: true, MaxBodyBytes: 65536}},
		{"semantic order", []string{`mcp: {versions: [2025-11-25, "2025-03-26", 2025-06-18], max_body_bytes: 4096}`}, MCPOptions{Versions: []string{"2025-03-26", "2025-06-18", "2025-11-25"}, StrictToolNames: true, MaxBodyBytes: 4096}},
		{"downgrade", []string{"mcp:", "  versions:", "    - 2025-03-26"}, MCPOptions{Versions: []string{"2025-03-26"}, StrictToolNames: true, MaxBodyBytes: 65536}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(mcpEP(append(tc.lines, toolRules)...)))
			if err != nil {
				t.Fatal(err)
			}
			got := p.NetworkPolicies["e"].Endpoints[0].MCP
			if got == nil || !slices.Equal(got.Versions, tc.want.Versions) || got.StrictToolNames != tc.want.StrictToolNames || got.MaxBodyBytes != tc.want.MaxBodyBytes {
				t.Fatalf("mcp = %+v, want %+v", got, tc.want)
			}
			// The canonical form stores the materialised list: parsed
			// back, it means the same (a registry that grows later
			// cannot widen it).
			c := p.Canonical()
			if !bytes.Contains(c, []byte(`"versions":["`+strings.Join(tc.want.Versions, `","`)+`"]`)) {
				t.Errorf("canonical form lacks the materialised allowlist: %s", c)
			}
			q, err := Parse(c)
			if err != nil {
				t.Fatalf("canonical form does not parse: %v\n%s", err, c)
			}
			if q.Checksum() != p.Checksum() {
				t.Errorf("checksum changed through the canonical form")
			}
		})
	}
}

func TestProtocolsAccept(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yaml  string
		check func(t *testing.T, e *Endpoint)
	}{
		{"mcp tool forms", mcpEP(
			"rules:",
			"  - allow: {method: initialize}",
			"  - allow: {method: notifications/initialized}",
			"  - allow: {method: tools/call, tool: search_web}",
			"  - allow: {method: tools/call, tool: {any: [create_issue, list_*]}}",
			"  - allow: {method: tools/call, params: {name: read.file}}",
			"deny_rules:",
			"  - {method: tools/call, tool: send_email}",
		), func(t *testing.T, e *Endpoint) {
			var tools []string
			for _, r := range e.Rules {
				if q, ok := r.Allow.ToolMatcher(); ok {
					tools = append(tools, q.Any...)
				}
			}
			slices.Sort(tools)
			if want := []string{"create_issue", "list_*", "read.file", "search_web"}; !slices.Equal(tools, want) {
				t.Errorf("tools = %v, want %v", tools, want)
			}
			if q, _ := e.DenyRules[0].ToolMatcher(); len(q.Any) != 1 || q.Any[0] != "send_email" {
				t.Errorf("deny rule tool = %v", q)
			}
		}},
		{"mcp tools glob without tool rules", mcpEP(`rules: [{allow: {method: "tools/*"}}, {allow: {method: initialize}}]`), nil},
		{"mcp lax names", mcpEP("mcp: {strict_tool_names: false}", `rules: [{allow: {method: tools/call, tool: "send mail"}}]`), func(t *testing.T, e *Endpoint) {
			if e.MCP.StrictToolNames {
				t.Error("strict_tool_names stayed true")
			}
		}},
		{"json-rpc", withEndpoint("host: rpc.example.com", "port: 443", "protocol: json-rpc", "json_rpc: {max_body_bytes: 131072}", "rules: [{allow: {method: reports.list}}, {allow: {method: \"*\"}}]", "deny_rules: [{method: admin.reset}]"), func(t *testing.T, e *Endpoint) {
			if e.JSONRPC == nil || e.JSONRPC.MaxBodyBytes != 131072 || e.MCP != nil {
				t.Errorf("options = %+v %+v", e.JSONRPC, e.MCP)
			}
		}},
		{"json-rpc default bound", withEndpoint("host: rpc.example.com", "port: 443", "protocol: json-rpc", "rules: [{allow: {method: a}}]"), func(t *testing.T, e *Endpoint) {
			if e.MaxBodyBytes() != DefaultMaxBodyBytes {
				t.Errorf("MaxBodyBytes = %d", e.MaxBodyBytes())
			}
		}},
		{"graphql read-only", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql", "access: read-only"), func(t *testing.T, e *Endpoint) {
			if e.PersistedQueries != PersistedQueriesDeny || e.GraphQLMaxBodyBytes != DefaultMaxBodyBytes || e.GraphQLMaxBatchSize != 0 || !e.BodyInspected() {
				t.Errorf("graphql defaults = %q %d %d", e.PersistedQueries, e.GraphQLMaxBodyBytes, e.GraphQLMaxBatchSize)
			}
		}},
		{"graphql rules and registry", withEndpoint("host: api.example.com", "port: 443", "protocol: graphql",
			"rules: [{allow: {operation_type: query}}, {allow: {operation_type: mutation, operation_name: \"Issue*\"}}]",
			"deny_rules: [{operation_type: \"*\", operation_name: Admin*}]",
			"persisted_queries: allow_registered",
			"graphql_persisted_queries: {ecf4edb46db40b5132295c0291d62fb65d6759a9eedfa4d5d612dd5ec54a6b38: {operation_type: query, operation_name: Viewer}}",
			"graphql_max_batch_size: 8"), func(t *testing.T, e *Endpoint) {
			if len(e.GraphQLPersistedQueries) != 1 || e.GraphQLMaxBatchSize != 8 {
				t.Errorf("registry %v batch %d", e.GraphQLPersistedQueries, e.GraphQLMaxBatchSize)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatalf("%v\n%s", err, tc.yaml)
			}
			if tc.check != nil {
				tc.check(t, p.NetworkPolicies["e"].Endpoints[0])
			}
			q, err := Parse(p.Canonical())
			if err != nil {
				t.Fatalf("canonical form does not parse: %v\n%s", err, p.Canonical())
			}
			if q.Checksum() != p.Checksum() {
				t.Errorf("checksum changed through the canonical form:\n%s\n%s", p.Canonical(), q.Canonical())
			}
			if _, err := Parse(p.YAML()); err != nil {
				t.Errorf("YAML form does not parse: %v\n%s", err, p.YAML())
			}
		})
	}
}

func TestMCPRegistry(t *testing.T) {
	if got := MCPVersions(); !slices.Equal(got, []string{"2025-03-26", "2025-06-18", "2025-11-25"}) {
		t.Fatalf("registry = %v", got)
	}
	for v, want := range map[string]int{"2025-03-26": 64, "2025-06-18": 0, "2025-11-25": 0} {
		if n, ok := MCPMaxBatch(v); !ok || n != want {
			t.Errorf("MCPMaxBatch(%s) = %d %v", v, n, ok)
		}
	}
	for _, v := range []string{"", "2024-11-05", "2026-07-28", "latest", "2025-11-25 ", "2025-11-25\x00"} {
		if MCPVersionKnown(v) {
			t.Errorf("%q is known", v)
		}
	}
	for _, n := range []string{"a", "search_web", "A.b-c_9", strings.Repeat("x", 128)} {
		if !ValidToolName(n) {
			t.Errorf("%q refused", n)
		}
	}
	for _, n := range []string{"", "send mail", "a/b", "é", strings.Repeat("x", 129), "a\n"} {
		if ValidToolName(n) {
			t.Errorf("%q accepted", n)
		}
	}
}
