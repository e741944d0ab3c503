package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// toolsPolicy is one endpoint for allowed.test on port with the given
// lines (protocol, options, rules), reached by curl.
func toolsPolicy(port int, lines ...string) string {
	return fmt.Sprintf(`version: 1
network_policies:
  tools:
    endpoints:
      - host: allowed.test
        port: %d
        %s
    binaries:
      - path: /usr/bin/curl
`, port, strings.Join(lines, "\n        "))
}

// bodyCase is one request to a body-inspected endpoint and what the
// client must get: the status, the refusal's reason (and rule), and
// whether it reached the upstream.
type bodyCase struct {
	name   string
	method string
	target string // path and query
	header http.Header
	body   string
	status int
	reason string
	rule   string
}

func rpc(id int, method, params string) string {
	if params == "" {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q}`, id, method)
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
}

func mcpHeader(version ...string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	if len(version) > 0 {
		h["Mcp-Protocol-Version"] = version
	}
	return h
}

// runBodyCases sends each case through the inspected tunnel (HTTP/1.1 or
// h2 on the client's leg) and checks the answer, that exactly the
// allowed requests reached the upstream with their bodies whole, and
// that each policy denial's event names its reason and rule.
func runBodyCases(t *testing.T, e *inspectEnv, h2 bool, cases []bodyCase) {
	t.Helper()
	cl := e.client(h2)
	wantProto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
	relayed, want := 0, map[string]bool{}
	for _, c := range cases {
		req, err := http.NewRequest(c.method, e.url(c.target), strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.body == "" {
			req.Body, req.ContentLength = http.NoBody, 0
		}
		for k, v := range c.header {
			req.Header[k] = v
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Proto != wantProto {
			t.Errorf("%s: %d over %s, want %d over %s: %s", c.name, resp.StatusCode, resp.Proto, c.status, wantProto, got)
			continue
		}
		if c.status == http.StatusOK {
			relayed++
			var echo struct {
				Method string
				Body   int
				Proto  string
			}
			if json.Unmarshal(got, &echo) != nil || echo.Method != c.method || echo.Body != len(c.body) || echo.Proto != wantProto {
				t.Errorf("%s: upstream saw %s, want %s with %d body bytes over %s", c.name, got, c.method, len(c.body), wantProto)
			}
			continue
		}
		var b struct{ Error, Reason string }
		json.Unmarshal(got, &b)
		if b.Reason != c.reason {
			t.Errorf("%s: reason %q (%s), want %q", c.name, b.Reason, got, c.reason)
		}
		if c.status == http.StatusForbidden {
			want[c.reason+" "+c.rule] = true
			if b.Error != OutcomePolicyDenied || resp.Header.Get("Proxy-Status") == "" {
				t.Errorf("%s: %s without Proxy-Status %q, want policy_denied", c.name, got, resp.Header.Get("Proxy-Status"))
			}
		}
	}
	// Each denial's event names its reason and, for a deny rule, the rule
	// (the denial limiter folds repeats of one method, path and reason
	// into one event with a count, so reasons are compared as a set).
	var seen map[string]bool
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		seen = map[string]bool{}
		for _, ev := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
			if ev["status_code"] == OutcomePolicyDenied {
				rule, _ := get(ev, "unmapped", "egress_proxy", "l7_rule").(string)
				seen[fmt.Sprint(get(ev, "unmapped", "egress_proxy", "reason"))+" "+rule] = true
			}
		}
		if maps.Equal(seen, want) {
			break
		}
	}
	if !maps.Equal(seen, want) {
		t.Errorf("denial events (reason rule) %v, want %v", seen, want)
	}
	if n := len(e.up.requests()); n != relayed {
		t.Errorf("the upstream received %d requests, want the %d allowed ones: %v", n, relayed, e.up.requests())
	}
}

const mcpRulesYAML = `rules: [{allow: {method: initialize}}, {allow: {method: notifications/initialized}}, {allow: {method: tools/list}}, {allow: {method: tools/call, tool: "read_*"}}]`

// protocol mcp over an inspected tunnel, HTTP/1.1 and h2 on both legs:
// the allowed calls reach the upstream with their bodies whole; a tool
// or a method no rule allows, a deny rule, a revision outside
// mcp.versions are 403 (with the event naming the reason and rule); a
// repeated, empty or unknown MCP-Protocol-Version, a batch under
// 2025-11-25, unreadable JSON are 400, a body over the bound 413, other
// HTTP methods 405 — none of them reaches the upstream.
// Mutation-checked: with newInspector's mcp, json-rpc and graphql cases
// removed (rest.New decides them: every request refused) the allowed
// requests here fail; with the rule named in the event left out
// (inspector.serve), the deny rule's event check fails.
func TestMCPInspected(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1.1", true: "h2"}[h2], func(t *testing.T) {
			e := newInspectEnv(t, h2, func(port int) string {
				return toolsPolicy(port, "protocol: mcp", "mcp: {versions: [2025-06-18, 2025-11-25], max_body_bytes: 2048}", mcpRulesYAML,
					`deny_rules: [{method: tools/call, tool: read_secrets}]`)
			}, true)
			call := func(tool string) string {
				return rpc(2, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":{"path":"/x"}}`, tool))
			}
			runBodyCases(t, e, h2, []bodyCase{
				{"initialize without a version", "POST", "/mcp", mcpHeader(), rpc(1, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`), 200, "", ""},
				{"initialized notification", "POST", "/mcp", mcpHeader("2025-11-25"), `{"jsonrpc":"2.0","method":"notifications/initialized"}`, 200, "", ""},
				{"tools/list", "POST", "/mcp", mcpHeader("2025-06-18"), rpc(2, "tools/list", ""), 200, "", ""},
				{"allowed tool", "POST", "/mcp", mcpHeader("2025-11-25"), call("read_file"), 200, "", ""},
				{"event stream", "GET", "/mcp", http.Header{"Accept": {"text/event-stream"}, "Mcp-Protocol-Version": {"2025-11-25"}}, "", 200, "", ""},
				{"tool no rule allows", "POST", "/mcp", mcpHeader("2025-11-25"), call("write_file"), 403, policy.L7NoRuleMatched, ""},
				{"denied tool", "POST", "/mcp", mcpHeader("2025-11-25"), call("read_secrets"), 403, policy.L7DeniedByRule, "deny_rules[0]"},
				{"method no rule allows", "POST", "/mcp", mcpHeader("2025-11-25"), rpc(3, "resources/read", `{"uri":"file:///etc/passwd"}`), 403, policy.L7NoRuleMatched, ""},
				{"tool name outside the syntax", "POST", "/mcp", mcpHeader("2025-11-25"), call("read file"), 403, policy.MCPToolNameInvalid, ""},
				{"revision outside the allowlist", "POST", "/mcp", mcpHeader("2025-03-26"), call("read_file"), 403, policy.MCPVersionNotAllowed, ""},
				{"no header: the fallback, not allowed", "POST", "/mcp", mcpHeader(), call("read_file"), 403, policy.MCPVersionNotAllowed, ""},
				{"unknown revision", "POST", "/mcp", mcpHeader("2024-11-05"), call("read_file"), 400, policy.MCPVersionInvalid, ""},
				{"empty revision", "POST", "/mcp", mcpHeader(""), call("read_file"), 400, policy.MCPVersionInvalid, ""},
				{"two revisions", "POST", "/mcp", mcpHeader("2025-11-25", "2025-11-25"), call("read_file"), 400, policy.MCPVersionInvalid, ""},
				{"batch under 2025-11-25", "POST", "/mcp", mcpHeader("2025-11-25"), "[" + call("read_file") + "]", 400, policy.MCPBatchRefused, ""},
				{"case-folded member", "POST", "/mcp", mcpHeader("2025-11-25"), `{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call","params":{"name":"write_file"}}`, 400, policy.JSONRPCInvalid, ""},
				{"over the bound", "POST", "/mcp", mcpHeader("2025-11-25"), call("read_"+strings.Repeat("a", 100)) + strings.Repeat(" ", 2048), 413, policy.L7BodyTooLarge, ""},
				{"not JSON", "POST", "/mcp", http.Header{"Content-Type": {"text/plain"}, "Mcp-Protocol-Version": {"2025-11-25"}}, call("read_file"), 415, policy.L7UnsupportedBody, ""},
				{"method override", "POST", "/mcp", func() http.Header { h := mcpHeader("2025-11-25"); h.Set("X-HTTP-Method-Override", "DELETE"); return h }(), call("read_file"), 400, policy.L7MethodOverride, ""},
				{"session delete", "DELETE", "/mcp", mcpHeader("2025-11-25"), "", 405, policy.L7HTTPMethod, ""},
			})
		})
	}
}

