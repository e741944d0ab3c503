package jsonrpc

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// body is an l7.Body holding b, or failing with err.
type body struct {
	b   []byte
	err error
}

func (x body) ReadAll(max int64) ([]byte, error) {
	switch {
	case x.err != nil:
		return nil, x.err
	case int64(len(x.b)) > max:
		return nil, l7.ErrBodyTooLarge
	}
	return x.b, nil
}

func (x body) Length() int64 { return int64(len(x.b)) }

// The inspector maps Decide onto l7.Decision: allowed, a policy denial
// (403: Status 0, reason and rule), or an invalid request with its own
// status; an upgrade and a body the client did not finish are refused.
func TestInspector(t *testing.T) {
	ep := mcpEndpoint(t, "protocol: mcp", "mcp: {max_body_bytes: 200}", `rules: [{allow: {method: tools/call, tool: "read_*"}}]`, `deny_rules: [{method: tools/call, tool: read_secrets}]`)
	in, err := New(ep)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Content-Type": {"application/json"}, "Mcp-Protocol-Version": {"2025-11-25"}}
	req := func(b body, upgrade string) *l7.Request {
		return &l7.Request{Method: "POST", Field: folded(h), Body: b, Upgrade: upgrade}
	}
	named := func(d l7.Decision, method, tool string) l7.Decision {
		d.Call = l7.Call{Method: method, Tool: tool}
		return d
	}
	for _, c := range []struct {
		name string
		r    *l7.Request
		want l7.Decision
	}{
		{"allowed", req(body{b: []byte(call("read_file"))}, ""), named(l7.Allowed(), "tools/call", "read_file")},
		{"deny rule", req(body{b: []byte(call("read_secrets"))}, ""), named(l7.Denied(policy.L7DeniedByRule, "deny_rules[0]"), "tools/call", "read_secrets")},
		{"no rule", req(body{b: []byte(call("write_file"))}, ""), named(l7.Denied(policy.L7NoRuleMatched, ""), "tools/call", "write_file")},
		{"other method", req(body{b: []byte(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///x"}}`)}, ""), named(l7.Denied(policy.L7NoRuleMatched, ""), "resources/read", "")},
		{"invalid tool", req(body{b: []byte(call("read file\n"))}, ""), named(l7.Denied(policy.MCPToolNameInvalid, ""), "tools/call", l7.InvalidName)},
		{"too large", req(body{b: make([]byte, 201)}, ""), l7.Decision{Reason: policy.L7BodyTooLarge, Status: 413}},
		{"unfinished", req(body{err: errors.New("unexpected EOF")}, ""), l7.Decision{Reason: policy.JSONRPCInvalid, Status: 400}},
		{"upgrade", req(body{}, "websocket"), l7.Decision{Reason: policy.L7HTTPMethod, Status: 405}},
	} {
		d := in.Request(c.r)
		d.Detail = ""
		if d != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, d, c.want)
		}
	}
	for _, bad := range []*policy.Endpoint{{Protocol: policy.ProtocolREST}, {Protocol: policy.ProtocolMCP}} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v) built an inspector", bad)
		}
	}
}

// The event's call (l7.Decision.Call) names the method and tool the
// decision rests on — the refused batch member, else the first call —
// and quotes a name the client sent only when it is short printable
// ASCII (a tool only in the recommended syntax), never a placeholder,
// params or arguments.
func TestInspectorCall(t *testing.T) {
	lax := mcpEndpoint(t, "protocol: mcp", "mcp: {strict_tool_names: false, versions: [2025-03-26]}", `rules: [{allow: {method: tools/call, tool: "read_file"}}]`, `deny_rules: [{method: tools/call, tool: read_secrets}]`)
	rpc := mcpEndpoint(t, "protocol: json-rpc", "rules: [{allow: {method: a}}]")
	long := strings.Repeat("m", l7.MaxEventName+1)
	for _, c := range []struct {
		name string
		ep   *policy.Endpoint
		body string
		want l7.Call
	}{
		{"batch refused member", lax, batch(call("read_file"), call("read_secrets")), l7.Call{Method: "tools/call", Tool: "read_secrets"}},
		{"tool with a space", lax, call("read file"), l7.Call{Method: "tools/call", Tool: l7.InvalidName}},
		{"tool with a control byte", lax, call("read\u0007"), l7.Call{Method: "tools/call", Tool: l7.InvalidName}},
		{"tool of 129 bytes", lax, call(strings.Repeat("t", 129)), l7.Call{Method: "tools/call", Tool: l7.InvalidName}},
		{"tool of 128 bytes", lax, call(strings.Repeat("t", 128)), l7.Call{Method: "tools/call", Tool: strings.Repeat("t", 128)}},
		{"method with a space", rpc, `{"jsonrpc":"2.0","id":1,"method":"a b"}`, l7.Call{Method: l7.InvalidName}},
		{"method non-ASCII", rpc, `{"jsonrpc":"2.0","id":1,"method":"caf\u00e9"}`, l7.Call{Method: l7.InvalidName}},
		{"method with a newline", rpc, `{"jsonrpc":"2.0","id":1,"method":"a\nb"}`, l7.Call{Method: l7.InvalidName}},
		{"method too long", rpc, `{"jsonrpc":"2.0","id":1,"method":"` + long + `"}`, l7.Call{Method: l7.InvalidName}},
		{"method a placeholder", rpc, `{"jsonrpc":"2.0","id":1,"method":"openshell:resolve:env:GH_TOKEN"}`, l7.Call{Method: l7.InvalidName}},
		{"method printable", rpc, `{"jsonrpc":"2.0","id":1,"method":"rpc.discover","params":{"token":"s3cret"}}`, l7.Call{Method: "rpc.discover"}},
	} {
		in, err := New(c.ep)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{"Content-Type": {"application/json"}, "Mcp-Protocol-Version": {"2025-03-26"}}
		d := in.Request(&l7.Request{Method: "POST", Field: folded(h), Body: body{b: []byte(c.body)}})
		if d.Allow || d.Call != c.want {
			t.Errorf("%s: allow %v, call %+v, want a refusal naming %+v", c.name, d.Allow, d.Call, c.want)
		}
	}
}
