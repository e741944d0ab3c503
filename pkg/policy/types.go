package policy

import (
	"net/netip"
	"slices"
)

// Values of enumerated fields.
const (
	CompatibilityBestEffort      = "best_effort"
	CompatibilityHardRequirement = "hard_requirement"

	EnforcementEnforce = "enforce"
	EnforcementAudit   = "audit"

	ProtocolREST    = "rest"     // L7 HTTP method/path inspection
	ProtocolTCP     = "tcp"      // explicit L4: policy DNS + transparent TCP
	ProtocolMCP     = "mcp"      // MCP over streamable HTTP: JSON-RPC bodies, methods and tools (mcp.go)
	ProtocolJSONRPC = "json-rpc" // generic JSON-RPC 2.0 over HTTP: methods only
	ProtocolGraphQL = "graphql"  // GraphQL over HTTP: operation types and names

	AccessReadOnly  = "read-only"
	AccessReadWrite = "read-write"
	AccessFull      = "full"

	TLSSkip      = "skip"      // do not detect or terminate TLS
	TLSTerminate = "terminate" // accepted for OpenShell compatibility; same as omitting tls

	// SandboxIdentity is the only non-numeric value run_as_user and
	// run_as_group accept, and their default.
	SandboxIdentity = "sandbox"
)

// Limits. OpenShell's are 256 filesystem paths (read_only and read_write
// combined) and 4096 characters per path; Palisade applies the same bounds
// to every list and string in the policy.
const (
	MaxPaths      = 256
	MaxPathLen    = 4096
	MaxListLen    = 256
	MaxPolicySize = 1 << 20 // bytes of YAML
	MaxNameLen    = 64
)

// Policy is one validated, normalised sandbox policy (OpenShell schema
// version 1, Palisade subset). Filesystem, Landlock and Process are static
// (fixed when a sandbox is created); NetworkPolicies is dynamic (the proxy
// reloads it).
type Policy struct {
	Version         int                       `json:"version" yaml:"version"`
	Filesystem      FilesystemPolicy          `json:"filesystem_policy" yaml:"filesystem_policy"`
	Landlock        Landlock                  `json:"landlock" yaml:"landlock"`
	Process         Process                   `json:"process" yaml:"process"`
	NetworkPolicies map[string]*NetworkPolicy `json:"network_policies" yaml:"network_policies"`
}

// FilesystemPolicy lists what Landlock lets the agent read and write.
// Paths are absolute and cleaned; every other path is inaccessible.
type FilesystemPolicy struct {
	// IncludeWorkdir adds the sandbox's working directory to ReadWrite.
	IncludeWorkdir bool     `json:"include_workdir" yaml:"include_workdir"`
	ReadOnly       []string `json:"read_only" yaml:"read_only"`
	ReadWrite      []string `json:"read_write" yaml:"read_write"`
}

// Landlock configures how a missing Landlock feature or path is handled.
type Landlock struct {
	// Compatibility is CompatibilityHardRequirement (Palisade's default:
	// abort when anything cannot be enforced) or CompatibilityBestEffort.
	Compatibility string `json:"compatibility" yaml:"compatibility"`
}

// Process is the identity the agent runs as: "sandbox" or a numeric ID in
// 1..4294967294, never root.
type Process struct {
	RunAsUser  string `json:"run_as_user" yaml:"run_as_user"`
	RunAsGroup string `json:"run_as_group" yaml:"run_as_group"`
}

// NetworkPolicy is one named entry of network_policies: the listed
// binaries may reach the listed endpoints.
type NetworkPolicy struct {
	// Name is the display name used in logs and events (the map key when
	// the file omits it).
	Name      string      `json:"name" yaml:"name"`
	Endpoints []*Endpoint `json:"endpoints" yaml:"endpoints"`
	Binaries  []Binary    `json:"binaries" yaml:"binaries"`
}