// protocol json-rpc: methods only; a response sent to the server is
// refused; batches are decided call by call.
func TestJSONRPCInspected(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1.1", true: "h2"}[h2], func(t *testing.T) {
			e := newInspectEnv(t, h2, func(port int) string {
				return toolsPolicy(port, "protocol: json-rpc", `rules: [{allow: {method: eth_call}}, {allow: {method: eth_getBalance}}]`)
			}, true)
			h := http.Header{"Content-Type": {"application/json"}}
			runBodyCases(t, e, h2, []bodyCase{
				{"allowed", "POST", "/", h, rpc(1, "eth_call", `[{"to":"0x0"},"latest"]`), 200, "", ""},
				{"allowed batch", "POST", "/", h, "[" + rpc(1, "eth_call", "") + "," + rpc(2, "eth_getBalance", "") + "]", 200, "", ""},
				{"refused method", "POST", "/", h, rpc(1, "eth_sendRawTransaction", `["0x00"]`), 403, policy.L7NoRuleMatched, ""},
				{"refused in a batch", "POST", "/", h, "[" + rpc(1, "eth_call", "") + "," + rpc(2, "eth_sendRawTransaction", "") + "]", 403, policy.L7NoRuleMatched, ""},
				{"a response", "POST", "/", h, `{"jsonrpc":"2.0","id":1,"result":"0x1"}`, 403, policy.JSONRPCResponseFrame, ""},
				{"JSON-RPC 1.0", "POST", "/", h, `{"id":1,"method":"eth_call","params":[]}`, 400, policy.JSONRPCInvalid, ""},
				{"GET", "GET", "/?method=eth_sendRawTransaction", nil, "", 405, policy.L7HTTPMethod, ""},
			})
		})
	}
}

