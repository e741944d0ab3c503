package policy

import (
	"regexp"
	"slices"
	"strings"
	"sync"
)

// The MCP revision registry: the closed set of core protocol revisions
// an mcp.versions allowlist may name (seed 004), in semantic
// (chronological) order, each with its batch shape. A revision is a
// date the MCP specification published, never a range, an alias
// ("latest", "draft") or a revision Palisade does not implement (the
// sessionless 2026-07-28 one is not accepted).
var mcpRegistry = []mcpRevision{
	{"2025-03-26", 64},
	{"2025-06-18", 0},
	{"2025-11-25", 0},
}

const (
	// MCPDefaultVersion is what an mcp endpoint allows when the file
	// omits mcp or mcp.versions: exactly this revision, never "the
	// latest" (a registry that grows does not widen a policy).
	MCPDefaultVersion = "2025-11-25"
	// MCPFallbackVersion is the revision the MCP transport specification
	// assumes for a request without an MCP-Protocol-Version header; the
	// proxy assumes it too, and allows it only when the allowlist has it.
	MCPFallbackVersion = "2025-03-26"
	// DefaultMaxBodyBytes is the default bound of a request body read
	// for inspection (mcp.max_body_bytes, json_rpc.max_body_bytes,
	// graphql_max_body_bytes), as in OpenShell.
	DefaultMaxBodyBytes = 64 << 10
	// MaxInspectBodyBytes is the largest bound a policy may set: the
	// proxy holds each inspected body in memory until it is decided.
	MaxInspectBodyBytes = 1 << 20
	// MaxGraphQLBatchSize bounds graphql_max_batch_size (the same cap
	// MCP's 2025-03-26 batches have).
	MaxGraphQLBatchSize = 64
	// MCPToolCall is the MCP method whose params.name tool rules match.
	MCPToolCall = "tools/call"
)

// Reasons the body-inspected protocols give, beside L7DeniedByRule,
// L7NoRuleMatched and L7AccessDenied.
const (
	// L7BodyNotInspected: a REST check was asked of an endpoint whose
	// requests are decided by their bodies (never allowed).
	L7BodyNotInspected = "l7_body_not_inspected"
	// L7BodyTooLarge: the request body exceeds the endpoint's bound; it
	// is refused, never relayed uninspected.
	L7BodyTooLarge = "l7_body_too_large"
	// L7UnsupportedBody: a Content-Type or Content-Encoding the
	// inspector does not read.
	L7UnsupportedBody = "l7_unsupported_body"
	// L7HTTPMethod: an HTTP method the protocol does not carry.
	L7HTTPMethod = "l7_http_method"
	// L7MethodOverride: a method-override field or "_method" parameter
	// on a body-inspected request; a server honouring it would act on
	// another method than the inspector read.
	L7MethodOverride = "l7_method_override"

	JSONRPCInvalid       = "jsonrpc_invalid"        // not one JSON-RPC 2.0 message or batch (or not MCP's shape)
	JSONRPCResponseFrame = "jsonrpc_response_frame" // a response sent client to server (generic JSON-RPC)

	MCPVersionInvalid    = "mcp_version_invalid"     // MCP-Protocol-Version repeated, empty or not a registry revision (400)
	MCPVersionNotAllowed = "mcp_version_not_allowed" // a revision outside mcp.versions (403)
	MCPBatchRefused      = "mcp_batch_refused"       // a top-level array under a revision without batches
	MCPBatchTooLarge     = "mcp_batch_too_large"     // more members than the revision allows
	MCPToolNameInvalid   = "mcp_tool_name_invalid"   // a tools/call name outside the recommended syntax (strict_tool_names)

	GraphQLInvalid            = "graphql_invalid"             // no parsable operation, or an envelope servers could read otherwise
	GraphQLOperationAmbiguous = "graphql_operation_ambiguous" // several operations and no (or no single) operationName
	GraphQLPersistedQuery     = "graphql_persisted_query"     // a hash or id the policy does not register
	GraphQLBatchRefused       = "graphql_batch_refused"       // a batch without graphql_max_batch_size, or larger
)

// GraphQL values.
const (
	PersistedQueriesDeny            = "deny"
	PersistedQueriesAllowRegistered = "allow_registered"

	OperationQuery        = "query"
	OperationMutation     = "mutation"
	OperationSubscription = "subscription"
)

// MCPOptions are a protocol mcp endpoint's options, every one
// materialised by the loader.
type MCPOptions struct {
	// Versions is the MCP-Protocol-Version allowlist: nonempty, drawn
	// from the registry (MCPVersionKnown), in semantic order.
	Versions []string `json:"versions" yaml:"versions,flow"`
	// StrictToolNames (default true) refuses a tools/call whose
	// params.name does not have the MCP specification's recommended
	// tool-name syntax (ValidToolName) before any rule is read.
	StrictToolNames bool `json:"strict_tool_names" yaml:"strict_tool_names"`
	// MaxBodyBytes bounds a request body read for inspection; a larger
	// body is refused, never relayed uninspected.
	MaxBodyBytes int `json:"max_body_bytes" yaml:"max_body_bytes"`
}

// JSONRPCOptions are a protocol json-rpc endpoint's options.
type JSONRPCOptions struct {
	MaxBodyBytes int `json:"max_body_bytes" yaml:"max_body_bytes"`
}

// GraphQLOperation is a trusted classification of a persisted query
// (graphql_persisted_queries): the operation its hash or id stands for.
type GraphQLOperation struct {
	OperationType string `json:"operation_type" yaml:"operation_type"`
	OperationName string `json:"operation_name,omitempty" yaml:"operation_name,omitempty"`
}