// Endpoint is a reachable destination and its optional L7 rules.
type Endpoint struct {
	// Host is a lower-case DNS name, a host pattern (see HostPattern) or an
	// IP literal; empty only when AllowedIPs is set and Protocol is not tcp.
	Host string `json:"host,omitempty" yaml:"host,omitempty"`
	// Ports holds the endpoint's ports, sorted (the file's port or ports).
	Ports []int `json:"ports" yaml:"ports,flow"`
	// Protocol is "" (plain proxy, no inspection), ProtocolREST,
	// ProtocolWebSocket, ProtocolTCP, or one of the protocols whose
	// request bodies the proxy reads (ProtocolMCP, ProtocolJSONRPC,
	// ProtocolGraphQL; see BodyInspected).
	Protocol string `json:"protocol,omitempty" yaml:"protocol,omitempty"`
	// TLS is "" (auto-detect) or TLSSkip.
	TLS string `json:"tls,omitempty" yaml:"tls,omitempty"`
	// Enforcement is EnforcementEnforce (default) or EnforcementAudit; empty
	// for tcp endpoints, which have no L7 rules to enforce.
	Enforcement string `json:"enforcement,omitempty" yaml:"enforcement,omitempty"`
	// Access is an L7 preset (read-only, read-write, full); exclusive with Rules.
	Access string `json:"access,omitempty" yaml:"access,omitempty"`
	// Rules are L7 allow rules; exclusive with Access.
	Rules []Rule `json:"rules,omitempty" yaml:"rules,omitempty"`
	// DenyRules block requests that Access or Rules would allow.
	DenyRules []RequestMatch `json:"deny_rules,omitempty" yaml:"deny_rules,omitempty"`
	// AllowedIPs are canonical CIDR prefixes ("10.0.0.0/8", "192.0.2.7/32")
	// the destination may resolve to despite the SSRF guard.
	AllowedIPs []string `json:"allowed_ips,omitempty" yaml:"allowed_ips,omitempty"`
	// CredentialBinding binds an endpointless provider of the
	// credentials file to this endpoint (see CredentialBinding).
	CredentialBinding *CredentialBinding `json:"credential_binding,omitempty" yaml:"credential_binding,omitempty"`
	// AllowUninspectedCredentials accepts that credential placeholders
	// travel unresolved on this endpoint's CONNECT tunnels when it is not
	// inspected (Inspected): without it, a binding to such an endpoint is
	// refused when the policy (and the credentials) load.
	AllowUninspectedCredentials bool `json:"allow_uninspected_credentials,omitempty" yaml:"allow_uninspected_credentials,omitempty"`
	// RequestBodyCredentialRewrite opts the endpoint in to resolving
	// credential placeholders in request bodies (JSON, form and text, at
	// most 256 KiB each); protocol rest only.
	RequestBodyCredentialRewrite bool `json:"request_body_credential_rewrite,omitempty" yaml:"request_body_credential_rewrite,omitempty"`
	// WebSocketCredentialRewrite opts a protocol websocket endpoint in
	// to resolving credential placeholders in the client's text
	// messages after the upgrade (OpenShell's key). Without it a bound
	// placeholder in a message is relayed as it is; an unbound one
	// closes the connection (1008) either way.
	WebSocketCredentialRewrite bool `json:"websocket_credential_rewrite,omitempty" yaml:"websocket_credential_rewrite,omitempty"`
	// CredentialSigning re-signs requests with AWS SigV4 and the AWS
	// credentials bound to the endpoint (SigningSigV4, SigningSigV4Body,
	// SigningSigV4NoBody; "" none); SigningService is the service signed
	// for, SigningRegion overrides the region the host names.
	CredentialSigning string `json:"credential_signing,omitempty" yaml:"credential_signing,omitempty"`
	SigningService    string `json:"signing_service,omitempty" yaml:"signing_service,omitempty"`
	SigningRegion     string `json:"signing_region,omitempty" yaml:"signing_region,omitempty"`
	// WebSocket holds a protocol: websocket endpoint's message rules.
	WebSocket *WebSocket `json:"websocket,omitempty" yaml:"websocket,omitempty"`
	// MCP holds a protocol mcp endpoint's options, materialised (never
	// nil on one, always nil on any other; see MCPOptions).
	MCP *MCPOptions `json:"mcp,omitempty" yaml:"mcp,omitempty"`
	// JSONRPC holds a protocol json-rpc endpoint's options, materialised.
	JSONRPC *JSONRPCOptions `json:"json_rpc,omitempty" yaml:"json_rpc,omitempty"`
	// GraphQL options of a protocol graphql endpoint (zero elsewhere):
	// PersistedQueries is PersistedQueriesDeny (materialised default) or
	// PersistedQueriesAllowRegistered, which admits a hash-only request
	// whose hash or id GraphQLPersistedQueries classifies;
	// GraphQLMaxBodyBytes bounds the body read for inspection
	// (materialised); GraphQLMaxBatchSize, when not 0, admits JSON array
	// batches of up to that many operations (each one decided), which
	// are refused otherwise.
	PersistedQueries        string                      `json:"persisted_queries,omitempty" yaml:"persisted_queries,omitempty"`
	GraphQLPersistedQueries map[string]GraphQLOperation `json:"graphql_persisted_queries,omitempty" yaml:"graphql_persisted_queries,omitempty"`
	GraphQLMaxBodyBytes     int                         `json:"graphql_max_body_bytes,omitempty" yaml:"graphql_max_body_bytes,omitempty"`
	GraphQLMaxBatchSize     int                         `json:"graphql_max_batch_size,omitempty" yaml:"graphql_max_batch_size,omitempty"`
}

