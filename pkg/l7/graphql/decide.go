package graphql

import (
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Request is what Decide reads of one HTTP request to a graphql
// endpoint.
type Request struct {
	Method string     // the HTTP method
	Query  url.Values // the parsed query string
	// Field returns a request header's values by name, every spelling
	// a server may fold to it included (l7.FieldValues).
	Field func(name string) []string
	// Body is the request body, read up to the endpoint's
	// GraphQLMaxBodyBytes; TooLarge says more was sent (or announced).
	Body     []byte
	TooLarge bool
}

// Decision is the verdict on one request.
type Decision struct {
	Allowed bool
	// Status is the refusal's HTTP status. 403 is a policy denial
	// (which enforcement: audit relays and logs): an operation the
	// rules refuse, a persisted query the endpoint does not register, a
	// batch it does not admit. Any other is a request the protocol
	// cannot accept, refused whatever the enforcement: 400 no operation
	// the proxy can read (or more than one it could be), 405 an HTTP
	// method other than GET and POST, 413 a body over the bound, 415 a
	// body neither JSON nor application/graphql, or encoded.
	Status int
	Reason string // a pkg/policy reason constant
	// Rule is the deny rule that refused ("deny_rules[1]"), "" when no
	// single rule did.
	Rule string
	// OperationType and OperationName name the operation the decision
	// rests on (the refused one, else the first); Persisted is its
	// hash or id when it was sent as one. Never variables or documents.
	OperationType, OperationName, Persisted string
	// Detail is a fixed sentence saying why, for the client and the
	// event: it never quotes the request.
	Detail string
}

func refuse(status int, reason, detail string) Decision {
	return Decision{Status: status, Reason: reason, Detail: detail}
}

// urlParams are the GraphQL parameters of a query string.
var urlParams = []string{"query", "operationName", "variables", "extensions", "id", "documentId", "queryId", "doc_id"}

// Decide judges one request to ep, a protocol graphql endpoint.
func Decide(ep *policy.Endpoint, r *Request) Decision {
	ops, batch, d := operations(r)
	if d != nil {
		return *d
	}
	if batch && len(ops) > ep.GraphQLMaxBatchSize {
		d := refuse(http.StatusForbidden, policy.GraphQLBatchRefused, "batch of more operations than graphql_max_batch_size (0: no batches)")
		d.OperationType, d.OperationName = ops[0].Type, clipName(ops[0].Name)
		return d
	}
	for i := range ops {
		op := &ops[i]
		if op.Persisted != "" {
			reg, ok := ep.GraphQLPersistedQueries[op.Persisted]
			if ep.PersistedQueries != policy.PersistedQueriesAllowRegistered || !ok {
				d := refuse(http.StatusForbidden, policy.GraphQLPersistedQuery, "a persisted query the policy does not register (its document cannot be read)")
				d.Persisted = clip(op.Persisted)
				return d
			}
			op.Type, op.Name = reg.OperationType, reg.OperationName
		}
		if ok, why, rule := decideOp(ep, *op); !ok {
			d := refuse(http.StatusForbidden, why, "")
			d.Rule = rule
			d.OperationType, d.OperationName, d.Persisted = op.Type, clipName(op.Name), clip(op.Persisted)
			return d
		}
	}
	return Decision{Allowed: true, OperationType: ops[0].Type, OperationName: clipName(ops[0].Name), Persisted: clip(ops[0].Persisted)}
}

// clipName bounds an operation name for the Decision: l7.MaxEventName
// bytes, a longer one cut with "..." (which l7.EventName then reports
// as invalid).
func clipName(s string) string {
	if len(s) > l7.MaxEventName {
		return s[:l7.MaxEventName] + "..."
	}
	return s
}

// operations reads the operations a request asks for.
func operations(r *Request) ([]Operation, bool, *Decision) {
	fail := func(err error) ([]Operation, bool, *Decision) {
		// The parsers' words may quote the request: the detail is fixed.
		d := refuse(http.StatusBadRequest, policy.GraphQLInvalid, "no GraphQL operation the proxy can read unambiguously (one document, known envelope members, GraphQL parameters in the URL or the body, not both)")
		if errors.Is(err, ErrAmbiguous) {
			d = refuse(http.StatusBadRequest, policy.GraphQLOperationAmbiguous, "the document holds several operations and no operationName naming exactly one")
		}
		return nil, false, &d
	}
	if policy.HasMethodOverride(r.Field, r.Query) {
		d := refuse(http.StatusBadRequest, policy.L7MethodOverride, "a method override is not read: send the request's own method")
		return nil, false, &d
	}
	if name, ok := foldedParam(r.Query); !ok {
		return fail(invalid("query parameter %q spells a GraphQL parameter another way", clip(name)))
	}
	switch r.Method {
	case http.MethodGet:
		if len(r.Body) > 0 || r.TooLarge {
			return fail(invalid("a GET with a body"))
		}
		op, err := parseGET(r.Query)
		if err != nil {
			return fail(err)
		}
		return []Operation{op}, false, nil
	case http.MethodPost:
	default:
		d := refuse(http.StatusMethodNotAllowed, policy.L7HTTPMethod, "GraphQL travels in GET and POST requests only")
		return nil, false, &d
	}
	for _, ce := range r.Field("Content-Encoding") {
		if !strings.EqualFold(strings.TrimSpace(ce), "identity") {
			d := refuse(http.StatusUnsupportedMediaType, policy.L7UnsupportedBody, "a Content-Encoding is not inspected")
			return nil, false, &d
		}
	}
	graphqlBody, ok := mediaType(r.Field("Content-Type"))
	if !ok {
		d := refuse(http.StatusUnsupportedMediaType, policy.L7UnsupportedBody, "Content-Type must be one application/json or application/graphql (UTF-8)")
		return nil, false, &d
	}
	if r.TooLarge {
		d := refuse(http.StatusRequestEntityTooLarge, policy.L7BodyTooLarge, "request body exceeds graphql_max_body_bytes")
		return nil, false, &d
	}
	if graphqlBody {
		// The document is the body; the URL may name the operation.
		for _, k := range urlParams {
			if _, ok := r.Query[k]; ok && k != "operationName" && k != "variables" {
				return fail(invalid("an application/graphql body with %s in the URL", k))
			}
		}
		e := envelope{query: string(r.Body), hasQuery: true}
		if v, ok := r.Query["operationName"]; ok {
			if len(v) != 1 {
				return fail(invalid("operationName given %d times", len(v)))
			}
			e.operationName, e.hasName = v[0], true
		}
		op, err := e.operation()
		if err != nil {
			return fail(err)
		}
		return []Operation{op}, false, nil
	}
	for _, k := range urlParams {
		if _, ok := r.Query[k]; ok {
			return fail(invalid("GraphQL parameter %s in the URL of a JSON POST (servers differ on which one they read)", k))
		}
	}
	ops, batch, err := ParseJSON(r.Body)
	if err != nil {
		return fail(err)
	}
	return ops, batch, nil
}

// mediaType reads the Content-Type of a POST: ok for JSON (graphql
// false) or application/graphql (true), one field, UTF-8 if a charset
// is named.
func mediaType(ct []string) (graphqlBody, ok bool) {
	if len(ct) != 1 {
		return false, false
	}
	mt, params, err := mime.ParseMediaType(ct[0])
	if err != nil {
		return false, false
	}
	if cs, has := params["charset"]; has && !strings.EqualFold(cs, "utf-8") {
		return false, false
	}
	switch mt {
	case "application/json":
		return false, true
	case "application/graphql":
		return true, true
	}
	return false, false
}

// foldedParam finds a query parameter that spells a GraphQL parameter
// in another case or with a bracket suffix ("Query", "query[]"), which
// some server may read as it.
func foldedParam(q url.Values) (string, bool) {
	for k := range q {
		base := k
		if i := strings.IndexByte(k, '['); i > 0 {
			base = k[:i]
		}
		for _, p := range urlParams {
			if k != p && strings.EqualFold(base, p) {
				return k, false
			}
		}
	}
	return "", true
}

// parseGET reads the operation of a GET: each GraphQL parameter at most
// once.
func parseGET(q url.Values) (Operation, error) {
	var e envelope
	for _, k := range urlParams {
		if v, ok := q[k]; ok && len(v) != 1 {
			return Operation{}, invalid("%s given %d times", k, len(v))
		}
	}
	if v, ok := q["query"]; ok {
		e.query, e.hasQuery = v[0], true
	}
	if v, ok := q["operationName"]; ok {
		e.operationName, e.hasName = v[0], true
	}
	if v, ok := q["extensions"]; ok {
		h, err := ParseExtensions([]byte(v[0]))
		if err != nil {
			return Operation{}, err
		}
		e.hash = h
	}
	for _, k := range persistedIDs {
		if v, ok := q[k]; ok {
			if e.id != "" || v[0] == "" {
				return Operation{}, invalid("persisted ids must be one nonempty parameter")
			}
			e.id = v[0]
		}
	}
	return e.operation()
}

// Allows judges one operation against the endpoint's rules: a
// matching deny rule refuses it; then access, when set, must admit its
// type (read-only: query; read-write: query and mutation; full: all);
// then, when there are rules, one must match.
func Allows(ep *policy.Endpoint, op Operation) (bool, string) {
	ok, why, _ := decideOp(ep, op)
	return ok, why
}

// decideOp is Allows, naming the deny rule that refused.
func decideOp(ep *policy.Endpoint, op Operation) (bool, string, string) {
	for i, d := range ep.DenyRules {
		if Matches(d, op) {
			return false, policy.L7DeniedByRule, "deny_rules[" + strconv.Itoa(i) + "]"
		}
	}
	if ep.Access != "" && !AccessAllows(ep.Access, op.Type) {
		return false, policy.L7AccessDenied, ""
	}
	if len(ep.Rules) > 0 {
		for _, r := range ep.Rules {
			if Matches(r.Allow, op) {
				return true, "", ""
			}
		}
		return false, policy.L7NoRuleMatched, ""
	}
	return true, "", ""
}

// AccessAllows reports whether an access preset admits an operation
// type.
func AccessAllows(access, opType string) bool {
	switch access {
	case policy.AccessFull:
		return true
	case policy.AccessReadWrite:
		return opType == policy.OperationQuery || opType == policy.OperationMutation
	case policy.AccessReadOnly:
		return opType == policy.OperationQuery
	}
	return false
}

// Matches reports whether a rule selects an operation: its type ("*"
// any) and, when the rule names one, its name glob (an anonymous
// operation's name is "").
func Matches(rule policy.RequestMatch, op Operation) bool {
	if rule.OperationType != "*" && rule.OperationType != op.Type {
		return false
	}
	return rule.OperationName == "" || policy.MatchGlob(rule.OperationName, op.Name)
}
