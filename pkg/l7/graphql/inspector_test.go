package graphql

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

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

// The inspector maps Decide onto l7.Decision and refuses upgrades
// (GraphQL over WebSocket is not read) and unfinished bodies.
func TestInspector(t *testing.T) {
	ep := endpoint(t, "access: read-only", "graphql_max_body_bytes: 200", `deny_rules: [{operation_type: query, operation_name: "Admin*"}]`)
	in, err := New(ep)
	if err != nil {
		t.Fatal(err)
	}
	j := func(b body) *l7.Request {
		return &l7.Request{Method: "POST", Query: url.Values{}, Field: func(n string) []string { return http.Header{"Content-Type": {"application/json"}}.Values(n) }, Body: b}
	}
	op := func(d l7.Decision, typ, name string) l7.Decision {
		d.Call = l7.Call{OperationType: typ, OperationName: name}
		return d
	}
	up := j(body{})
	up.Method, up.Upgrade, up.Field = "GET", "websocket", func(string) []string { return nil }
	for _, c := range []struct {
		name string
		r    *l7.Request
		want l7.Decision
	}{
		{"query", j(body{b: []byte(`{"query":"{ a }"}`)}), op(l7.Allowed(), "query", "")},
		{"mutation", j(body{b: []byte(`{"query":"mutation DropAll { a }"}`)}), op(l7.Denied(policy.L7AccessDenied, ""), "mutation", "DropAll")},
		{"deny rule", j(body{b: []byte(`{"query":"query AdminX { a }"}`)}), op(l7.Denied(policy.L7DeniedByRule, "deny_rules[0]"), "query", "AdminX")},
		{"name of 128 bytes", j(body{b: []byte(`{"query":"mutation ` + strings.Repeat("N", 128) + ` { a }"}`)}), op(l7.Denied(policy.L7AccessDenied, ""), "mutation", strings.Repeat("N", 128))},
		{"name too long", j(body{b: []byte(`{"query":"mutation ` + strings.Repeat("N", 129) + ` { a }"}`)}), op(l7.Denied(policy.L7AccessDenied, ""), "mutation", l7.InvalidName)},
		{"too large", j(body{b: make([]byte, 201)}), l7.Decision{Reason: policy.L7BodyTooLarge, Status: 413}},
		{"unfinished", j(body{err: errors.New("unexpected EOF")}), l7.Decision{Reason: policy.GraphQLInvalid, Status: 400}},
		{"upgrade", up, l7.Decision{Reason: policy.L7HTTPMethod, Status: 405}},
	} {
		d := in.Request(c.r)
		d.Detail = ""
		if d != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, d, c.want)
		}
	}
	if _, err := New(&policy.Endpoint{Protocol: policy.ProtocolREST}); err == nil {
		t.Error("New built an inspector for a rest endpoint")
	}
}
