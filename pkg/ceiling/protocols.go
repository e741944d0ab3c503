package ceiling

import (
	"fmt"
	"slices"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/l7/graphql"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Containment of the body-inspected protocols (mcp, json-rpc,
// graphql): what pkg/l7/jsonrpc and pkg/l7/graphql let through.
//
// Such an endpoint never lets every request through, not even under
// enforcement: audit (a body it cannot read, or over its bound, is
// refused whatever the enforcement), so a ceiling endpoint of one is
// never everyRequest. Between two endpoints:
//
//   - policy rest, ceiling body-inspected: refused (rest admits any body,
//     the ceiling's reader refuses most);
//   - policy body-inspected, ceiling rest with rules: the policy's
//     requests are read as rest requests with the protocol's HTTP
//     methods (mcp: POST and GET; json-rpc: POST; graphql: GET and
//     POST), exactly so spelt (the inspectors refuse method overrides),
//     on any path and query, and must be inside the ceiling's rules;
//   - both body-inspected: the same protocol, a body bound no larger,
//     for mcp an allowlist within the ceiling's and strict tool names
//     where the ceiling has them, for graphql a batch bound no larger
//     and every registered persisted query the policy admits registered
//     and admitted by the ceiling too; then, unless the ceiling is
//     audit (which relays every call it can read), the policy must
//     enforce and each of its allow rules (access preset for graphql)
//     lie within one allow rule of the ceiling, every ceiling deny rule
//     that may meet it being copied (or covered) by a deny rule of the
//     policy.
func protocolWithin(e, w *policy.Endpoint, wPath string) (string, string) {
	switch {
	case !e.BodyInspected():
		return "", fmt.Sprintf("admits any request body, but the ceiling's %s reads bodies as protocol %s and refuses what it cannot read", wPath, w.Protocol)
	case w.Protocol == policy.ProtocolWebSocket:
		return ".protocol", fmt.Sprintf("protocol %s sends requests that are not WebSocket upgrades, which the ceiling's %s (protocol websocket) refuses", e.Protocol, wPath)
	case !w.BodyInspected():
		return restView(e, w, wPath)
	case e.Protocol != w.Protocol:
		return ".protocol", fmt.Sprintf("protocol %s is not the ceiling's protocol %s (%s)", e.Protocol, w.Protocol, wPath)
	}
	if f, why := shapeWithin(e, w, wPath); why != "" {
		return f, why
	}
	if w.Enforcement == policy.EnforcementAudit {
		return "", ""
	}
	if e.Enforcement == policy.EnforcementAudit {
		return ".enforcement", fmt.Sprintf("enforcement: audit relays the calls its rules refuse, but the ceiling's %s enforces its rules", wPath)
	}
	if e.Protocol == policy.ProtocolGraphQL {
		return graphqlRulesWithin(e, w, wPath)
	}
	return rpcRulesWithin(e, w, wPath)
}

// restView checks a body-inspected e against a rest ceiling w, reading
// e's requests as rest cells.
func restView(e, w *policy.Endpoint, wPath string) (string, string) {
	methods := map[string][]string{
		policy.ProtocolMCP: {"POST", "GET"}, policy.ProtocolJSONRPC: {"POST"}, policy.ProtocolGraphQL: {"GET", "POST"},
	}[e.Protocol]
	view := &policy.Endpoint{Protocol: policy.ProtocolREST}
	for _, m := range methods {
		c := cell{field: "", methods: methodSet{m: m}, path: "*"}
		if why := cellWithin(c, view, w, wPath); why != "" {
			return "", fmt.Sprintf("protocol %s sends %s requests to any path: %s", e.Protocol, m, why)
		}
		if why := pathMattersWithin(c, view, w, wPath); why != "" {
			return "", why
		}
	}
	return "", ""
}

// shapeWithin compares what both endpoints refuse before any rule: the
// body bound, the MCP allowlist and tool-name syntax, GraphQL batches
// and persisted queries.
func shapeWithin(e, w *policy.Endpoint, wPath string) (string, string) {
	if e.MaxBodyBytes() > w.MaxBodyBytes() {
		return "", fmt.Sprintf("reads request bodies of up to %d bytes, but the ceiling's %s refuses those over %d", e.MaxBodyBytes(), wPath, w.MaxBodyBytes())
	}
	switch e.Protocol {
	case policy.ProtocolMCP:
		for _, v := range e.MCP.Versions {
			if !slices.Contains(w.MCP.Versions, v) {
				return ".mcp.versions", fmt.Sprintf("allows MCP revision %s, which the ceiling's %s does not (mcp.versions %v)", v, wPath, w.MCP.Versions)
			}
		}
		if w.MCP.StrictToolNames && !e.MCP.StrictToolNames {
			return ".mcp.strict_tool_names", fmt.Sprintf("admits tool names outside the recommended syntax, which the ceiling's %s refuses", wPath)
		}
	case policy.ProtocolGraphQL:
		if e.GraphQLMaxBatchSize > w.GraphQLMaxBatchSize {
			return ".graphql_max_batch_size", fmt.Sprintf("admits batches of %d operations, the ceiling's %s of %d", e.GraphQLMaxBatchSize, wPath, w.GraphQLMaxBatchSize)
		}
		return persistedWithin(e, w, wPath)
	}
	return "", ""
}

// persistedWithin: a hash-only request e admits (a registered key whose
// classification e's rules allow, or any registered key under audit)
// must be admitted by w: registered there, as an operation w allows.
func persistedWithin(e, w *policy.Endpoint, wPath string) (string, string) {
	if e.PersistedQueries != policy.PersistedQueriesAllowRegistered {
		return "", ""
	}
	for _, k := range sortedKeys(e.GraphQLPersistedQueries) {
		op := e.GraphQLPersistedQueries[k]
		gop := graphql.Operation{Type: op.OperationType, Name: op.OperationName}
		if ok, _ := graphql.Allows(e, gop); !ok && e.Enforcement != policy.EnforcementAudit {
			continue
		}
		wop, reg := w.GraphQLPersistedQueries[k]
		if w.PersistedQueries != policy.PersistedQueriesAllowRegistered || !reg {
			return ".graphql_persisted_queries", fmt.Sprintf("admits persisted query %q, which the ceiling's %s does not register", k, wPath)
		}
		if ok, _ := graphql.Allows(w, graphql.Operation{Type: wop.OperationType, Name: wop.OperationName}); !ok && w.Enforcement != policy.EnforcementAudit {
			return ".graphql_persisted_queries", fmt.Sprintf("admits persisted query %q, which the ceiling's %s registers as an operation it refuses", k, wPath)
		}
	}
	return "", ""
}

// gqlCell is a set of GraphQL operations: a type ("*" any) and a name
// glob ("*" any, the anonymous operation's "" included).
type gqlCell struct {
	field, typ, name string
}

func gqlCells(e *policy.Endpoint) []gqlCell {
	if len(e.Rules) > 0 {
		var out []gqlCell
		for i, r := range e.Rules {
			out = append(out, gqlCell{fmt.Sprintf(".rules[%d]", i), r.Allow.OperationType, nameGlob(r.Allow.OperationName)})
		}
		return out
	}
	types := map[string][]string{
		policy.AccessReadOnly:  {policy.OperationQuery},
		policy.AccessReadWrite: {policy.OperationQuery, policy.OperationMutation},
		policy.AccessFull:      {policy.OperationQuery, policy.OperationMutation, policy.OperationSubscription},
	}[e.Access]
	var out []gqlCell
	for _, t := range types {
		out = append(out, gqlCell{".access", t, "*"})
	}
	return out
}

func nameGlob(n string) string {
	if n == "" {
		return "*"
	}
	return n
}

func typeWithin(a, b string) bool { return b == "*" || a == b }

func typesMeet(a, b string) bool { return a == "*" || b == "*" || a == b }

func graphqlRulesWithin(e, w *policy.Endpoint, wPath string) (string, string) {
	for _, c := range gqlCells(e) {
		for i, d := range w.DenyRules {
			if !typesMeet(c.typ, d.OperationType) {
				continue
			}
			covered := slices.ContainsFunc(e.DenyRules, func(de policy.RequestMatch) bool {
				return typeWithin(d.OperationType, de.OperationType) && valueGlobWithin(nameGlob(d.OperationName), nameGlob(de.OperationName))
			})
			if !covered {
				return c.field, fmt.Sprintf("%s operations named %s are not held to the ceiling's deny rule (%s.deny_rules[%d]); copy it into the policy", c.typ, c.name, wPath, i)
			}
		}
		if len(w.Rules) == 0 {
			if c.typ != "*" && graphql.AccessAllows(w.Access, c.typ) {
				continue
			}
			return c.field, fmt.Sprintf("%s operations are outside the ceiling's access: %s (%s)", c.typ, w.Access, wPath)
		}
		if !slices.ContainsFunc(w.Rules, func(r policy.Rule) bool {
			return typeWithin(c.typ, r.Allow.OperationType) && valueGlobWithin(c.name, nameGlob(r.Allow.OperationName))
		}) {
			return c.field, fmt.Sprintf("%s operations named %s are not inside any one allow rule of the ceiling's %s", c.typ, c.name, wPath)
		}
	}
	return "", ""
}

// rpcRulesWithin is the rule part for mcp and json-rpc: each allow rule
// of e within one of w, and every deny rule of w that may meet it
// covered by one of e.
func rpcRulesWithin(e, w *policy.Endpoint, wPath string) (string, string) {
	for i, r := range e.Rules {
		field := fmt.Sprintf(".rules[%d]", i)
		for j, d := range w.DenyRules {
			if !rpcMayMeet(r.Allow, d, w) {
				continue
			}
			if !slices.ContainsFunc(e.DenyRules, func(de policy.RequestMatch) bool { return rpcWithin(d, w, de, e) }) {
				return field, fmt.Sprintf("%s is not held to the ceiling's deny rule %s (%s.deny_rules[%d]); copy it into the policy", describeRPC(r.Allow), describeRPC(d), wPath, j)
			}
		}
		if !slices.ContainsFunc(w.Rules, func(wr policy.Rule) bool { return rpcWithin(r.Allow, e, wr.Allow, w) }) {
			return field, fmt.Sprintf("%s is not inside any one allow rule of the ceiling's %s", describeRPC(r.Allow), wPath)
		}
	}
	return "", ""
}

func describeRPC(m policy.RequestMatch) string {
	if q, ok := m.ToolMatcher(); ok {
		return fmt.Sprintf("%s of tool %s", m.Method, strings.Join(q.Any, "|"))
	}
	return "method " + m.Method
}

// rpcWithin reports whether every call rule a of endpoint ae matches,
// rule b of endpoint be matches too.
func rpcWithin(a policy.RequestMatch, ae *policy.Endpoint, b policy.RequestMatch, be *policy.Endpoint) bool {
	if ae.Protocol == policy.ProtocolJSONRPC {
		return b.Method == "*" || a.Method == b.Method
	}
	if !valueGlobWithin(a.Method, b.Method) {
		return false
	}
	bt, ok := b.ToolMatcher()
	if !ok {
		return true
	}
	at, ok := a.ToolMatcher()
	if !ok {
		return false
	}
	for _, g := range at.Any {
		if !slices.ContainsFunc(bt.Any, func(h string) bool { return toolWithin(g, ae.MCP.StrictToolNames, h, be.MCP.StrictToolNames) }) {
			return false
		}
	}
	return true
}

// toolWithin reports whether every tool name the matcher a selects
// (a glob under strict names, else a literal) the matcher b selects.
func toolWithin(a string, aStrict bool, b string, bStrict bool) bool {
	literal := !aStrict || !strings.ContainsAny(a, "*?")
	switch {
	case !bStrict:
		return literal && a == b
	case literal:
		return policy.MatchGlob(b, a)
	}
	return valueGlobWithin(a, b)
}

// rpcMayMeet over-approximates whether some call matches both the
// allow rule a (of the policy) and the deny rule d (of the ceiling w).
func rpcMayMeet(a, d policy.RequestMatch, w *policy.Endpoint) bool {
	if w.Protocol == policy.ProtocolJSONRPC {
		return a.Method == "*" || d.Method == "*" || a.Method == d.Method
	}
	if !globsMayMeet(a.Method, d.Method) {
		return false
	}
	at, aok := a.ToolMatcher()
	dt, dok := d.ToolMatcher()
	if !aok || !dok {
		return true
	}
	for _, x := range at.Any {
		for _, y := range dt.Any {
			if globsMayMeet(x, y) {
				return true
			}
		}
	}
	return false
}

// globsMayMeet is false only when two globs provably share no string:
// literals that differ, or a literal the other glob does not match.
func globsMayMeet(a, b string) bool {
	la, lb := !strings.ContainsAny(a, "*?"), !strings.ContainsAny(b, "*?")
	switch {
	case la && lb:
		return a == b
	case la:
		return policy.MatchGlob(b, a)
	case lb:
		return policy.MatchGlob(a, b)
	}
	return true
}
