package ceiling

import (
	"strings"
	"testing"
)

// protoEntry renders one entry holding one endpoint of host mcp.test.
func protoEntry(lines ...string) string {
	return entry("tools", "    binaries: [{path: /usr/bin/node}]\n    endpoints:\n      - host: mcp.test\n        port: 443\n"+
		"        "+strings.Join(lines, "\n        ")+"\n")
}

// Each pair pins one part of the body-inspected protocols' containment:
// what the policy admits beyond the ceiling is refused, naming the
// field; a narrower policy is proved.
func TestProtocolContainment(t *testing.T) {
	const mcpRules = `rules: [{allow: {method: initialize}}, {allow: {method: tools/call, tool: "read_*"}}]`
	for _, tc := range []struct {
		name, ceiling, policy, want string // want "" when proved
	}{
		{"same", protoEntry("protocol: mcp", mcpRules), protoEntry("protocol: mcp", mcpRules), ""},
		{"narrower tool", protoEntry("protocol: mcp", mcpRules), protoEntry("protocol: mcp", `rules: [{allow: {method: tools/call, tool: read_file}}]`), ""},
		{"wider tool", protoEntry("protocol: mcp", mcpRules), protoEntry("protocol: mcp", `rules: [{allow: {method: tools/call, tool: "*_file"}}]`), "rules[0]"},
		{"other tool", protoEntry("protocol: mcp", mcpRules), protoEntry("protocol: mcp", `rules: [{allow: {method: tools/call, tool: write_file}}]`), "not inside any one allow rule"},
		{"lax names", protoEntry("protocol: mcp", `rules: [{allow: {method: "tools/*"}}]`), protoEntry("protocol: mcp", "mcp: {strict_tool_names: false}", `rules: [{allow: {method: "tools/*"}}]`), "strict_tool_names"},
		{"lax literal within strict glob", protoEntry("protocol: mcp", `rules: [{allow: {method: tools/call, tool: "*"}}]`), protoEntry("protocol: mcp", "mcp: {strict_tool_names: false}", `rules: [{allow: {method: tools/call, tool: "send mail"}}]`), "strict_tool_names"},
		{"lax both", protoEntry("protocol: mcp", "mcp: {strict_tool_names: false}", `rules: [{allow: {method: tools/call, tool: "send mail"}}]`), protoEntry("protocol: mcp", `rules: [{allow: {method: tools/call, tool: "send_mail"}}]`), "not inside any one allow rule"},
		{"version", protoEntry("protocol: mcp", mcpRules), protoEntry("protocol: mcp", "mcp: {versions: [2025-06-18, 2025-11-25]}", mcpRules), "mcp.versions"},
		{"version subset", protoEntry("protocol: mcp", "mcp: {versions: [2025-06-18, 2025-11-25]}", mcpRules), protoEntry("protocol: mcp", mcpRules), ""},
		{"body bound", protoEntry("protocol: mcp", mcpRules), protoEntry("protocol: mcp", "mcp: {max_body_bytes: 100000}", mcpRules), "bodies of up to 100000"},
		{"deny not copied", protoEntry("protocol: mcp", mcpRules, `deny_rules: [{method: tools/call, tool: read_secret}]`), protoEntry("protocol: mcp", mcpRules), "deny rule"},
		{"deny copied", protoEntry("protocol: mcp", mcpRules, `deny_rules: [{method: tools/call, tool: read_secret}]`), protoEntry("protocol: mcp", mcpRules, `deny_rules: [{method: tools/call, tool: "read_s*"}]`), ""},
		{"deny elsewhere", protoEntry("protocol: mcp", mcpRules, `deny_rules: [{method: tools/call, tool: write_secret}]`), protoEntry("protocol: mcp", mcpRules), ""},
		{"audit policy", protoEntry("protocol: mcp", mcpRules), protoEntry("protocol: mcp", "enforcement: audit", mcpRules), "enforcement"},
		{"audit ceiling", protoEntry("protocol: mcp", "enforcement: audit", mcpRules), protoEntry("protocol: mcp", `rules: [{allow: {method: "tools/*"}}]`), ""},
		{"rest policy", protoEntry("protocol: mcp", mcpRules), protoEntry("protocol: rest", "access: read-only"), "admits any request body"},
		{"plain policy", protoEntry("protocol: mcp", mcpRules), protoEntry("tls: skip"), "relays tunnels without inspection"},
		{"rest ceiling full", protoEntry("protocol: rest", "access: full"), protoEntry("protocol: mcp", mcpRules), ""},
		{"rest ceiling read-only", protoEntry("protocol: rest", "access: read-only"), protoEntry("protocol: mcp", mcpRules), "POST"},
		{"rest ceiling post rule", protoEntry("protocol: rest", `rules: [{allow: {method: POST, path: "**"}}, {allow: {method: GET, path: "**"}}]`), protoEntry("protocol: mcp", mcpRules), ""},
		{"rest ceiling one path", protoEntry("protocol: rest", `rules: [{allow: {method: POST, path: /mcp}}, {allow: {method: GET, path: /mcp}}]`), protoEntry("protocol: mcp", mcpRules), "any path"},
		{"other protocol", protoEntry("protocol: json-rpc", `rules: [{allow: {method: "*"}}]`), protoEntry("protocol: mcp", mcpRules), "protocol mcp is not"},
		{"json-rpc star", protoEntry("protocol: json-rpc", `rules: [{allow: {method: eth_call}}]`), protoEntry("protocol: json-rpc", `rules: [{allow: {method: "*"}}]`), "not inside"},
		{"json-rpc narrower", protoEntry("protocol: json-rpc", `rules: [{allow: {method: "*"}}]`, `deny_rules: [{method: eth_send}]`), protoEntry("protocol: json-rpc", `rules: [{allow: {method: eth_call}}]`), ""},
		{"json-rpc deny", protoEntry("protocol: json-rpc", `rules: [{allow: {method: "*"}}]`, `deny_rules: [{method: eth_send}]`), protoEntry("protocol: json-rpc", `rules: [{allow: {method: "*"}}]`), "deny rule"},
		{"graphql read-only", protoEntry("protocol: graphql", "access: read-only"), protoEntry("protocol: graphql", `rules: [{allow: {operation_type: query, operation_name: "Get*"}}]`), ""},
		{"graphql mutation", protoEntry("protocol: graphql", "access: read-only"), protoEntry("protocol: graphql", "access: read-write"), "mutation operations are outside"},
		{"graphql star type", protoEntry("protocol: graphql", "access: full"), protoEntry("protocol: graphql", `rules: [{allow: {operation_type: "*"}}]`), "outside the ceiling's access"},
		{"graphql name", protoEntry("protocol: graphql", `rules: [{allow: {operation_type: query, operation_name: "Get*"}}]`), protoEntry("protocol: graphql", `rules: [{allow: {operation_type: query}}]`), "not inside any one allow rule"},
		{"graphql deny", protoEntry("protocol: graphql", "access: full", `deny_rules: [{operation_type: mutation, operation_name: "Delete*"}]`), protoEntry("protocol: graphql", "access: read-write"), "deny rule"},
		{"graphql batch", protoEntry("protocol: graphql", "access: read-only"), protoEntry("protocol: graphql", "access: read-only", "graphql_max_batch_size: 4"), "graphql_max_batch_size"},
		{"graphql persisted", protoEntry("protocol: graphql", "access: read-only"), protoEntry("protocol: graphql", "access: read-only", "persisted_queries: allow_registered", "graphql_persisted_queries: {abc: {operation_type: query}}"), "does not register"},
		{"graphql persisted refused anyway", protoEntry("protocol: graphql", "access: read-only"), protoEntry("protocol: graphql", "access: read-only", "persisted_queries: allow_registered", "graphql_persisted_queries: {abc: {operation_type: mutation}}"), ""},
		{"graphql persisted as another", protoEntry("protocol: graphql", "access: full", "persisted_queries: allow_registered", "graphql_persisted_queries: {abc: {operation_type: mutation}}", `deny_rules: [{operation_type: mutation}]`),
			protoEntry("protocol: graphql", "access: read-only", "persisted_queries: allow_registered", "graphql_persisted_queries: {abc: {operation_type: query}}", `deny_rules: [{operation_type: mutation}]`), "registers as an operation it refuses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, p := mustParse(t, tc.ceiling), mustParse(t, tc.policy)
			xs := Contains(c, p, Options{})
			switch {
			case tc.want == "" && len(xs) > 0:
				t.Errorf("refused: %v\nceiling:\n%s\npolicy:\n%s", xs[0], tc.ceiling, tc.policy)
			case tc.want != "" && len(xs) == 0:
				t.Errorf("proved, want a refusal mentioning %q\nceiling:\n%s\npolicy:\n%s", tc.want, tc.ceiling, tc.policy)
			case tc.want != "" && !strings.Contains(xs[0].Error(), tc.want):
				t.Errorf("refusal %q does not mention %q", xs[0], tc.want)
			}
		})
	}
}