// AccessAllows reports whether an access preset admits an HTTP method:
// read-only allows GET, HEAD and OPTIONS; read-write adds POST, PUT and
// PATCH; full allows every method. Unknown presets allow nothing.
func AccessAllows(access, method string) bool {
	switch access {
	case AccessFull:
		return true
	case AccessReadWrite:
		switch method {
		case "POST", "PUT", "PATCH":
			return true
		}
		fallthrough
	case AccessReadOnly:
		switch method {
		case "GET", "HEAD", "OPTIONS":
			return true
		}
	}
	return false
}

// Rule is one entry of an endpoint's rules list.
type Rule struct {
	Allow RequestMatch `json:"allow" yaml:"allow"`
}

// RequestMatch selects requests: an allow rule's body, or a deny rule.
// Which fields a rule holds depends on its endpoint's protocol: method,
// path and query for rest; method for json-rpc; method and params (the
// tools/call tool name) for mcp; operation_type and operation_name for
// graphql.
type RequestMatch struct {
	// Method is an upper-case HTTP method or "*" (rest), a JSON-RPC
	// method name or "*" (json-rpc), or an MCP method name, a glob only
	// within the "tools/" family (mcp).
	Method string `json:"method,omitempty" yaml:"method,omitempty"`
	// Path is a URL path glob starting with "/" ("*" and "**" match any
	// characters including "/", "?" one character), or "*" / "**".
	Path string `json:"path,omitempty" yaml:"path,omitempty"`
	// Query maps a decoded query parameter name to the globs it may match.
	Query map[string]QueryMatch `json:"query,omitempty" yaml:"query,omitempty"`
	// Params is an MCP rule's params matcher: only "name", the
	// tools/call tool name (the file's "tool" is the same matcher), on a
	// rule whose method is tools/call.
	Params map[string]QueryMatch `json:"params,omitempty" yaml:"params,omitempty"`
	// OperationType is a GraphQL rule's operation type: query,
	// mutation, subscription or "*".
	OperationType string `json:"operation_type,omitempty" yaml:"operation_type,omitempty"`
	// OperationName is a GraphQL rule's operation-name glob ("" matches
	// any name, an anonymous operation's included).
	OperationName string `json:"operation_name,omitempty" yaml:"operation_name,omitempty"`
}

// QueryMatch is a query parameter matcher: the value must match one of Any
// (the file's short form `name: glob` is one-element Any).
type QueryMatch struct {
	Any []string `json:"any" yaml:"any,flow"`
}