// protocol graphql under access: read-only, GET and POST forms: queries
// pass, a mutation is refused however it is sent; persisted hashes,
// batches and ambiguous documents are refused.
func TestGraphQLInspected(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1.1", true: "h2"}[h2], func(t *testing.T) {
			e := newInspectEnv(t, h2, func(port int) string {
				return toolsPolicy(port, "protocol: graphql", "access: read-only", `deny_rules: [{operation_type: query, operation_name: "Admin*"}]`)
			}, true)
			j := http.Header{"Content-Type": {"application/json"}}
			g := http.Header{"Content-Type": {"application/graphql"}}
			runBodyCases(t, e, h2, []bodyCase{
				{"query", "POST", "/graphql", j, `{"query":"query Viewer { viewer { login } }","variables":{}}`, 200, "", ""},
				{"GET query", "GET", "/graphql?query=%7B+viewer+%7B+login+%7D+%7D", nil, "", 200, "", ""},
				{"application/graphql query", "POST", "/graphql", g, `{ viewer { login } }`, 200, "", ""},
				{"mutation", "POST", "/graphql", j, `{"query":"mutation Star { addStar(input: {starrableId: \"x\"}) { clientMutationId } }"}`, 403, policy.L7AccessDenied, ""},
				{"GET mutation", "GET", "/graphql?query=mutation+%7B+deleteRepo+%7D", nil, "", 403, policy.L7AccessDenied, ""},
				{"application/graphql mutation", "POST", "/graphql", g, `mutation { deleteRepo }`, 403, policy.L7AccessDenied, ""},
				{"subscription", "POST", "/graphql", j, `{"query":"subscription { events }"}`, 403, policy.L7AccessDenied, ""},
				{"deny rule", "POST", "/graphql", j, `{"query":"query AdminUsers { users }"}`, 403, policy.L7DeniedByRule, "deny_rules[0]"},
				{"mutation picked by operationName", "POST", "/graphql", j, `{"query":"query A { a } mutation B { b }","operationName":"B"}`, 403, policy.L7AccessDenied, ""},
				{"two operations, no name", "POST", "/graphql", j, `{"query":"query A { a } mutation B { b }"}`, 400, policy.GraphQLOperationAmbiguous, ""},
				{"persisted hash", "POST", "/graphql", j, `{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ecf4edb46db40b5132295c0291d62fb65d6759a9eedfa4d5d612dd5ec54a6b38"}}}`, 403, policy.GraphQLPersistedQuery, ""},
				{"batch", "POST", "/graphql", j, `[{"query":"{ a }"},{"query":"{ b }"}]`, 403, policy.GraphQLBatchRefused, ""},
				{"URL and body", "POST", "/graphql?query=%7Ba%7D", j, `{"query":"mutation { b }"}`, 400, policy.GraphQLInvalid, ""},
				{"folded member", "POST", "/graphql", j, `{"query":"{ a }","Query":"mutation { b }"}`, 400, policy.GraphQLInvalid, ""},
				{"PUT", "PUT", "/graphql", j, `{"query":"{ a }"}`, 405, policy.L7HTTPMethod, ""},
			})
		})
	}
}

