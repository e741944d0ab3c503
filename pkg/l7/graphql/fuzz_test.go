package graphql

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
)

// goServerEnvelope is how a Go server on encoding/json (gqlgen's
// RawParams) reads an envelope: member names case-insensitively, the
// last one winning.
type goServerEnvelope struct {
	Query         string `json:"query"`
	OperationName string `json:"operationName"`
}

// FuzzParseJSON: ParseJSON never panics, and an envelope it accepts is
// read by a Go server (case-insensitive names) and a JavaScript one
// (exact names) as the same document and operation name, so the
// operation decided is the one that runs.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`{"query":"{ a }"}`,
		`{"query":"query A { a } mutation B { b }","operationName":"B"}`,
		`[{"query":"{ a }"},{"query":"mutation { b }"}]`,
		`{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"abc"}}}`,
		`{"query":"{ a }","QUERY":"mutation { b }"}`,
		`{"doc_id":"1","variables":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, batch, err := ParseJSON(body)
		if err != nil {
			return
		}
		var raws []json.RawMessage
		if batch {
			if err := json.Unmarshal(body, &raws); err != nil {
				t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
			}
		} else {
			raws = []json.RawMessage{body}
		}
		if len(raws) != len(ops) {
			t.Fatalf("%q: %d operations of %d envelopes", body, len(ops), len(raws))
		}
		for i, raw := range raws {
			var goEnv goServerEnvelope
			var jsEnv map[string]any
			if json.Unmarshal(raw, &goEnv) != nil || json.Unmarshal(raw, &jsEnv) != nil {
				t.Fatalf("accepted %q, which encoding/json refuses", raw)
			}
			jsQuery, _ := jsEnv["query"].(string)
			jsName, _ := jsEnv["operationName"].(string)
			if goEnv.Query != jsQuery || goEnv.OperationName != jsName {
				t.Fatalf("%q: a Go server reads %q/%q, a JavaScript one %q/%q", raw, goEnv.Query, goEnv.OperationName, jsQuery, jsName)
			}
			if ops[i].Persisted != "" {
				continue
			}
			_, hasName := jsEnv["operationName"].(string)
			op, err := ParseDocument(jsQuery, jsName, hasName)
			if err != nil || op != ops[i] {
				t.Fatalf("%q: decided %+v, the server's reading is %+v (%v)", raw, ops[i], op, err)
			}
		}
	})
}

// FuzzParseDocument: ParseDocument never panics, and what it returns is
// an operation of a known type that the document really holds.
func FuzzParseDocument(f *testing.F) {
	f.Add("{ a }", "", false)
	f.Add("query A { a } mutation B { b }", "B", true)
	f.Add("subscription S { s } fragment F on T { x }", "", false)
	f.Add("mutation", "", false)
	f.Fuzz(func(t *testing.T, doc, name string, hasName bool) {
		op, err := ParseDocument(doc, name, hasName)
		if err != nil {
			return
		}
		switch op.Type {
		case "query", "mutation", "subscription":
		default:
			t.Fatalf("%q: type %q", doc, op.Type)
		}
		if hasName && op.Name != name {
			t.Fatalf("%q: asked for %q, got %q", doc, name, op.Name)
		}
	})
}

// FuzzDecide: Decide never panics; an allowed request's operations are
// each allowed by the rules, and a refusal has a reason.
func FuzzDecide(f *testing.F) {
	f.Add("POST", "application/json", []byte(`{"query":"{ a }"}`), "")
	f.Add("POST", "application/graphql", []byte(`mutation { a }`), "operationName=X")
	f.Add("GET", "", []byte(nil), "query=%7Ba%7D")
	f.Add("POST", "application/json", []byte(`[{"id":"abc123"},{"query":"{ b }"}]`), "")
	ep := endpoint(f, "rules: [{allow: {operation_type: query}}, {allow: {operation_type: mutation, operation_name: \"Issue*\"}}]",
		"deny_rules: [{operation_type: \"*\", operation_name: Admin*}]", "persisted_queries: allow_registered",
		"graphql_persisted_queries: {abc123: {operation_type: query}}", "graphql_max_batch_size: 3")
	f.Fuzz(func(t *testing.T, method, ctype string, body []byte, rawQuery string) {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return
		}
		h := http.Header{}
		if ctype != "" {
			h.Set("Content-Type", ctype)
		}
		d := Decide(ep, &Request{Method: method, Query: q, Field: h.Values, Body: body})
		if !d.Allowed {
			if d.Reason == "" || d.Status < 400 || d.Status > 499 {
				t.Fatalf("refusal without reason: %+v", d)
			}
			return
		}
		ops, _, fail := operations(&Request{Method: method, Query: q, Field: h.Values, Body: body})
		if fail != nil {
			t.Fatalf("allowed, but the operations do not read: %+v", fail)
		}
		for _, op := range ops {
			if op.Persisted != "" {
				reg := ep.GraphQLPersistedQueries[op.Persisted]
				op.Type, op.Name = reg.OperationType, reg.OperationName
			}
			if ok, why := Allows(ep, op); !ok {
				t.Fatalf("allowed %q, whose operation %+v the rules refuse (%s)", body, op, why)
			}
		}
	})
}
