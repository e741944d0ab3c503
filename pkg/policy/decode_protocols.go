package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// This file decodes what the body-inspected protocols (mcp, json-rpc,
// graphql) add to an endpoint: their options and their rules.

// protocolKeys are the endpoint keys of the body-inspected protocols.
var protocolKeys = []string{"mcp", "json_rpc", "persisted_queries", "graphql_persisted_queries", "graphql_max_body_bytes", "graphql_max_batch_size"}

// protocolOf names the protocol each option belongs to.
var protocolOf = map[string]string{
	"mcp": ProtocolMCP, "json_rpc": ProtocolJSONRPC, "persisted_queries": ProtocolGraphQL,
	"graphql_persisted_queries": ProtocolGraphQL, "graphql_max_body_bytes": ProtocolGraphQL, "graphql_max_batch_size": ProtocolGraphQL,
}

// protocolOptions decodes the options of e's protocol (e.Protocol is
// already decoded) and materialises their defaults; an option of
// another protocol is an error.
func (d *decoder) protocolOptions(fields map[string]field, path string, e *Endpoint) {
	for _, k := range protocolKeys {
		f, ok := fields[k]
		if ok && protocolOf[k] != e.Protocol {
			d.errf(f.key, path+"."+k, "applies to protocol %s only (this endpoint's protocol is %q)", protocolOf[k], e.Protocol)
		}
	}
	switch e.Protocol {
	case ProtocolMCP:
		e.MCP = &MCPOptions{Versions: []string{MCPDefaultVersion}, StrictToolNames: true, MaxBodyBytes: DefaultMaxBodyBytes}
		if f, ok := fields["mcp"]; ok {
			d.mcpOptions(f.val, path+".mcp", e.MCP)
		}
	case ProtocolJSONRPC:
		e.JSONRPC = &JSONRPCOptions{MaxBodyBytes: DefaultMaxBodyBytes}
		if f, ok := fields["json_rpc"]; ok {
			if of, ok := d.optionsMapping(f.val, path+".json_rpc", []string{"max_body_bytes"}); ok {
				if mf, ok := of["max_body_bytes"]; ok {
					d.bodyBound(mf.val, path+".json_rpc.max_body_bytes", &e.JSONRPC.MaxBodyBytes)
				}
			}
		}
	case ProtocolGraphQL:
		d.graphqlOptions(fields, path, e)
	}
}

// optionsMapping is mapping for an options block, which must not be
// null: omitting it is how a policy asks for the defaults.
func (d *decoder) optionsMapping(n *yaml.Node, path string, allowed []string) (map[string]field, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		d.errf(n, path, "must be a mapping, not null (omit it for the defaults)")
		return nil, false
	}
	return d.mapping(n, path, allowed)
}

func (d *decoder) mcpOptions(n *yaml.Node, path string, o *MCPOptions) {
	of, ok := d.optionsMapping(n, path, []string{"versions", "strict_tool_names", "max_body_bytes"})
	if !ok {
		return
	}
	if f, ok := of["versions"]; ok {
		if vs, ok := d.mcpVersions(f.val, path+".versions"); ok {
			o.Versions = vs
		}
	}
	if f, ok := of["strict_tool_names"]; ok {
		if b, ok := d.boolean(f.val, path+".strict_tool_names"); ok {
			o.StrictToolNames = b
		}
	}
	if f, ok := of["max_body_bytes"]; ok {
		d.bodyBound(f.val, path+".max_body_bytes", &o.MaxBodyBytes)
	}
}

// mcpVersions decodes an mcp.versions allowlist: a nonempty list of
// registry revisions, each spelt exactly and listed once, returned in
// semantic order.
func (d *decoder) mcpVersions(n *yaml.Node, path string) ([]string, bool) {
	known := strings.Join(MCPVersions(), ", ")
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		d.errf(n, path, "must be a nonempty list of MCP revisions (%s), not null; omit it for [%s]", known, MCPDefaultVersion)
		return nil, false
	}
	items, ok := d.seq(n, path, fmt.Sprintf("must not be empty (list the revisions to allow: %s; omit it for [%s])", known, MCPDefaultVersion))
	if !ok {
		return nil, false
	}
	var out []string
	good := true
	for i, it := range items {
		ip := indexPath(path, i)
		// An unquoted date is a YAML timestamp; its text is the revision.
		if it.Kind == yaml.ScalarNode && it.Tag == "!!timestamp" {
			it = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: it.Value, Line: it.Line}
		}
		s, ok := d.str(it, ip)
		if !ok {
			good = false
			continue
		}
		if !MCPVersionKnown(s) {
			d.errf(it, ip, "%q is not an MCP revision Palisade supports (%s, spelt exactly; no aliases such as latest or draft)", s, known)
			good = false
			continue
		}
		if slices.Contains(out, s) {
			d.errf(it, ip, "%s is listed twice", s)
			good = false
			continue
		}
		out = append(out, s)
	}
	sortMCPVersions(out)
	return out, good
}

