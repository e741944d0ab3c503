package graphql

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

func TestParseDocument(t *testing.T) {
	for _, tc := range []struct {
		name, doc, opName string
		hasName           bool
		want              Operation
		err               error // nil: accepted
	}{
		{"shorthand query", "{ viewer { login } }", "", false, Operation{Type: "query"}, nil},
		{"named query", "query Viewer { viewer { login } }", "", false, Operation{Type: "query", Name: "Viewer"}, nil},
		{"mutation", "mutation AddStar($id: ID!) { addStar(input: {starrableId: $id}) { clientMutationId } }", "", false, Operation{Type: "mutation", Name: "AddStar"}, nil},
		{"subscription", "subscription { messageAdded { id } }", "", false, Operation{Type: "subscription"}, nil},
		{"selected by name", "query A { a } mutation B { b }", "B", true, Operation{Type: "mutation", Name: "B"}, nil},
		{"fragments", "query Q { ...F } fragment F on Query { a }", "", false, Operation{Type: "query", Name: "Q"}, nil},
		{"comments and description", "# c\n\"describe\" mutation M { m }", "", false, Operation{Type: "mutation", Name: "M"}, nil},

		{"several without a name", "query A { a } mutation B { b }", "", false, Operation{}, ErrAmbiguous},
		{"anonymous beside a named", "{ a } mutation B { b }", "B", true, Operation{}, ErrAmbiguous},
		{"two of one name", "query A { a } mutation A { b }", "A", true, Operation{}, ErrAmbiguous},
		{"name not found", "query A { a }", "B", true, Operation{}, ErrInvalid},
		{"empty operationName", "query A { a }", "", true, Operation{}, ErrInvalid},
		{"no operation", "fragment F on Query { a }", "", false, Operation{}, ErrInvalid},
		{"type system", "type Query { a: Int }", "", false, Operation{}, ErrInvalid},
		{"syntax error", "mutation {", "", false, Operation{}, ErrInvalid},
		{"comment only", "# nothing", "", false, Operation{}, ErrInvalid},
		{"keyword case", "Mutation M { a }", "", false, Operation{}, ErrInvalid},
		{"too deep", strings.Repeat("{a", 1200) + strings.Repeat("}", 1200), "", false, Operation{}, ErrInvalid},
		{"too many tokens", "{" + strings.Repeat(" a", MaxTokens) + "}", "", false, Operation{}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, err := ParseDocument(tc.doc, tc.opName, tc.hasName)
			switch {
			case tc.err == nil && err != nil:
				t.Fatal(err)
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("got %+v, %v; want %v", op, err, tc.err)
			case op != tc.want:
				t.Fatalf("operation %+v, want %+v", op, tc.want)
			}
		})
	}
}

func endpoint(t testing.TB, lines ...string) *policy.Endpoint {
	t.Helper()
	src := "version: 1\nnetwork_policies:\n  g:\n    binaries: [{path: /usr/bin/node}]\n    endpoints:\n      - host: api.example.test\n        port: 443\n        protocol: graphql\n"
	for _, l := range lines {
		src += "        " + l + "\n"
	}
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return p.NetworkPolicies["g"].Endpoints[0]
}

func jsonPost(v any, fields ...string) *Request {
	b, _ := json.Marshal(v)
	return rawPost(string(b), "application/json", fields...)
}

func rawPost(body, ctype string, fields ...string) *Request {
	h := http.Header{}
	if ctype != "" {
		h.Set("Content-Type", ctype)
	}
	q := url.Values{}
	for i := 0; i+1 < len(fields); i += 2 {
		if strings.HasPrefix(fields[i], "?") {
			q.Add(fields[i][1:], fields[i+1])
			continue
		}
		h.Add(fields[i], fields[i+1])
	}
	return &Request{Method: "POST", Query: q, Field: h.Values, Body: []byte(body)}
}

func get(q url.Values) *Request {
	return &Request{Method: "GET", Query: q, Field: http.Header{}.Values}
}

type env = map[string]any

func sha(doc string) string {
	s := sha256.Sum256([]byte(doc))
	return hex.EncodeToString(s[:])
}

