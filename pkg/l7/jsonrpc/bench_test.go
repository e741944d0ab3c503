package jsonrpc

import (
	"net/http"
	"testing"
)

// BenchmarkDecideToolsCall is the inspector's own cost for one MCP
// tools/call (parse, revision, tool-name syntax, rules), without the
// proxy around it.
func BenchmarkDecideToolsCall(b *testing.B) {
	ep := mcpEndpoint(b, "protocol: mcp", `rules: [{allow: {method: initialize}}, {allow: {method: tools/list}}, {allow: {method: tools/call, tool: {any: [search_*, read_file]}}}]`,
		`deny_rules: [{method: tools/call, tool: read_secrets}]`)
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Mcp-Protocol-Version": {"2025-11-25"}}
	r := &Request{Method: "POST", Field: folded(h),
		Body: []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_issues","arguments":{"query":"is:open label:bug","limit":20}}}`)}
	b.ReportAllocs()
	for range b.N {
		if d := Decide(ep, r); !d.Allowed {
			b.Fatal(d)
		}
	}
}