// A forwarded http:// request to a protocol mcp endpoint is decided by
// its body too (what the inspector read is relayed first), and a
// refused one never reaches the upstream; its event names the call.
// Mutation-checked: without handle.go's copy of the decision's Call
// into the record, the l7_call check fails.
func TestForwardedMCPInspected(t *testing.T) {
	spy := newHeaderSpy(t)
	env := newEnv(t, toolsPolicy(spy.port, "protocol: mcp", mcpRulesYAML))
	send := func(version, body string) (int, string) {
		c := env.dial()
		fmt.Fprintf(c, "POST http://allowed.test:%d/mcp HTTP/1.1\r\nHost: allowed.test:%d\r\nContent-Type: application/json\r\nMcp-Protocol-Version: %s\r\nContent-Length: %d\r\n\r\n%s", spy.port, spy.port, version, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		return resp.StatusCode, string(b)
	}
	allowed := rpc(2, "tools/call", `{"name":"read_file"}`)
	if code, b := send("2025-11-25", allowed); code != 200 || !strings.Contains(b, fmt.Sprintf("%d bytes", len(allowed))) {
		t.Fatalf("allowed call: %d %s", code, b)
	}
	if code, b := send("2025-11-25", rpc(3, "tools/call", `{"name":"write_file"}`)); code != 403 || !strings.Contains(b, policy.L7NoRuleMatched) {
		t.Errorf("refused call: %d %s", code, b)
	}
	if code, b := send("2025-06-18", allowed); code != 403 || !strings.Contains(b, policy.MCPVersionNotAllowed) {
		t.Errorf("revision outside the allowlist: %d %s", code, b)
	}
	spy.mu.Lock()
	n, body := spy.count, spy.body
	spy.mu.Unlock()
	if n != 1 || body != allowed {
		t.Errorf("upstream got %d requests, last body %q; want only the allowed one", n, body)
	}
	// The refusal's event names the call (forwarded requests fill the
	// record in handle.go's check, not the inspected tunnel's).
	var got any
	for deadline := time.Now().Add(5 * time.Second); got == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, ev := range env.rec.ByClass(ocsf.ClassHTTPActivity) {
			if get(ev, "unmapped", "egress_proxy", "reason") == policy.L7NoRuleMatched {
				got = get(ev, "unmapped", "egress_proxy", "l7_call")
			}
		}
	}
	if m, _ := got.(map[string]any); !maps.Equal(m, map[string]any{"method": "tools/call", "tool": "write_file"}) {
		t.Errorf("forwarded refusal's l7_call %v, want tools/call write_file", got)
	}
}

