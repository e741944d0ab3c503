package jsonrpc

import (
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// VersionField is the header an MCP client names its protocol revision
// in (MCP transport specification, streamable HTTP).
const VersionField = "Mcp-Protocol-Version"

// Request is what Decide reads of one HTTP request to a json-rpc or mcp
// endpoint.
type Request struct {
	Method string // the HTTP method
	// Query is the request's query string, parsed: only a "_method"
	// override is looked for in it.
	Query map[string][]string
	// Field returns a request header's values by name, every spelling
	// a server may fold to it included (l7.FieldValues).
	Field func(name string) []string
	// Body is the request body, read up to the endpoint's
	// MaxBodyBytes; TooLarge says more was sent (or announced).
	Body     []byte
	TooLarge bool
}

// Decision is the verdict on one request.
type Decision struct {
	Allowed bool
	// Status is the refusal's HTTP status. 403 is a policy denial
	// (which enforcement: audit relays and logs): a call the rules
	// refuse, a revision outside mcp.versions, a tool name outside the
	// recommended syntax, a JSON-RPC response sent to the server. Any
	// other is a request the protocol cannot accept, refused whatever
	// the enforcement: 400 unreadable JSON-RPC, an MCP-Protocol-Version
	// repeated, empty or naming no registry revision, a batch the
	// revision's shape forbids; 405 an HTTP method that carries no
	// JSON-RPC; 413 a body over the bound; 415 a body that is not
	// JSON, or is encoded.
	Status int
	// Reason is a pkg/policy reason constant.
	Reason string
	// Rule is the deny rule that refused a call ("deny_rules[2]"), ""
	// when no single rule did.
	Rule string
	// Method and Tool name the message the decision rests on (the
	// refused one, else the first call); Version is the revision the
	// request was read under ("" for a generic JSON-RPC endpoint or an
	// initialize). None of them holds params or payloads.
	Method, Tool, Version string
	// Detail is a fixed sentence saying why, for the client and the
	// event: it never quotes the request.
	Detail string
}

func refuse(status int, reason, detail string) Decision {
	return Decision{Status: status, Reason: reason, Detail: detail}
}

// Decide judges one request to ep, a protocol mcp or json-rpc endpoint.
func Decide(ep *policy.Endpoint, r *Request) Decision {
	mcp := ep.Protocol == policy.ProtocolMCP
	if mcp && ep.MCP == nil {
		return refuse(http.StatusBadRequest, policy.L7BodyNotInspected, "mcp endpoint without options")
	}
	if policy.HasMethodOverride(r.Field, r.Query) {
		return refuse(http.StatusBadRequest, policy.L7MethodOverride, "a method override is not read: send the request's own method")
	}
	switch {
	case r.Method == http.MethodPost:
	case mcp && r.Method == http.MethodGet && len(r.Body) == 0 && !r.TooLarge && acceptsEventStream(r.Field("Accept")):
		// The stream of server messages: nothing to read but the revision.
		v, d := version(r)
		if d == nil {
			d = allowed(ep, r, v)
		}
		if d != nil {
			return *d
		}
		return Decision{Allowed: true, Version: v}
	default:
		detail := "only POST carries JSON-RPC"
		if mcp {
			detail = "only POST, and GET for an event stream without a body, carry MCP"
		}
		return refuse(http.StatusMethodNotAllowed, policy.L7HTTPMethod, detail)
	}
	if d := checkMedia(r, mcp); d != nil {
		return *d
	}
	if r.TooLarge {
		return refuse(http.StatusRequestEntityTooLarge, policy.L7BodyTooLarge, "request body exceeds the endpoint's max_body_bytes")
	}
	body, err := Parse(r.Body, mcp)
	if err != nil {
		// The parser's words may quote the body: the detail is fixed.
		detail := "request body is not one JSON-RPC 2.0 message or a batch of them"
		if mcp {
			detail = "request body is not one JSON-RPC 2.0 message or a batch of them, of MCP's shape"
		}
		return refuse(http.StatusBadRequest, policy.JSONRPCInvalid, detail)
	}
	if mcp {
		return decideMCP(ep, r, body)
	}
	return decideJSONRPC(ep, body)
}

// checkMedia refuses a body the inspector would read differently from
// the server: a Content-Encoding, a media type other than JSON.
func checkMedia(r *Request, mcp bool) *Decision {
	for _, ce := range r.Field("Content-Encoding") {
		if !strings.EqualFold(strings.TrimSpace(ce), "identity") {
			d := refuse(http.StatusUnsupportedMediaType, policy.L7UnsupportedBody, "a Content-Encoding is not inspected")
			return &d
		}
	}
	ct := r.Field("Content-Type")
	mt, params, err := "", map[string]string(nil), error(nil)
	if len(ct) == 1 {
		mt, params, err = mime.ParseMediaType(ct[0])
	}
	ok := len(ct) == 1 && err == nil && (mt == "application/json" || !mcp && (mt == "application/json-rpc" || mt == "application/jsonrequest"))
	if cs, has := params["charset"]; ok && has && !strings.EqualFold(cs, "utf-8") {
		ok = false
	}
	if !ok {
		d := refuse(http.StatusUnsupportedMediaType, policy.L7UnsupportedBody, "Content-Type must be one application/json (UTF-8)")
		return &d
	}
	return nil
}

// acceptsEventStream reports whether an Accept field lists
// text/event-stream.
func acceptsEventStream(accept []string) bool {
	for _, v := range accept {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// version reads the request's MCP revision: exactly one
// MCP-Protocol-Version value naming a registry revision (400
// otherwise), or none, which the transport specification reads as the
// fallback revision.
func version(r *Request) (string, *Decision) {
	vals := r.Field(VersionField)
	var d Decision
	switch {
	case len(vals) == 0:
		return policy.MCPFallbackVersion, nil
	case len(vals) > 1:
		d = refuse(http.StatusBadRequest, policy.MCPVersionInvalid, "MCP-Protocol-Version sent more than once")
	case vals[0] == "":
		d = refuse(http.StatusBadRequest, policy.MCPVersionInvalid, "MCP-Protocol-Version is empty")
	case !policy.MCPVersionKnown(vals[0]):
		d = refuse(http.StatusBadRequest, policy.MCPVersionInvalid, "MCP-Protocol-Version names no supported revision")
	default:
		return vals[0], nil
	}
	return "", &d
}

// allowed refuses (403) a revision outside the endpoint's allowlist.
func allowed(ep *policy.Endpoint, r *Request, v string) *Decision {
	if slices.Contains(ep.MCP.Versions, v) {
		return nil
	}
	d := refuse(http.StatusForbidden, policy.MCPVersionNotAllowed, "MCP revision "+v+" is not in mcp.versions")
	if len(r.Field(VersionField)) == 0 {
		d.Detail = "no MCP-Protocol-Version, so revision " + v + ", which is not in mcp.versions"
	}
	d.Version = v
	return &d
}

// decideMCP checks, in order, what makes a request unreadable under
// any policy (400: the revision header, the revision's batch shape),
// then what the policy refuses (403: the allowlist, the tool-name
// syntax, the rules), so that enforcement: audit, which relays the
// second kind, relays exactly the requests of a readable shape.
func decideMCP(ep *policy.Endpoint, r *Request, body *Body) Decision {
	first := body.Messages[0]
	named := func(d *Decision, m Message) Decision {
		d.Method, d.Tool = name(m)
		return *d
	}
	if !body.Batch && first.Kind == KindRequest && first.Method == "initialize" {
		// A standalone initialize opens the session: it negotiates the
		// revision the later requests name, and needs no header.
		return decideRules(ep, body)
	}
	v, d := version(r)
	if d != nil {
		return named(d, first)
	}
	if body.Batch {
		if d := batchShape(body, v); d != nil {
			return named(d, first)
		}
	}
	if d := allowed(ep, r, v); d != nil {
		return named(d, first)
	}
	if ep.MCP.StrictToolNames {
		for _, m := range body.Messages {
			if m.Method == policy.MCPToolCall && !policy.ValidToolName(m.Tool) {
				d := refuse(http.StatusForbidden, policy.MCPToolNameInvalid, "tools/call name outside the recommended syntax")
				d.Version = v
				return named(&d, m)
			}
		}
	}
	dec := decideRules(ep, body)
	dec.Version = v
	return dec
}

// batchShape refuses (400) a top-level array the revision's batch
// shape forbids: any under 2025-06-18 and later, over 64 members under
// 2025-03-26, an initialize in any.
func batchShape(body *Body, v string) *Decision {
	max, _ := policy.MCPMaxBatch(v)
	var d Decision
	switch {
	case max == 0:
		d = refuse(http.StatusBadRequest, policy.MCPBatchRefused, "MCP revision "+v+" has no batches")
	case len(body.Messages) > max:
		d = refuse(http.StatusBadRequest, policy.MCPBatchTooLarge, "a batch of more members than the revision's cap")
	case slices.ContainsFunc(body.Messages, func(m Message) bool { return m.Method == "initialize" }):
		d = refuse(http.StatusBadRequest, policy.JSONRPCInvalid, "initialize must not be part of a batch")
	default:
		return nil
	}
	d.Version = v
	return &d
}

func decideJSONRPC(ep *policy.Endpoint, body *Body) Decision {
	if slices.ContainsFunc(body.Messages, func(m Message) bool { return m.Kind == KindResponse }) {
		return refuse(http.StatusForbidden, policy.JSONRPCResponseFrame, "a JSON-RPC response sent to the server")
	}
	return decideRules(ep, body)
}

// decideRules applies the rules to every call of the body: one refused
// call refuses the whole body. An MCP client's responses (to the
// server's requests: sampling, elicitation, ping) are not calls.
func decideRules(ep *policy.Endpoint, body *Body) Decision {
	for _, m := range body.Messages {
		if m.Kind == KindResponse {
			continue
		}
		if ok, why, rule := decideCall(ep, m); !ok {
			d := refuse(http.StatusForbidden, why, "")
			d.Rule = rule
			d.Method, d.Tool = name(m)
			return d
		}
	}
	d := Decision{Allowed: true}
	for _, m := range body.Messages {
		if m.Kind != KindResponse {
			d.Method, d.Tool = name(m)
			break
		}
	}
	return d
}

// Allows judges one call against the endpoint's rules: a matching deny
// rule refuses it, else some allow rule must match.
func Allows(ep *policy.Endpoint, m Message) (bool, string) {
	ok, why, _ := decideCall(ep, m)
	return ok, why
}

// decideCall is Allows, naming the deny rule that refused.
func decideCall(ep *policy.Endpoint, m Message) (bool, string, string) {
	for i, d := range ep.DenyRules {
		if Matches(ep, d, m) {
			return false, policy.L7DeniedByRule, "deny_rules[" + strconv.Itoa(i) + "]"
		}
	}
	for _, r := range ep.Rules {
		if Matches(ep, r.Allow, m) {
			return true, "", ""
		}
	}
	return false, policy.L7NoRuleMatched, ""
}

// Matches reports whether a rule selects a call. A json-rpc rule names
// the method exactly, or "*"; an mcp rule's method is a name or a glob
// within tools/, and its tool matcher (params.name) holds when the
// call's tool matches one of its globs (strict_tool_names) or equals
// one of its names (without it, where a name may hold '*').
func Matches(ep *policy.Endpoint, rule policy.RequestMatch, m Message) bool {
	if ep.Protocol != policy.ProtocolMCP {
		return rule.Method == "*" || rule.Method == m.Method
	}
	if !policy.MatchGlob(rule.Method, m.Method) {
		return false
	}
	q, ok := rule.ToolMatcher()
	if !ok {
		return true
	}
	if m.Method != policy.MCPToolCall {
		return false
	}
	strict := ep.MCP != nil && ep.MCP.StrictToolNames
	return slices.ContainsFunc(q.Any, func(g string) bool {
		if strict {
			return policy.MatchGlob(g, m.Tool)
		}
		return g == m.Tool
	})
}

// name is what an event says of a message.
func name(m Message) (method, tool string) {
	return clip(m.Method, 256), clip(m.Tool, 128)
}

// clip bounds a name taken from the request for an event or a log line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