// bodyBound decodes a max_body_bytes option.
func (d *decoder) bodyBound(n *yaml.Node, path string, out *int) {
	v, ok := d.integer(n, path)
	if !ok {
		return
	}
	if v < 1 || v > MaxInspectBodyBytes {
		d.errf(n, path, "must be 1-%d (bytes of a request body read for inspection), not %d", MaxInspectBodyBytes, v)
		return
	}
	*out = int(v)
}

func (d *decoder) graphqlOptions(fields map[string]field, path string, e *Endpoint) {
	e.PersistedQueries = PersistedQueriesDeny
	e.GraphQLMaxBodyBytes = DefaultMaxBodyBytes
	if f, ok := fields["persisted_queries"]; ok {
		if s, ok := d.oneOf(f.val, path+".persisted_queries", PersistedQueriesDeny, PersistedQueriesAllowRegistered); ok {
			e.PersistedQueries = s
		}
	}
	if f, ok := fields["graphql_max_body_bytes"]; ok {
		d.bodyBound(f.val, path+".graphql_max_body_bytes", &e.GraphQLMaxBodyBytes)
	}
	if f, ok := fields["graphql_max_batch_size"]; ok {
		if v, ok := d.integer(f.val, path+".graphql_max_batch_size"); ok {
			if v < 1 || v > MaxGraphQLBatchSize {
				d.errf(f.val, path+".graphql_max_batch_size", "must be 1-%d (operations in one batch; omit it to refuse batches), not %d", MaxGraphQLBatchSize, v)
			} else {
				e.GraphQLMaxBatchSize = int(v)
			}
		}
	}
	reg, hasReg := fields["graphql_persisted_queries"]
	if hasReg {
		e.GraphQLPersistedQueries = d.persistedRegistry(reg.val, path+".graphql_persisted_queries")
	}
	switch {
	case e.PersistedQueries == PersistedQueriesAllowRegistered && !hasReg:
		d.errf(fields["persisted_queries"].val, path+".graphql_persisted_queries", "is required with persisted_queries: allow_registered (the hashes or ids to admit and what each one is)")
	case hasReg && e.PersistedQueries != PersistedQueriesAllowRegistered:
		d.errf(reg.key, path+".graphql_persisted_queries", "has no effect unless persisted_queries is allow_registered")
	}
}

// persistedRegistry decodes graphql_persisted_queries: hash or id ->
// {operation_type, operation_name}.
func (d *decoder) persistedRegistry(n *yaml.Node, path string) map[string]GraphQLOperation {
	fields, ok := d.mapping(n, path, nil)
	if !ok {
		return nil
	}
	if len(fields) == 0 {
		d.errf(n, path, "must not be empty")
		return nil
	}
	if len(fields) > MaxListLen {
		d.errf(n, path, "has %d entries; at most %d allowed", len(fields), MaxListLen)
		return nil
	}
	out := map[string]GraphQLOperation{}
	for key, f := range fields {
		kp := keyPath(path, key)
		if key == "" || len(key) > 256 || strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			d.errf(f.key, kp, "a persisted query's hash or id must be 1-256 characters without spaces or control characters")
			continue
		}
		of, ok := d.mapping(f.val, kp, []string{"operation_type", "operation_name"})
		if !ok {
			continue
		}
		var op GraphQLOperation
		if tf, ok := of["operation_type"]; !ok {
			d.errf(f.val, kp+".operation_type", "is required (query, mutation or subscription)")
			continue
		} else if s, ok := d.oneOf(tf.val, kp+".operation_type", OperationQuery, OperationMutation, OperationSubscription); ok {
			op.OperationType = s
		} else {
			continue
		}
		if nf, ok := of["operation_name"]; ok {
			s, ok := d.str(nf.val, kp+".operation_name")
			if !ok {
				continue
			}
			if !graphqlNameRE().MatchString(s) {
				d.errf(nf.val, kp+".operation_name", "%q is not a GraphQL name", s)
				continue
			}
			op.OperationName = s
		}
		out[key] = op
	}
	return out
}

