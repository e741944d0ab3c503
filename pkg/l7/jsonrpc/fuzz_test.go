package jsonrpc

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// goServerMessage is how a Go server built on encoding/json reads a
// message: member names matched case-insensitively, the last one
// winning.
type goServerMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type goServerParams struct {
	Name string `json:"name"`
}

// FuzzParse: Parse never panics, and whatever it accepts a Go server
// (encoding/json, case-insensitive names) and a JavaScript one (exact
// names: a map) read as the same method and tool name. A body the two
// readers could take apart never gets past Parse.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		listBody, initBody, call("search"), batch(listBody, call("read_x")),
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","NAME":"b"}}`,
		`{"jsonrpc":"2.0","id":9,"result":{}}`,
		`{"params":{"name":"x"},"method":"tools/call","id":"1","jsonrpc":"2.0"}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, mcp bool) {
		b, err := Parse(body, mcp)
		if err != nil {
			if b != nil {
				t.Fatalf("error %v with a body", err)
			}
			return
		}
		if len(b.Messages) == 0 || !b.Batch && len(b.Messages) != 1 {
			t.Fatalf("accepted %q as %+v", body, b)
		}
		var raws []json.RawMessage
		if b.Batch {
			if err := json.Unmarshal(body, &raws); err != nil {
				t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
			}
		} else {
			raws = []json.RawMessage{body}
		}
		for i, raw := range raws {
			var goMsg goServerMessage
			var jsMsg map[string]any
			if err := json.Unmarshal(raw, &goMsg); err != nil {
				t.Fatalf("accepted %q, which a Go server refuses: %v", raw, err)
			}
			if err := json.Unmarshal(raw, &jsMsg); err != nil {
				t.Fatalf("accepted %q, which a map refuses: %v", raw, err)
			}
			m := b.Messages[i]
			if jsMethod, _ := jsMsg["method"].(string); goMsg.Method != m.Method || jsMethod != m.Method {
				t.Fatalf("%q: Parse reads method %q, a Go server %q, a JavaScript one %q", raw, m.Method, goMsg.Method, jsMethod)
			}
			if m.Method == policy.MCPToolCall && mcp {
				var goParams goServerParams
				json.Unmarshal(goMsg.Params, &goParams)
				jsParams, _ := jsMsg["params"].(map[string]any)
				jsName, _ := jsParams["name"].(string)
				if goParams.Name != m.Tool || jsName != m.Tool {
					t.Fatalf("%q: Parse reads tool %q, a Go server %q, a JavaScript one %q", raw, m.Tool, goParams.Name, jsName)
				}
			}
		}
	})
}

// FuzzDecide: Decide never panics; an allowed request parses, each of
// its calls is allowed by the rules and, for mcp, names a revision of
// the allowlist; a refusal has a status and reason and never repeats
// the params.
func FuzzDecide(f *testing.F) {
	f.Add([]byte(call("search")), "2025-11-25", "POST", "application/json", true)
	f.Add([]byte(batch(listBody, call("search"))), "2025-03-26", "POST", "application/json", true)
	f.Add([]byte(initBody), "", "POST", "application/json", true)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"reports.list"}`), "", "POST", "application/json-rpc", false)
	f.Add([]byte(""), "2025-11-25", "GET", "", true)
	mcpEP := mcpEndpoint(f, "protocol: mcp", "mcp: {versions: [2025-03-26, 2025-11-25]}",
		"rules: [{allow: {method: initialize}}, {allow: {method: tools/list}}, {allow: {method: tools/call, tool: \"se*\"}}]",
		"deny_rules: [{method: tools/call, tool: secret}]")
	rpcEP := mcpEndpoint(f, "protocol: json-rpc", "rules: [{allow: {method: reports.list}}]")
	f.Fuzz(func(t *testing.T, body []byte, version, method, ctype string, mcp bool) {
		ep := rpcEP
		if mcp {
			ep = mcpEP
		}
		h := http.Header{"Accept": {"text/event-stream"}}
		if version != "" {
			h.Set(VersionField, version)
		}
		if ctype != "" {
			h.Set("Content-Type", ctype)
		}
		d := Decide(ep, &Request{Method: method, Field: h.Values, Body: body})
		if !d.Allowed {
			if d.Status < 400 || d.Status > 499 || d.Reason == "" {
				t.Fatalf("refusal without status or reason: %+v", d)
			}
			return
		}
		if mcp && d.Version != "" && !strings.Contains(strings.Join(mcpEP.MCP.Versions, ","), d.Version) {
			t.Fatalf("allowed under revision %q", d.Version)
		}
		if method == "GET" {
			return
		}
		b, err := Parse(body, mcp)
		if err != nil {
			t.Fatalf("allowed %q, which does not parse: %v", body, err)
		}
		for _, m := range b.Messages {
			if m.Kind == KindResponse {
				continue
			}
			if ok, why := Allows(ep, m); !ok {
				t.Fatalf("allowed %q, whose call %+v the rules refuse (%s)", body, m, why)
			}
		}
	})
}