func TestDecide(t *testing.T) {
	readOnly := endpoint(t, "access: read-only")
	readWrite := endpoint(t, "access: read-write", "deny_rules: [{operation_type: mutation, operation_name: \"Delete*\"}]")
	rules := endpoint(t, "rules: [{allow: {operation_type: query}}, {allow: {operation_type: mutation, operation_name: \"Issue*\"}}]")
	registered := endpoint(t, "access: read-only", "persisted_queries: allow_registered",
		"graphql_persisted_queries: {abc123: {operation_type: query, operation_name: Viewer}, def456: {operation_type: mutation}}")
	batched := endpoint(t, "access: read-only", "graphql_max_batch_size: 2")
	audit := endpoint(t, "access: read-only", "enforcement: audit")
	apq := "query Viewer { viewer { login } }"
	for _, tc := range []struct {
		name   string
		ep     *policy.Endpoint
		req    *Request
		reason string // "": allowed
		status int
		opType string
	}{
		{"query allowed read-only", readOnly, jsonPost(env{"query": "{ viewer { login } }"}), "", 0, "query"},
		{"mutation refused read-only", readOnly, jsonPost(env{"query": "mutation { addStar(input: {}) { x } }"}), policy.L7AccessDenied, 403, "mutation"},
		{"subscription refused read-only", readOnly, jsonPost(env{"query": "subscription { s }"}), policy.L7AccessDenied, 403, "subscription"},
		{"subscription refused read-write", readWrite, jsonPost(env{"query": "subscription { s }"}), policy.L7AccessDenied, 403, "subscription"},
		{"mutation allowed read-write", readWrite, jsonPost(env{"query": "mutation AddStar { a }"}), "", 0, "mutation"},
		{"deny rule by name", readWrite, jsonPost(env{"query": "mutation DeleteRepo { d }"}), policy.L7DeniedByRule, 403, "mutation"},
		{"rule by name", rules, jsonPost(env{"query": "mutation IssueCreate { i }", "operationName": "IssueCreate"}), "", 0, "mutation"},
		{"rule name mismatch", rules, jsonPost(env{"query": "mutation RepoCreate { i }"}), policy.L7NoRuleMatched, 403, "mutation"},
		{"anonymous mutation has no name", rules, jsonPost(env{"query": "mutation { i }"}), policy.L7NoRuleMatched, 403, "mutation"},
		{"selected mutation refused", readOnly, jsonPost(env{"query": "query A { a } mutation B { b }", "operationName": "B"}), policy.L7AccessDenied, 403, "mutation"},
		{"several without a name", readOnly, jsonPost(env{"query": "query A { a } mutation B { b }"}), policy.GraphQLOperationAmbiguous, 400, ""},
		{"null members", readOnly, jsonPost(env{"query": "{ a }", "operationName": nil, "variables": nil, "extensions": nil}), "", 0, "query"},

		{"GET query", readOnly, get(url.Values{"query": {"{ a }"}}), "", 0, "query"},
		{"GET mutation", readOnly, get(url.Values{"query": {"mutation { a }"}}), policy.L7AccessDenied, 403, "mutation"},
		{"GET with name", readOnly, get(url.Values{"query": {"query A { a } mutation B { b }"}, "operationName": {"A"}}), "", 0, "query"},
		{"GET repeated query", readOnly, get(url.Values{"query": {"{ a }", "mutation { b }"}}), policy.GraphQLInvalid, 400, ""},
		{"GET folded parameter", readOnly, get(url.Values{"query": {"{ a }"}, "Query": {"mutation { b }"}}), policy.GraphQLInvalid, 400, ""},
		{"GET bracket parameter", readOnly, get(url.Values{"query": {"{ a }"}, "query[]": {"mutation { b }"}}), policy.GraphQLInvalid, 400, ""},
		{"GET without a document", readOnly, get(url.Values{}), policy.GraphQLInvalid, 400, ""},
		{"GET unrelated parameter", readOnly, get(url.Values{"query": {"{ a }"}, "cache": {"1"}}), "", 0, "query"},
		{"GET with a body", readOnly, &Request{Method: "GET", Query: url.Values{"query": {"{ a }"}}, Field: http.Header{}.Values, Body: []byte("mutation { b }")}, policy.GraphQLInvalid, 400, ""},

		{"application/graphql body", readOnly, rawPost("{ a }", "application/graphql"), "", 0, "query"},
		{"application/graphql mutation", readOnly, rawPost("mutation { a }", "application/graphql"), policy.L7AccessDenied, 403, "mutation"},
		{"application/graphql with a name in the URL", readOnly, rawPost("query A { a } mutation B { b }", "application/graphql", "?operationName", "B"), policy.L7AccessDenied, 403, "mutation"},
		{"application/graphql with a query in the URL", readOnly, rawPost("{ a }", "application/graphql", "?query", "mutation { b }"), policy.GraphQLInvalid, 400, ""},
		{"JSON POST with a query in the URL", readOnly, jsonPost(env{"query": "{ a }"}, "?query", "mutation { b }"), policy.GraphQLInvalid, 400, ""},
		{"JSON POST with a name in the URL", readOnly, jsonPost(env{"query": "query A { a } mutation B { b }", "operationName": "A"}, "?operationName", "B"), policy.GraphQLInvalid, 400, ""},
		{"form body", readOnly, rawPost("query=%7Ba%7D", "application/x-www-form-urlencoded"), policy.L7UnsupportedBody, 415, ""},
		{"multipart body", readOnly, rawPost("--x\r\n", "multipart/form-data; boundary=x"), policy.L7UnsupportedBody, 415, ""},
		{"no content type", readOnly, rawPost(`{"query":"{ a }"}`, ""), policy.L7UnsupportedBody, 415, ""},
		{"gzip", readOnly, rawPost(`{"query":"{ a }"}`, "application/json", "Content-Encoding", "gzip"), policy.L7UnsupportedBody, 415, ""},
		{"method override", readOnly, jsonPost(env{"query": "{ a }"}, "X-HTTP-Method-Override", "DELETE"), policy.L7MethodOverride, 400, ""},
		{"_method parameter", readOnly, get(url.Values{"query": {"{ a }"}, "_method": {"POST"}}), policy.L7MethodOverride, 400, ""},
		{"PUT", readOnly, &Request{Method: "PUT", Field: http.Header{}.Values}, policy.L7HTTPMethod, 405, ""},
		{"too large", readOnly, &Request{Method: "POST", Field: http.Header{"Content-Type": {"application/json"}}.Values, Body: []byte(`{"query":"{`), TooLarge: true}, policy.L7BodyTooLarge, 413, ""},

		{"member in another case", readOnly, rawPost(`{"query":"{ a }","QUERY":"mutation { b }"}`, "application/json"), policy.GraphQLInvalid, 400, ""},
		{"duplicate member", readOnly, rawPost(`{"query":"{ a }","query":"mutation { b }"}`, "application/json"), policy.GraphQLInvalid, 400, ""},
		{"unknown member", readOnly, rawPost(`{"query":"{ a }","document":"mutation { b }"}`, "application/json"), policy.GraphQLInvalid, 400, ""},
		{"query not a string", readOnly, rawPost(`{"query":{"a":1}}`, "application/json"), policy.GraphQLInvalid, 400, ""},
		{"trailing data", readOnly, rawPost(`{"query":"{ a }"} x`, "application/json"), policy.GraphQLInvalid, 400, ""},

		{"hash only refused by default", readOnly, jsonPost(env{"extensions": env{"persistedQuery": env{"version": 1, "sha256Hash": "abc123"}}}), policy.GraphQLPersistedQuery, 403, ""},
		{"id only refused by default", readOnly, jsonPost(env{"id": "abc123"}), policy.GraphQLPersistedQuery, 403, ""},
		{"doc_id refused by default", readOnly, jsonPost(env{"doc_id": "123"}), policy.GraphQLPersistedQuery, 403, ""},
		{"GET hash refused", readOnly, get(url.Values{"extensions": {`{"persistedQuery":{"version":1,"sha256Hash":"abc123"}}`}}), policy.GraphQLPersistedQuery, 403, ""},
		{"registered query allowed", registered, jsonPost(env{"extensions": env{"persistedQuery": env{"version": 1, "sha256Hash": "abc123"}}}), "", 0, "query"},
		{"registered GET allowed", registered, get(url.Values{"extensions": {`{"persistedQuery":{"version":1,"sha256Hash":"abc123"}}`}}), "", 0, "query"},
		{"registered mutation refused read-only", registered, jsonPost(env{"id": "def456"}), policy.L7AccessDenied, 403, "mutation"},
		{"unregistered hash", registered, jsonPost(env{"extensions": env{"persistedQuery": env{"sha256Hash": "fff"}}}), policy.GraphQLPersistedQuery, 403, ""},
		{"document with its hash", readOnly, jsonPost(env{"query": apq, "extensions": env{"persistedQuery": env{"version": 1, "sha256Hash": sha(apq)}}}), "", 0, "query"},
		{"document with another hash", readOnly, jsonPost(env{"query": apq, "extensions": env{"persistedQuery": env{"version": 1, "sha256Hash": sha("x")}}}), policy.GraphQLInvalid, 400, ""},
		{"empty query and a hash", readOnly, jsonPost(env{"query": "", "extensions": env{"persistedQuery": env{"sha256Hash": "abc123"}}}), policy.GraphQLPersistedQuery, 403, ""},

		{"batch refused by default", readOnly, jsonPost([]env{{"query": "{ a }"}}), policy.GraphQLBatchRefused, 403, "query"},
		{"batch within the bound", batched, jsonPost([]env{{"query": "{ a }"}, {"query": "{ b }"}}), "", 0, "query"},
		{"batch over the bound", batched, jsonPost([]env{{"query": "{ a }"}, {"query": "{ b }"}, {"query": "{ c }"}}), policy.GraphQLBatchRefused, 403, "query"},
		{"batch with a mutation", batched, jsonPost([]env{{"query": "{ a }"}, {"query": "mutation { b }"}}), policy.L7AccessDenied, 403, "mutation"},
		{"empty batch", batched, rawPost(`[]`, "application/json"), policy.GraphQLInvalid, 400, ""},

		{"audit: access refusal is soft", audit, jsonPost(env{"query": "mutation { b }"}), policy.L7AccessDenied, 403, "mutation"},
		{"audit: unreadable is hard", audit, rawPost(`{`, "application/json"), policy.GraphQLInvalid, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.ep, tc.req)
			if d.Allowed != (tc.reason == "") || !d.Allowed && (d.Reason != tc.reason || d.Status != tc.status) {
				t.Fatalf("decision %+v, want reason %q status %d", d, tc.reason, tc.status)
			}
			if (d.Rule != "") != (d.Reason == policy.L7DeniedByRule) {
				t.Errorf("rule %q for reason %q", d.Rule, d.Reason)
			}
			if d.OperationType != tc.opType {
				t.Errorf("operation type %q, want %q", d.OperationType, tc.opType)
			}
		})
	}
}