// MCPVersionKnown reports whether v is a revision of the registry,
// spelt exactly.
func MCPVersionKnown(v string) bool { return mcpVersionIndex(v) >= 0 }

// MCPMaxBatch is how many messages a top-level JSON-RPC array may hold
// under revision v (0: none; false: v is not in the registry).
func MCPMaxBatch(v string) (int, bool) {
	i := mcpVersionIndex(v)
	if i < 0 {
		return 0, false
	}
	return mcpRegistry[i].maxBatch, true
}

// MCPVersions lists the registry in semantic order.
func MCPVersions() []string {
	out := make([]string, len(mcpRegistry))
	for i, r := range mcpRegistry {
		out[i] = r.version
	}
	return out
}

// mcpRevision is one entry of the registry.
type mcpRevision struct {
	version string
	// maxBatch is how many same-side messages a top-level JSON-RPC
	// array may hold (0: arrays are refused). 2025-03-26 permits
	// nonempty batches, capped at 64 here; later revisions removed them.
	maxBatch int
}

func mcpVersionIndex(v string) int {
	return slices.IndexFunc(mcpRegistry, func(r mcpRevision) bool { return r.version == v })
}

// sortMCPVersions puts an allowlist in semantic order.
func sortMCPVersions(vs []string) {
	slices.SortFunc(vs, func(a, b string) int { return mcpVersionIndex(a) - mcpVersionIndex(b) })
}

// toolNameRE is the MCP specification's recommended tool-name syntax
// (2025-11-25, server/tools, "Tool names").
var toolNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`) })

// ValidToolName reports whether name has the recommended tool-name
// syntax: 1 to 128 ASCII letters, digits, '_', '.' or '-'.
func ValidToolName(name string) bool { return toolNameRE().MatchString(name) }

// BodyInspected reports whether the proxy decides the endpoint's
// requests by their bodies (protocols mcp, json-rpc and graphql): such a
// request is read, up to MaxBodyBytes, before anything of it is relayed.
func (e *Endpoint) BodyInspected() bool {
	switch e.Protocol {
	case ProtocolMCP, ProtocolJSONRPC, ProtocolGraphQL:
		return true
	}
	return false
}

// MaxBodyBytes is the bound of a request body read for inspection on a
// BodyInspected endpoint (0 on any other).
func (e *Endpoint) MaxBodyBytes() int {
	switch {
	case e.Protocol == ProtocolMCP && e.MCP != nil:
		return e.MCP.MaxBodyBytes
	case e.Protocol == ProtocolJSONRPC && e.JSONRPC != nil:
		return e.JSONRPC.MaxBodyBytes
	case e.Protocol == ProtocolGraphQL:
		return e.GraphQLMaxBodyBytes
	}
	return 0
}

// MethodOverrideFields are the request fields web frameworks read as a
// request's real method (Symfony, OData, Google APIs); with the
// "_method" query parameter (Symfony, Laravel), a body-inspected
// request carrying one is refused.
var MethodOverrideFields = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// HasMethodOverride reports whether a request names another method
// than its own through MethodOverrideFields (read by field, folded as
// the proxy reads fields) or a "_method" query parameter.
func HasMethodOverride(field func(string) []string, query map[string][]string) bool {
	for _, f := range MethodOverrideFields {
		if len(field(f)) > 0 {
			return true
		}
	}
	for k := range query {
		if strings.EqualFold(strings.TrimSuffix(k, "[]"), "_method") {
			return true
		}
	}
	return false
}

// MatchGlob reports whether s matches a rule glob ("*" any run of
// characters, "?" exactly one; the path and query globs' syntax).
func MatchGlob(pattern, s string) bool { return pathGlob(pattern, s) }

// ToolMatcher returns an MCP rule's tool-name matcher (its params.name)
// and whether it has one.
func (m *RequestMatch) ToolMatcher() (QueryMatch, bool) {
	q, ok := m.Params["name"]
	return q, ok
}

// canonicalProtocol materialises the defaults of a body-inspected
// protocol's options (as the loader does) and puts an MCP allowlist in
// semantic order.
func canonicalProtocol(e *Endpoint) {
	switch e.Protocol {
	case ProtocolMCP:
		if e.MCP == nil {
			e.MCP = &MCPOptions{StrictToolNames: true}
		}
		if len(e.MCP.Versions) == 0 {
			e.MCP.Versions = []string{MCPDefaultVersion}
		}
		sortMCPVersions(e.MCP.Versions)
		e.MCP.Versions = slices.Compact(e.MCP.Versions)
		if e.MCP.MaxBodyBytes == 0 {
			e.MCP.MaxBodyBytes = DefaultMaxBodyBytes
		}
	case ProtocolJSONRPC:
		if e.JSONRPC == nil {
			e.JSONRPC = &JSONRPCOptions{}
		}
		if e.JSONRPC.MaxBodyBytes == 0 {
			e.JSONRPC.MaxBodyBytes = DefaultMaxBodyBytes
		}
	case ProtocolGraphQL:
		if e.PersistedQueries == "" {
			e.PersistedQueries = PersistedQueriesDeny
		}
		if e.GraphQLMaxBodyBytes == 0 {
			e.GraphQLMaxBodyBytes = DefaultMaxBodyBytes
		}
		if len(e.GraphQLPersistedQueries) == 0 {
			e.GraphQLPersistedQueries = nil
		}
	}
}