var (
	graphqlNameRE     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[_A-Za-z][_0-9A-Za-z]*$`) })
	graphqlNameGlobRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[_0-9A-Za-z*?]{1,256}$`) })
	toolGlobRE        = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.*?-]{1,256}$`) })
)

// protocolMatch decodes a rule (deny: a deny_rules entry; otherwise an
// allow rule's body) of a body-inspected endpoint.
func (d *decoder) protocolMatch(n *yaml.Node, path string, e *Endpoint) (RequestMatch, bool) {
	switch e.Protocol {
	case ProtocolGraphQL:
		return d.graphqlMatch(n, path)
	case ProtocolJSONRPC:
		return d.jsonrpcMatch(n, path)
	}
	return d.mcpMatch(n, path, e.MCP)
}

func (d *decoder) graphqlMatch(n *yaml.Node, path string) (RequestMatch, bool) {
	var m RequestMatch
	fields, ok := d.mapping(n, path, []string{"operation_type", "operation_name"})
	if !ok {
		return m, false
	}
	good := true
	if f, ok := fields["operation_type"]; !ok {
		d.errf(n, path+".operation_type", "is required (query, mutation, subscription or \"*\")")
		good = false
	} else if s, ok := d.oneOf(f.val, path+".operation_type", OperationQuery, OperationMutation, OperationSubscription, "*"); ok {
		m.OperationType = s
	} else {
		good = false
	}
	if f, ok := fields["operation_name"]; ok {
		s, ok := d.str(f.val, path+".operation_name")
		switch {
		case !ok:
			good = false
		case !graphqlNameGlobRE().MatchString(s):
			d.errf(f.val, path+".operation_name", "must be a GraphQL operation-name glob (letters, digits, '_', '*' and '?'), not %q", s)
			good = false
		default:
			m.OperationName = s
		}
	}
	return m, good
}

func (d *decoder) jsonrpcMatch(n *yaml.Node, path string) (RequestMatch, bool) {
	var m RequestMatch
	fields, ok := d.mapping(n, path, []string{"method"})
	if !ok {
		return m, false
	}
	f, ok := fields["method"]
	if !ok {
		d.errf(n, path+".method", "is required (a JSON-RPC method name, or \"*\" for every method)")
		return m, false
	}
	s, ok := d.str(f.val, path+".method")
	if !ok {
		return m, false
	}
	if err := checkRPCMethod(s); err != nil {
		d.errf(f.val, path+".method", "%v", err)
		return m, false
	}
	if s != "*" && strings.ContainsAny(s, "*?") {
		d.errf(f.val, path+".method", "generic JSON-RPC rules name one method exactly (or \"*\" for all), not a pattern: %q", s)
		return m, false
	}
	m.Method = s
	return m, true
}

// checkRPCMethod checks the text of a JSON-RPC method name in a rule.
func checkRPCMethod(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > 256 {
		return fmt.Errorf("is %d characters; at most 256 allowed", len(s))
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("must not contain control characters")
		}
	}
	return nil
}

func (d *decoder) mcpMatch(n *yaml.Node, path string, o *MCPOptions) (RequestMatch, bool) {
	var m RequestMatch
	fields, ok := d.mapping(n, path, []string{"method", "tool", "params"})
	if !ok {
		return m, false
	}
	good := true
	if f, ok := fields["method"]; !ok {
		d.errf(n, path+".method", "is required (an MCP method such as initialize or tools/call; globs only within tools/, such as tools/*)")
		good = false
	} else if s, ok := d.str(f.val, path+".method"); !ok {
		good = false
	} else if err := checkMCPMethod(s); err != nil {
		d.errf(f.val, path+".method", "%v", err)
		good = false
	} else {
		m.Method = s
	}
	tf, hasTool := fields["tool"]
	pf, hasParams := fields["params"]
	var tool []string
	toolPath, toolNode := path+".tool", tf.val
	switch {
	case hasTool && hasParams:
		d.errf(pf.key, path+".params", "tool and params.name are the same matcher; set one")
		return m, false
	case hasTool:
		tool, ok = d.queryMatcher(tf.val, toolPath)
		good = good && ok
	case hasParams:
		pm, ok := d.mapping(pf.val, path+".params", nil)
		if !ok {
			return m, false
		}
		for k, kv := range pm {
			if k != "name" {
				d.errf(kv.key, keyPath(path+".params", k), "only params.name (the tools/call tool name) can be matched; tool arguments cannot")
				good = false
			}
		}
		nf, ok := pm["name"]
		if !ok {
			d.errf(pf.val, path+".params.name", "is required (params holds only the tool-name matcher)")
			return m, false
		}
		toolPath, toolNode = path+".params.name", nf.val
		tool, ok = d.queryMatcher(nf.val, toolPath)
		good = good && ok
	}
	if !hasTool && !hasParams {
		return m, good
	}
	if m.Method != "" && m.Method != MCPToolCall {
		d.errf(fields["method"].val, path+".method", "must be tools/call on a rule that matches a tool name, not %q", m.Method)
		good = false
	}
	for _, g := range tool {
		if why := checkToolGlob(g, o.StrictToolNames); why != "" {
			d.errf(toolNode, toolPath, "%q %s", g, why)
			good = false
		}
	}
	m.Params = map[string]QueryMatch{"name": {Any: tool}}
	return m, good
}

// checkMCPMethod checks an MCP rule's method: a name, or a glob within
// the tools/ family; never "*".
func checkMCPMethod(s string) error {
	if err := checkRPCMethod(s); err != nil {
		return err
	}
	if strings.ContainsAny(s, "*?") && !strings.HasPrefix(s, "tools/") {
		return fmt.Errorf("globs are accepted only within the tools/ family (such as tools/*), not %q; name each other MCP method", s)
	}
	return nil
}

// checkToolGlob says why a tool matcher can never match or is not
// allowed ("" when it is fine).
func checkToolGlob(g string, strict bool) string {
	if !strict {
		if strings.ContainsAny(g, "*?") {
			return "is a pattern: tool patterns need mcp.strict_tool_names (a name outside the recommended syntax may hold '*' or '?' itself)"
		}
		return ""
	}
	if !toolGlobRE().MatchString(g) || strings.Trim(g, "*?") == g && !ValidToolName(g) {
		return "can never match: with mcp.strict_tool_names (the default) tools/call names are 1-128 of A-Z a-z 0-9 _ . - (set strict_tool_names: false to call tools named otherwise)"
	}
	return ""
}

// protocolCross checks an endpoint of a body-inspected protocol as a
// whole: which of access and rules it needs, tls, host, and MCP rules
// that would undo a tool filter.
func (d *decoder) protocolCross(fields map[string]field, path string, e *Endpoint, n *yaml.Node) {
	accessF, hasAccess := fields["access"]
	rulesF, hasRules := fields["rules"]
	switch e.Protocol {
	case ProtocolMCP, ProtocolJSONRPC:
		if hasAccess {
			d.errf(accessF.val, path+".access", "is not valid on protocol %s (HTTP method presets cannot authorise JSON-RPC); list rules with method", e.Protocol)
		}
		if !hasRules {
			d.errf(n, path+".rules", "protocol %s requires rules (each allowing a method)", e.Protocol)
		}
	case ProtocolGraphQL:
		if hasRules && hasAccess {
			d.errf(rulesF.key, path+".rules", "access and rules are mutually exclusive")
		}
		if !hasRules && !hasAccess {
			d.errf(n, path+".access", "protocol graphql requires access or rules")
		}
	}
	if e.TLS == TLSSkip {
		d.errf(fields["tls"].val, path+".tls", "tls: skip disables inspection, so protocol %s rules could not be enforced", e.Protocol)
	}
	if _, ok := fields["host"]; e.Protocol == ProtocolMCP && !ok {
		d.errf(n, path+".host", "protocol mcp requires a host (an MCP endpoint is never hostless)")
	}
	if e.Protocol == ProtocolMCP && len(e.Rules) == lenItems(fields["rules"]) && len(e.DenyRules) == lenItems(fields["deny_rules"]) {
		d.mcpToolFilter(path, e, fields) // (when every rule decoded: indexes are the file's)
	}
}

// mcpToolFilter refuses a rule without a tool matcher whose method
// covers tools/call beside allow rules that filter tools: an allow rule
// would let every tool through, a deny rule would refuse every one.
func (d *decoder) mcpToolFilter(path string, e *Endpoint, fields map[string]field) {
	filtered := slices.ContainsFunc(e.Rules, func(r Rule) bool { _, ok := r.Allow.ToolMatcher(); return ok })
	if !filtered {
		return
	}
	broad := func(m RequestMatch) bool {
		_, ok := m.ToolMatcher()
		return !ok && pathGlob(m.Method, MCPToolCall)
	}
	for i, r := range e.Rules {
		if broad(r.Allow) {
			d.errf(fields["rules"].val.Content[i], indexPath(path+".rules", i), "allows every tools/call (method %q, no tool), which undoes the rules that allow named tools; add tool, or remove those rules", r.Allow.Method)
		}
	}
	for i, m := range e.DenyRules {
		if broad(m) {
			d.errf(fields["deny_rules"].val.Content[i], indexPath(path+".deny_rules", i), "refuses every tools/call (method %q, no tool), which erases the rules that allow named tools; add tool, or remove those rules", m.Method)
		}
	}
}
