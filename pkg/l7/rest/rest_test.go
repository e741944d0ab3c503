package rest

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// checkPath decides method and the escaped path (with an optional query
// and header fields) against ep.
func checkPath(t *testing.T, ep *policy.Endpoint, method, target string, fields http.Header) (bool, string) {
	t.Helper()
	rawPath, rawQuery, _ := strings.Cut(target, "?")
	p, err := l7.ParsePath(rawPath)
	if err != nil {
		t.Fatalf("ParsePath(%q): %v", rawPath, err)
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		t.Fatalf("query %q: %v", rawQuery, err)
	}
	if fields == nil {
		fields = http.Header{}
	}
	return Check(ep, &l7.Request{Method: method, Path: &p, Query: q, Field: l7.FieldValues(fields)})
}

// Refuse ambiguity only when it changes the decision: a path that
// servers read in several ways is decided under each reading; the
// common decision applies, and readings decided differently are refused
// as l7_ambiguous_path.
func TestCheckReadings(t *testing.T) {
	npm := &policy.Endpoint{Access: policy.AccessReadOnly}
	secret := &policy.Endpoint{Access: policy.AccessReadOnly, DenyRules: []policy.RequestMatch{{Method: "GET", Path: "/@scope/secret-pkg"}}}
	public := &policy.Endpoint{Rules: []policy.Rule{{Allow: policy.RequestMatch{Method: "GET", Path: "/public/**"}}}}
	admin := &policy.Endpoint{Access: policy.AccessReadOnly, DenyRules: []policy.RequestMatch{{Method: "*", Path: "/admin/**"}}}
	full := &policy.Endpoint{Access: policy.AccessFull}
	scopes := &policy.Endpoint{Rules: []policy.Rule{
		{Allow: policy.RequestMatch{Method: "GET", Path: "/@types/**"}},
		{Allow: policy.RequestMatch{Method: "GET", Path: "/left-pad"}},
		{Allow: policy.RequestMatch{Method: "GET", Path: "/left-pad/-/*"}},
	}}
	for _, c := range []struct {
		name   string
		ep     *policy.Endpoint
		method string
		target string
		ok     bool
		reason string
	}{
		// npm asks for a scoped package's metadata with an encoded "/":
		// both readings are a GET, read-only allows both.
		{"scoped package", npm, "GET", "/@types%2fnode", true, ""},
		{"scoped package upper", npm, "GET", "/@modelcontextprotocol%2Fsdk", true, ""},
		{"scoped tarball", npm, "GET", "/@types/node/-/node-20.0.0.tgz", true, ""},
		{"publish", npm, "PUT", "/@scope%2fpkg", false, policy.L7AccessDenied},
		// A deny rule written for the decoded path refuses the encoded
		// spelling: both readings are denied, by the rule.
		{"denied scoped package", secret, "GET", "/@scope%2fsecret-pkg", false, policy.L7DeniedByRule},
		{"denied scoped package literal", secret, "GET", "/@scope/secret-pkg", false, policy.L7DeniedByRule},
		{"denied scoped package upper", secret, "GET", "/@scope%2Fsecret-pkg", false, policy.L7DeniedByRule},
		{"other scoped package", secret, "GET", "/@scope%2fother-pkg", true, ""},
		// The narrowed npm rules of docs/policy.md.
		{"scope allowed by a rule", scopes, "GET", "/@types%2fnode", true, ""},
		{"scope tarball allowed by a rule", scopes, "GET", "/@types/node/-/node-20.0.0.tgz", true, ""},
		{"unscoped allowed by a rule", scopes, "GET", "/left-pad", true, ""},
		{"other scope", scopes, "GET", "/@other%2fpkg", false, policy.L7NoRuleMatched},
		{"other package", scopes, "GET", "/right-pad", false, policy.L7NoRuleMatched},
		// Readings that differ: refused as ambiguous.
		{"encoded slash climbs out of an allowed prefix", public, "GET", "/public/..%2fadmin", false, policy.L7AmbiguousPath},
		{"encoded dots climb out", public, "GET", "/public/%2e%2e/admin", false, policy.L7AmbiguousPath},
		{"backslash climbs out", public, "GET", `/public/..\admin`, false, policy.L7AmbiguousPath},
		{"path parameter climbs out", public, "GET", "/public/..;/admin", false, policy.L7AmbiguousPath},
		{"double encoding climbs out", public, "GET", "/public/..%252fadmin", false, policy.L7AmbiguousPath},
		{"encoded slash climbs into a denied prefix", admin, "GET", "/x/..%2fadmin/users", false, policy.L7AmbiguousPath},
		{"path parameter hides a denied prefix", admin, "GET", "/admin;x/users", false, policy.L7AmbiguousPath},
		{"trailing dot hides a denied prefix", admin, "GET", "/admin./users", false, policy.L7AmbiguousPath},
		{"trailing space hides a denied prefix", admin, "GET", "/admin%20/users", false, policy.L7AmbiguousPath},
		// Readings that agree.
		{"encoded slash inside an allowed prefix", public, "GET", "/public/a%2fb", true, ""},
		{"climbing out of nothing under full access", full, "DELETE", "/x/..%2f..%2f;x/y", true, ""},
		{"every reading denied", public, "GET", "/private/..%2fsecret", false, policy.L7NoRuleMatched},
		{"denied method whatever the reading", admin, "DELETE", "/x/..%2fy", false, policy.L7AccessDenied},
		// Bytes outside ASCII: refused as ambiguous when a rule's path
		// could tell readings apart, decided as sent otherwise.
		{"long s under a deny rule", admin, "GET", "/%C5%BFecret", false, policy.L7AmbiguousPath},
		{"long s under an allow rule", public, "GET", "/public/%C5%BF", false, policy.L7AmbiguousPath},
		{"long s refused anyway", public, "GET", "/%C5%BF", false, policy.L7NoRuleMatched},
		{"long s under access only", npm, "GET", "/%C5%BFecret", true, ""},
		{"non-ASCII under a rule for another method", admin, "POST", "/%C3%A9", false, policy.L7AccessDenied},
	} {
		ok, why := checkPath(t, c.ep, c.method, c.target, nil)
		if ok != c.ok || why != c.reason {
			t.Errorf("%s: %s %s = %v %q, want %v %q", c.name, c.method, c.target, ok, why, c.ok, c.reason)
		}
	}
}

