package jsonrpc

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		mcp        bool
		want       []Message // nil: refused
		batch      bool
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, true, []Message{{KindRequest, "tools/list", ""}}, false},
		{"tool call", `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"search","arguments":{"q":"x"}}}`, true, []Message{{KindRequest, "tools/call", "search"}}, false},
		{"members in any order", `{"params":{"arguments":{},"name":"search"},"method":"tools/call","id":2,"jsonrpc":"2.0"}`, true, []Message{{KindRequest, "tools/call", "search"}}, false},
		{"escaped names", `{"jsonrpc":"2.0","id":1,"\u006dethod":"tools/\u0063all","params":{"name":"se\u0061rch"}}`, true, []Message{{KindRequest, "tools/call", "search"}}, false},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, true, []Message{{KindNotification, "notifications/initialized", ""}}, false},
		{"response", `{"jsonrpc":"2.0","id":7,"result":{}}`, true, []Message{{KindResponse, "", ""}}, false},
		{"error response", `{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"no"}}`, true, []Message{{KindResponse, "", ""}}, false},
		{"batch", ` [{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"}] `, false, []Message{{KindRequest, "a", ""}, {KindNotification, "b", ""}}, true},
		{"batch of one", `[{"jsonrpc":"2.0","id":1,"method":"a"}]`, false, []Message{{KindRequest, "a", ""}}, true},
		{"array params generic", `{"jsonrpc":"2.0","id":1,"method":"sum","params":[1,2]}`, false, []Message{{KindRequest, "sum", ""}}, false},
		{"null id generic", `{"jsonrpc":"2.0","id":null,"method":"a"}`, false, []Message{{KindRequest, "a", ""}}, false},
		{"initialize", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`, true, []Message{{KindRequest, "initialize", ""}}, false},
		{"unknown member", `{"jsonrpc":"2.0","id":1,"method":"a","x-trace":1}`, true, []Message{{KindRequest, "a", ""}}, false},

		{"not JSON", `jsonrpc`, true, nil, false},
		{"empty", ``, true, nil, false},
		{"empty batch", `[]`, false, nil, true},
		{"trailing data", `{"jsonrpc":"2.0","id":1,"method":"a"} {}`, true, nil, false},
		{"two objects", `{"jsonrpc":"2.0","id":1,"method":"a"}{"jsonrpc":"2.0","id":2,"method":"b"}`, true, nil, false},
		{"wrong version", `{"jsonrpc":"1.0","id":1,"method":"a"}`, true, nil, false},
		{"no version", `{"id":1,"method":"a"}`, true, nil, false},
		{"numeric method", `{"jsonrpc":"2.0","id":1,"method":7}`, true, nil, false},
		{"empty method", `{"jsonrpc":"2.0","id":1,"method":""}`, true, nil, false},
		{"duplicate method", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}`, true, nil, false},
		{"duplicate after unescaping", `{"jsonrpc":"2.0","id":1,"method":"tools/list","\u006dethod":"tools/call"}`, true, nil, false},
		{"method in another case", `{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call"}`, true, nil, false},
		{"params folded with long s", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"param\u017f":{"name":"b"}}`, true, nil, false},
		{"duplicate tool name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}`, true, nil, false},
		{"tool name in another case", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","NAME":"b"}}`, true, nil, false},
		{"duplicate deep", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"k":1,"k":2}}}`, true, nil, false},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\xff\"}", true, nil, false},
		{"lone surrogate", `{"jsonrpc":"2.0","id":1,"method":"tools/\ud800"}`, true, nil, false},
		{"tool call without name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`, true, nil, false},
		{"tool call without params", `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`, true, nil, false},
		{"numeric tool name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":1}}`, true, nil, false},
		{"tool call notification", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a"}}`, true, nil, false},
		{"mcp array params", `{"jsonrpc":"2.0","id":1,"method":"a","params":[]}`, true, nil, false},
		{"scalar params", `{"jsonrpc":"2.0","id":1,"method":"a","params":1}`, false, nil, false},
		{"mcp null id", `{"jsonrpc":"2.0","id":null,"method":"a"}`, true, nil, false},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"a"}`, false, nil, false},
		{"method and result", `{"jsonrpc":"2.0","id":1,"method":"a","result":{}}`, true, nil, false},
		{"result and error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{}}`, true, nil, false},
		{"response without id", `{"jsonrpc":"2.0","result":{}}`, true, nil, false},
		{"initialize without version", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}`, true, nil, false},
		{"scalar batch member", `[1]`, false, nil, true},
		{"nested batch", `[[{"jsonrpc":"2.0","id":1,"method":"a"}]]`, false, nil, true},
		{"deep nesting", `{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}}`, false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Parse([]byte(tc.body), tc.mcp)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("accepted: %+v", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Batch != tc.batch || len(b.Messages) != len(tc.want) {
				t.Fatalf("got %+v", b)
			}
			for i, m := range b.Messages {
				if m != tc.want[i] {
					t.Errorf("message %d = %+v, want %+v", i, m, tc.want[i])
				}
			}
		})
	}
}

// mcpEndpoint is a policy-loaded mcp endpoint.
func mcpEndpoint(t testing.TB, lines ...string) *policy.Endpoint {
	t.Helper()
	src := "version: 1\nnetwork_policies:\n  m:\n    binaries: [{path: /usr/bin/node}]\n    endpoints:\n      - host: mcp.example.test\n        port: 443\n"
	for _, l := range lines {
		src += "        " + l + "\n"
	}
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return p.NetworkPolicies["m"].Endpoints[0]
}

func post(body string, fields ...string) *Request {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "<delete>" {
			h.Del(fields[i])
			continue
		}
		if strings.Contains(fields[i], "_") {
			h[fields[i]] = append(h[fields[i]], fields[i+1])
			continue
		}
		h.Add(fields[i], fields[i+1])
	}
	return &Request{Method: "POST", Field: folded(h), Body: []byte(body)}
}

// folded reads fields as the proxy does (l7.FieldValues): "_" for "-",
// any case.
func folded(h http.Header) func(string) []string {
	return func(name string) []string {
		var out []string
		for k, vv := range h {
			if strings.EqualFold(strings.ReplaceAll(k, "_", "-"), name) {
				out = append(out, vv...)
			}
		}
		return out
	}
}

const (
	initBody = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`
	listBody = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
)