// The event of a request to a body-inspected endpoint names the call it
// made (unmapped.egress_proxy.l7_call): the JSON-RPC method, the MCP
// tool, the GraphQL operation's type and name — for a refusal where no
// single rule decided too, and under enforcement: audit for a request
// relayed that the rules refuse — and never its params or arguments; a
// name that is not short printable ASCII (a tool outside the recommended
// syntax) is "(invalid)". Every event is also held to the OCSF schema
// (the recorder). Mutation-checked: without the copy of the decision's
// Call into the record (inspector.serve) every case fails; with
// jsonrpc.EventCall passing the tool through unchecked, the invalid
// tool case fails.
func TestBodyInspectedEventCall(t *testing.T) {
	type eventCase struct {
		path, body string
		status     int
		want       map[string]any
	}
	call := func(tool string) string {
		return rpc(2, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":{"token":"s3cret-argument"}}`, tool))
	}
	j := http.Header{"Content-Type": {"application/json"}}
	for _, c := range []struct {
		name   string
		lines  []string
		header http.Header
		cases  []eventCase
	}{
		{"mcp", []string{"protocol: mcp", mcpRulesYAML, `deny_rules: [{method: tools/call, tool: read_secrets}]`}, mcpHeader("2025-11-25"), []eventCase{
			{"/no-rule", call("write_file"), 403, map[string]any{"method": "tools/call", "tool": "write_file"}},
			{"/deny-rule", call("read_secrets"), 403, map[string]any{"method": "tools/call", "tool": "read_secrets"}},
			{"/invalid-tool", rpc(2, "tools/call", `{"name":"read\u0007file x"}`), 403, map[string]any{"method": "tools/call", "tool": "(invalid)"}},
			{"/method", rpc(3, "resources/read", `{"uri":"file:///etc/passwd"}`), 403, map[string]any{"method": "resources/read"}},
			{"/allowed", call("read_file"), 200, map[string]any{"method": "tools/call", "tool": "read_file"}},
		}},
		{"json-rpc", []string{"protocol: json-rpc", `rules: [{allow: {method: eth_call}}]`}, j, []eventCase{
			{"/refused", rpc(1, "eth_sendRawTransaction", `["0xsecret"]`), 403, map[string]any{"method": "eth_sendRawTransaction"}},
			{"/invalid", rpc(1, "eth send", ""), 403, map[string]any{"method": "(invalid)"}},
		}},
		{"graphql", []string{"protocol: graphql", "access: read-only"}, j, []eventCase{
			{"/mutation", `{"query":"mutation DropRepo($id: ID!) { deleteRepo(id: $id) }","variables":{"id":"s3cret"}}`, 403, map[string]any{"operation_type": "mutation", "operation_name": "DropRepo"}},
			{"/query", `{"query":"{ viewer { login } }"}`, 200, map[string]any{"operation_type": "query"}},
		}},
		{"mcp audit", []string{"protocol: mcp", "enforcement: audit", mcpRulesYAML}, mcpHeader("2025-11-25"), []eventCase{
			{"/audit", call("write_file"), 200, map[string]any{"method": "tools/call", "tool": "write_file"}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newInspectEnv(t, false, func(port int) string { return toolsPolicy(port, c.lines...) }, true)
			cl := e.client(false)
			for _, ec := range c.cases {
				req, err := http.NewRequest("POST", e.url(ec.path), strings.NewReader(ec.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header = c.header.Clone()
				resp, err := cl.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", ec.path, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != ec.status {
					t.Errorf("%s: status %d, want %d", ec.path, resp.StatusCode, ec.status)
				}
			}
			for _, ec := range c.cases {
				var got any
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					for _, ev := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
						if get(ev, "http_request", "url", "path") == ec.path {
							got = get(ev, "unmapped", "egress_proxy", "l7_call")
						}
					}
					if got != nil {
						break
					}
				}
				if m, _ := got.(map[string]any); !maps.Equal(m, ec.want) {
					t.Errorf("%s: l7_call %v, want %v", ec.path, got, ec.want)
				}
			}
			for _, line := range e.rec.Lines() {
				if strings.Contains(string(line), "s3cret") || strings.Contains(string(line), "\\u0007") {
					t.Errorf("an event quotes the request's params or a control byte: %s", line)
				}
			}
		})
	}
}

// Different calls refused on one body-inspected path within the denial
// rate limiter's window are events of their own, each naming its call
// (issue 27: a denied event names the tool), while a repeated call still
// folds into the count event, which lists the folded calls. Before, the
// limiter told denials apart by (method, path, reason) only, so a second
// tool refused on the same /mcp was folded into the first one's count
// and never named (fails so with DenialDetail's Call dropped).
func TestDenialBurstNamesEachCall(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	j := http.Header{"Content-Type": {"application/json"}}
	call := func(tool string) string { return rpc(2, "tools/call", fmt.Sprintf(`{"name":%q}`, tool)) }
	for _, c := range []struct {
		name   string
		lines  []string
		header http.Header
		bodies []string // all refused, on the same path and for the same reason
		named  string   // the l7_call of each event in full, in order
		folded string   // the count event's denials
	}{
		{"mcp", []string{"protocol: mcp", mcpRulesYAML}, mcpHeader("2025-11-25"),
			[]string{call("write_file"), call("delete_repo"), call("write_file"), rpc(3, "resources/read", `{"uri":"file:///x"}`), call("write_file"), call("delete_repo")},
			"[tools/call/write_file tools/call/delete_repo resources/read/]",
			`[{"count":2,"l7_call":{"method":"tools/call","tool":"write_file"},"method":"POST","path":"/mcp","reason":"l7_no_rule"},{"count":1,"l7_call":{"method":"tools/call","tool":"delete_repo"},"method":"POST","path":"/mcp","reason":"l7_no_rule"}]`},
		{"json-rpc", []string{"protocol: json-rpc", `rules: [{allow: {method: eth_call}}]`}, j,
			[]string{rpc(1, "eth_sendRawTransaction", `[]`), rpc(1, "eth_sign", `[]`), rpc(1, "eth_sign", `[]`), rpc(1, "eth_sign", `[]`)},
			"[eth_sendRawTransaction/ eth_sign/]",
			`[{"count":2,"l7_call":{"method":"eth_sign"},"method":"POST","path":"/mcp","reason":"l7_no_rule"}]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			now = time.Unix(1_800_000_000, 0)
			mu.Unlock()
			e := newInspectEnv(t, false, func(port int) string { return toolsPolicy(port, c.lines...) }, true,
				func(cf *Config) { cf.Now = clock; cf.Limits.DenyWindow = time.Hour })
			cl := e.client(false)
			for _, body := range c.bodies {
				req, err := http.NewRequest("POST", e.url("/mcp"), strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header = c.header.Clone()
				resp, err := cl.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 403 {
					t.Fatalf("%s: status %d, want 403", body, resp.StatusCode)
				}
			}
			named := func() []string {
				var out []string
				for _, ev := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
					if ev["count"] == nil {
						out = append(out, fmt.Sprintf("%v/%v", get(ev, "unmapped", "egress_proxy", "l7_call", "method"), orEmpty(get(ev, "unmapped", "egress_proxy", "l7_call", "tool"))))
					}
				}
				return out
			}
			nNamed := strings.Count(c.named, " ") + 1
			nFolded := len(c.bodies) - nNamed
			waitFor(t, "every denial reported or folded", func() bool {
				return len(named())+int(e.p.Counters().EventsSuppressed) >= len(c.bodies)
			})
			if got := fmt.Sprint(named()); got != c.named {
				t.Fatalf("events in full name %s, want %s (the first of each distinct call)", got, c.named)
			}
			mu.Lock()
			now = now.Add(time.Hour)
			mu.Unlock()
			e.p.flushDenials(clock())
			evs := e.rec.ByClass(ocsf.ClassHTTPActivity)
			last := evs[len(evs)-1]
			if len(evs) != nNamed+1 || num(get(last, "count")) != nFolded {
				t.Fatalf("%d events, the last with count %v; want %d and a count of %d", len(evs), get(last, "count"), nNamed+1, nFolded)
			}
			if b, _ := json.Marshal(get(last, "unmapped", "egress_proxy", "denials")); string(b) != c.folded {
				t.Fatalf("count event lists %s, want %s", b, c.folded)
			}
		})
	}
}

func orEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}