// A method override spelt with "_" (WSGI and CGI read it as the "-"
// spelling) is read as the method.
func TestFoldedOverrideFields(t *testing.T) {
	ro := &policy.Endpoint{Access: policy.AccessReadOnly}
	for _, name := range []string{"X_HTTP_Method_Override", "x_http_method_override", "X-Http_Method-Override", "X_Method_Override", "X_HTTP_METHOD"} {
		h := http.Header{}
		h[name] = []string{"DELETE"} // as received: Go keeps a name with "_" as sent
		if ok, why := checkPath(t, ro, "GET", "/item", h); ok || why != policy.L7AccessDenied {
			t.Errorf("GET with %s: DELETE = %v %q, want refused", name, ok, why)
		}
	}
}

// Method overrides are decided under every reading too.
func TestCheckMethodOverride(t *testing.T) {
	ro := &policy.Endpoint{Access: policy.AccessReadOnly}
	for _, c := range []struct {
		target string
		fields http.Header
		ok     bool
	}{
		{"/x", http.Header{"X-Http-Method-Override": {"DELETE"}}, false},
		{"/x", http.Header{"X-Method-Override": {"get, put"}}, false},
		{"/x", http.Header{"X-Http-Method": {"GET"}}, true},
		{"/x?_method=DELETE", nil, false},
		{"/@a%2fb", http.Header{"X-Http-Method-Override": {"DELETE"}}, false},
		{"/x", http.Header{"X-Http-Method-Override": {""}}, false},
	} {
		if ok, _ := checkPath(t, ro, "GET", c.target, c.fields); ok != c.ok {
			t.Errorf("GET %s %v: %v, want %v", c.target, c.fields, ok, c.ok)
		}
	}
}

// Query parameter names servers read in other spellings: PHP's "_" for
// ".", " " and an unmatched "[", and trimmed names; decided under each,
// ambiguous when they disagree. Deny rules compare values in any case.
func TestCheckQueryReadings(t *testing.T) {
	q := func(m map[string]string) map[string]policy.QueryMatch {
		out := map[string]policy.QueryMatch{}
		for k, v := range m {
			out[k] = policy.QueryMatch{Any: []string{v}}
		}
		return out
	}
	denyPHP := &policy.Endpoint{Access: policy.AccessReadOnly, DenyRules: []policy.RequestMatch{{Method: "GET", Path: "/**", Query: q(map[string]string{"debug_": "true"})}}}
	denyDebug := &policy.Endpoint{Access: policy.AccessReadOnly, DenyRules: []policy.RequestMatch{{Method: "GET", Path: "/**", Query: q(map[string]string{"debug": "true"})}}}
	allowQ := &policy.Endpoint{Rules: []policy.Rule{{Allow: policy.RequestMatch{Method: "GET", Path: "/search", Query: q(map[string]string{"q": "palisade*"})}}}}
	ro := &policy.Endpoint{Access: policy.AccessReadOnly}
	for _, c := range []struct {
		name   string
		ep     *policy.Endpoint
		target string
		ok     bool
		reason string
	}{
		{"PHP reads debug. as debug_", denyPHP, "/x?debug.=true", false, policy.L7AmbiguousPath},
		{"PHP reads debug+ as debug_", denyPHP, "/x?debug+=true", false, policy.L7AmbiguousPath},
		{"PHP reads debug[ as debug_", denyPHP, "/x?debug%5B=true", false, policy.L7AmbiguousPath},
		{"the name itself", denyPHP, "/x?debug_=true", false, policy.L7DeniedByRule},
		{"trimmed debug+", denyDebug, "/x?debug+=true", false, policy.L7AmbiguousPath},
		{"trimmed debug.", denyDebug, "/x?debug.=true", false, policy.L7AmbiguousPath},
		{"deny value in another case", denyDebug, "/x?debug=TRUE", false, policy.L7DeniedByRule},
		{"other value", denyDebug, "/x?debug.=false", true, ""},
		{"allow rule values merged by a trimming server", allowQ, "/search?q=palisade&q.=secret", false, policy.L7AmbiguousPath},
		{"allow rule value case", allowQ, "/search?q=Palisade", false, policy.L7NoRuleMatched},
		{"allow rule", allowQ, "/search?q=palisade-sandbox&a.b=1", true, ""},
		{"no query rule", ro, "/x?a.b=1&c+=2", true, ""},
	} {
		ok, why := checkPath(t, c.ep, "GET", c.target, nil)
		if ok != c.ok || why != c.reason {
			t.Errorf("%s: GET %s = %v %q, want %v %q", c.name, c.target, ok, why, c.ok, c.reason)
		}
	}
}