func call(tool string) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": map[string]any{"secret": "never logged"}}})
	return string(b)
}

func batch(members ...string) string { return "[" + strings.Join(members, ",") + "]" }

func TestDecideMCP(t *testing.T) {
	rules := []string{
		"protocol: mcp",
		"rules:",
		"  - allow: {method: initialize}",
		"  - allow: {method: notifications/initialized}",
		"  - allow: {method: tools/list}",
		"  - allow: {method: tools/call, tool: {any: [search, \"read_*\"]}}",
		"deny_rules:",
		"  - {method: tools/call, tool: read_secrets}",
	}
	latest := mcpEndpoint(t, rules...)
	all := mcpEndpoint(t, append(rules, "mcp: {versions: [2025-03-26, 2025-06-18, 2025-11-25]}")...)
	old := mcpEndpoint(t, append(rules, "mcp: {versions: [2025-03-26]}")...)
	lax := mcpEndpoint(t, "protocol: mcp", "mcp: {strict_tool_names: false}", "rules: [{allow: {method: tools/call, tool: \"send mail\"}}]")
	small := mcpEndpoint(t, append(rules, "mcp: {max_body_bytes: 100}")...)
	audit := mcpEndpoint(t, append(rules, "enforcement: audit")...)
	const v11, v06, v03 = "2025-11-25", "2025-06-18", "2025-03-26"
	hdr := VersionField
	big := call("search")
	for _, tc := range []struct {
		name   string
		ep     *policy.Endpoint
		req    *Request
		status int // 0: allowed
		reason string
		rule   bool // names deny_rules[0]
		method string
		tool   string
	}{
		{"initialize without header", latest, post(initBody), 0, "", false, "initialize", ""},
		{"initialize exempt from the allowlist", old, post(initBody, hdr, v11), 0, "", false, "initialize", ""},
		{"allowed tool", latest, post(call("search"), hdr, v11), 0, "", false, "tools/call", "search"},
		{"allowed tool by glob", latest, post(call("read_docs"), hdr, v11), 0, "", false, "tools/call", "read_docs"},
		{"tool outside the rules", latest, post(call("send_email"), hdr, v11), 403, policy.L7NoRuleMatched, false, "tools/call", "send_email"},
		{"tool denied by rule", latest, post(call("read_secrets"), hdr, v11), 403, policy.L7DeniedByRule, true, "tools/call", "read_secrets"},
		{"method outside the rules", latest, post(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///etc"}}`, hdr, v11), 403, policy.L7NoRuleMatched, false, "resources/read", ""},
		{"notification allowed", latest, post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr, v11), 0, "", false, "notifications/initialized", ""},
		{"client response passes", latest, post(`{"jsonrpc":"2.0","id":9,"result":{"action":"decline"}}`, hdr, v11), 0, "", false, "", ""},

		{"header absent, fallback not allowed", latest, post(listBody), 403, policy.MCPVersionNotAllowed, false, "tools/list", ""},
		{"header absent, fallback allowed", all, post(listBody), 0, "", false, "tools/list", ""},
		{"header duplicate", all, post(listBody, hdr, v11, hdr, v11), 400, policy.MCPVersionInvalid, false, "tools/list", ""},
		{"header folded duplicate", all, post(listBody, hdr, v11, "Mcp_Protocol_Version", v06), 400, policy.MCPVersionInvalid, false, "tools/list", ""},
		{"header list in one field", all, post(listBody, hdr, v06+", "+v11), 400, policy.MCPVersionInvalid, false, "tools/list", ""},
		{"header empty", all, post(listBody, hdr, ""), 400, policy.MCPVersionInvalid, false, "tools/list", ""},
		{"header unknown revision", all, post(listBody, hdr, "2024-11-05"), 400, policy.MCPVersionInvalid, false, "tools/list", ""},
		{"header alias", all, post(listBody, hdr, "latest"), 400, policy.MCPVersionInvalid, false, "tools/list", ""},
		{"header outside the allowlist", latest, post(listBody, hdr, v06), 403, policy.MCPVersionNotAllowed, false, "tools/list", ""},
		{"header outside the allowlist under audit", audit, post(listBody, hdr, v06), 403, policy.MCPVersionNotAllowed, false, "tools/list", ""},

		{"batch under 2025-11-25", all, post(batch(listBody, call("search")), hdr, v11), 400, policy.MCPBatchRefused, false, "tools/list", ""},
		{"batch under 2025-06-18", all, post(batch(listBody), hdr, v06), 400, policy.MCPBatchRefused, false, "tools/list", ""},
		{"batch under 2025-03-26", all, post(batch(listBody, call("search")), hdr, v03), 0, "", false, "tools/list", ""},
		{"batch by the fallback", old, post(batch(listBody, call("search"))), 0, "", false, "tools/list", ""},
		{"batch with a refused member", all, post(batch(listBody, call("send_email")), hdr, v03), 403, policy.L7NoRuleMatched, false, "tools/call", "send_email"},
		{"batch of 64", all, post(batch(repeat(listBody, 64)...), hdr, v03), 0, "", false, "tools/list", ""},
		{"batch of 65", all, post(batch(repeat(listBody, 65)...), hdr, v03), 400, policy.MCPBatchTooLarge, false, "tools/list", ""},
		{"initialize in a batch", all, post(batch(initBody), hdr, v03), 400, policy.JSONRPCInvalid, false, "initialize", ""},
		{"batch of one initialize has no exemption", latest, post(batch(initBody)), 400, policy.JSONRPCInvalid, false, "initialize", ""},
		{"shape before the allowlist", latest, post(batch(listBody), hdr, v06), 400, policy.MCPBatchRefused, false, "tools/list", ""},

		{"strict name refused before the rules", latest, post(call("send mail"), hdr, v11), 403, policy.MCPToolNameInvalid, false, "tools/call", "send mail"},
		{"strict name in a batch", all, post(batch(listBody, call("../x")), hdr, v03), 403, policy.MCPToolNameInvalid, false, "tools/call", "../x"},
		{"lax name allowed", lax, post(call("send mail"), hdr, v11), 0, "", false, "tools/call", "send mail"},
		{"lax name compared exactly", lax, post(call("send mai?"), hdr, v11), 403, policy.L7NoRuleMatched, false, "tools/call", "send mai?"},

		{"audit: rule refusal is soft", audit, post(call("send_email"), hdr, v11), 403, policy.L7NoRuleMatched, false, "tools/call", "send_email"},
		{"body too large", small, &Request{Method: "POST", Field: http.Header{"Content-Type": {"application/json"}, hdr: {v11}}.Values, Body: []byte(big[:100]), TooLarge: true}, 413, policy.L7BodyTooLarge, false, "", ""},
		{"invalid JSON", latest, post(`{"jsonrpc":"2.0"`, hdr, v11), 400, policy.JSONRPCInvalid, false, "", ""},
		{"gzip body", latest, post(call("search"), hdr, v11, "Content-Encoding", "gzip"), 415, policy.L7UnsupportedBody, false, "", ""},
		{"text body", latest, post(call("search"), hdr, v11, "Content-Type", "<delete>", "Content-Type", "text/plain"), 415, policy.L7UnsupportedBody, false, "", ""},
		{"no content type", latest, post(call("search"), hdr, v11, "Content-Type", "<delete>"), 415, policy.L7UnsupportedBody, false, "", ""},
		{"two content types", latest, post(call("search"), hdr, v11, "Content-Type", "application/json"), 415, policy.L7UnsupportedBody, false, "", ""},
		{"latin-1 charset", latest, post(call("search"), hdr, v11, "Content-Type", "<delete>", "Content-Type", "application/json; charset=latin1"), 415, policy.L7UnsupportedBody, false, "", ""},
		{"utf-8 charset", latest, post(call("search"), hdr, v11, "Content-Type", "<delete>", "Content-Type", "application/json; charset=UTF-8"), 0, "", false, "tools/call", "search"},

		{"event stream", latest, &Request{Method: "GET", Field: http.Header{"Accept": {"text/event-stream"}, hdr: {v11}}.Values}, 0, "", false, "", ""},
		{"event stream outside the allowlist", latest, &Request{Method: "GET", Field: http.Header{"Accept": {"text/event-stream"}, hdr: {v06}}.Values}, 403, policy.MCPVersionNotAllowed, false, "", ""},
		{"event stream without header", latest, &Request{Method: "GET", Field: http.Header{"Accept": {"text/event-stream"}}.Values}, 403, policy.MCPVersionNotAllowed, false, "", ""},
		{"GET without event stream", latest, &Request{Method: "GET", Field: http.Header{hdr: {v11}}.Values}, 405, policy.L7HTTPMethod, false, "", ""},
		{"GET with a body", latest, &Request{Method: "GET", Field: http.Header{"Accept": {"text/event-stream"}, hdr: {v11}}.Values, Body: []byte(call("x"))}, 405, policy.L7HTTPMethod, false, "", ""},
		{"DELETE", latest, &Request{Method: "DELETE", Field: http.Header{hdr: {v11}}.Values}, 405, policy.L7HTTPMethod, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.ep, tc.req)
			if d.Allowed != (tc.status == 0) || !d.Allowed && (d.Status != tc.status || d.Reason != tc.reason) {
				t.Fatalf("decision %+v, want status %d reason %q", d, tc.status, tc.reason)
			}
			if (d.Rule == "deny_rules[0]") != tc.rule {
				t.Errorf("rule %q", d.Rule)
			}
			if d.Method != tc.method || d.Tool != tc.tool {
				t.Errorf("names method %q tool %q, want %q %q", d.Method, d.Tool, tc.method, tc.tool)
			}
			if strings.Contains(d.Detail, "never logged") {
				t.Errorf("detail holds the params: %q", d.Detail)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestDecideJSONRPC(t *testing.T) {
	ep := mcpEndpoint(t, "protocol: json-rpc", "rules: [{allow: {method: reports.list}}, {allow: {method: reports.search}}]", "deny_rules: [{method: reports.delete}]")
	star := mcpEndpoint(t, "protocol: json-rpc", `rules: [{allow: {method: "*"}}]`, "deny_rules: [{method: admin.reset}]")
	req := func(method string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"q":"x"}}`
	}
	for _, tc := range []struct {
		name   string
		ep     *policy.Endpoint
		req    *Request
		reason string // "": allowed
		status int
	}{
		{"allowed", ep, post(req("reports.list")), "", 0},
		{"other method", ep, post(req("reports.delete")), policy.L7DeniedByRule, 403},
		{"unlisted method", ep, post(req("reports.export")), policy.L7NoRuleMatched, 403},
		{"method case matters", ep, post(req("Reports.List")), policy.L7NoRuleMatched, 403},
		{"batch allowed", ep, post(batch(req("reports.list"), req("reports.search"))), "", 0},
		{"batch with a refused call", ep, post(batch(req("reports.list"), req("reports.export"))), policy.L7NoRuleMatched, 403},
		{"response frame", star, post(`{"jsonrpc":"2.0","id":1,"result":1}`), policy.JSONRPCResponseFrame, 403},
		{"star", star, post(req("anything.at.all")), "", 0},
		{"star with deny", star, post(req("admin.reset")), policy.L7DeniedByRule, 403},
		{"no version header needed", ep, post(req("reports.list"), VersionField, "garbage"), "", 0},
		{"json-rpc media type", ep, post(req("reports.list"), "Content-Type", "<delete>", "Content-Type", "application/json-rpc"), "", 0},
		{"GET refused", ep, &Request{Method: "GET", Field: http.Header{"Accept": {"text/event-stream"}}.Values}, policy.L7HTTPMethod, 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.ep, tc.req)
			if d.Allowed != (tc.reason == "") || !d.Allowed && (d.Reason != tc.reason || d.Status != tc.status) {
				t.Fatalf("decision %+v, want reason %q status %d", d, tc.reason, tc.status)
			}
		})
	}
}

func TestMethodOverrideRefused(t *testing.T) {
	ep := mcpEndpoint(t, "protocol: json-rpc", "rules: [{allow: {method: a}}]")
	body := `{"jsonrpc":"2.0","id":1,"method":"a"}`
	if d := Decide(ep, post(body)); !d.Allowed {
		t.Fatalf("plain request refused: %+v", d)
	}
	for _, f := range []string{"X-HTTP-Method-Override", "X_Http_Method", "x-method-override"} {
		if d := Decide(ep, post(body, f, "DELETE")); d.Allowed || d.Status != 400 || d.Reason != policy.L7MethodOverride {
			t.Errorf("%s: %+v", f, d)
		}
	}
	r := post(body)
	r.Query = map[string][]string{"_method": {"PUT"}}
	if d := Decide(ep, r); d.Allowed || d.Reason != policy.L7MethodOverride {
		t.Errorf("_method: %+v", d)
	}
}
