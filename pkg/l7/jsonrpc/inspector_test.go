package jsonrpc

import (
	"errors"
	"net/http"
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
	for _, c := range []struct {
		name string
		r    *l7.Request
		want l7.Decision
	}{
		{"allowed", req(body{b: []byte(call("read_file"))}, ""), l7.Allowed()},
		{"deny rule", req(body{b: []byte(call("read_secrets"))}, ""), l7.Denied(policy.L7DeniedByRule, "deny_rules[0]")},
		{"no rule", req(body{b: []byte(call("write_file"))}, ""), l7.Denied(policy.L7NoRuleMatched, "")},
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