// Binary is an executable allowed to use an entry's endpoints: an absolute
// path or a glob ("*" within one path component, "**" any number of
// components). See MatchBinary.
type Binary struct {
	Path string `json:"path" yaml:"path"`
}

// AllowedPrefixes returns AllowedIPs parsed. Entries of a validated policy
// always parse; anything that does not is skipped (fail closed: fewer
// allowed addresses).
func (e *Endpoint) AllowedPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(e.AllowedIPs))
	for _, s := range e.AllowedIPs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// HostPattern compiles the endpoint's Host. It returns nil for a hostless
// endpoint or a host that does not compile (impossible after validation);
// a nil *HostPattern matches nothing.
func (e *Endpoint) HostPattern() *HostPattern {
	if e.Host == "" {
		return nil
	}
	p, err := CompileHostPattern(e.Host)
	if err != nil {
		return nil
	}
	return p
}

// HasPort reports whether port is one of the endpoint's ports.
func (e *Endpoint) HasPort(port int) bool { return slices.Contains(e.Ports, port) }

// Clone returns a deep copy of p.
func (p *Policy) Clone() *Policy {
	if p == nil {
		return nil
	}
	c := &Policy{
		Version: p.Version,
		Filesystem: FilesystemPolicy{
			IncludeWorkdir: p.Filesystem.IncludeWorkdir,
			ReadOnly:       slices.Clone(p.Filesystem.ReadOnly),
			ReadWrite:      slices.Clone(p.Filesystem.ReadWrite),
		},
		Landlock: p.Landlock,
		Process:  p.Process,
	}
	if p.NetworkPolicies != nil {
		c.NetworkPolicies = make(map[string]*NetworkPolicy, len(p.NetworkPolicies))
		for k, np := range p.NetworkPolicies {
			c.NetworkPolicies[k] = np.clone()
		}
	}
	return c
}

func (np *NetworkPolicy) clone() *NetworkPolicy {
	if np == nil {
		return nil
	}
	c := &NetworkPolicy{Name: np.Name, Binaries: slices.Clone(np.Binaries)}
	for _, ep := range np.Endpoints {
		c.Endpoints = append(c.Endpoints, ep.clone())
	}
	return c
}

func (e *Endpoint) clone() *Endpoint {
	if e == nil {
		return nil
	}
	c := *e
	c.Ports = slices.Clone(e.Ports)
	c.AllowedIPs = slices.Clone(e.AllowedIPs)
	if e.CredentialBinding != nil {
		b := *e.CredentialBinding
		c.CredentialBinding = &b
	}
	if e.MCP != nil {
		m := *e.MCP
		m.Versions = slices.Clone(e.MCP.Versions)
		c.MCP = &m
	}
	if e.JSONRPC != nil {
		j := *e.JSONRPC
		c.JSONRPC = &j
	}
	if e.GraphQLPersistedQueries != nil {
		c.GraphQLPersistedQueries = make(map[string]GraphQLOperation, len(e.GraphQLPersistedQueries))
		for k, op := range e.GraphQLPersistedQueries {
			c.GraphQLPersistedQueries[k] = op
		}
	}
	c.Rules = nil
	for _, r := range e.Rules {
		c.Rules = append(c.Rules, Rule{Allow: r.Allow.clone()})
	}
	c.DenyRules = nil
	for _, r := range e.DenyRules {
		c.DenyRules = append(c.DenyRules, r.clone())
	}
	c.WebSocket = e.WebSocket.clone()
	return &c
}

func (m RequestMatch) clone() RequestMatch {
	c := m
	c.Query = cloneMatchers(m.Query)
	c.Params = cloneMatchers(m.Params)
	return c
}

func cloneMatchers(m map[string]QueryMatch) map[string]QueryMatch {
	if m == nil {
		return nil
	}
	c := make(map[string]QueryMatch, len(m))
	for k, q := range m {
		c[k] = QueryMatch{Any: slices.Clone(q.Any)}
	}
	return c
}
