package ceiling

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/decision"
	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/l7/graphql"
	"github.com/palisade-sandbox/palisade/pkg/l7/jsonrpc"
	"github.com/palisade-sandbox/palisade/pkg/l7/rest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
)

// The oracle: what the proxy lets one request through, computed by the
// real code — pkg/decision picks the endpoint and says which names policy
// DNS answers, pkg/ssrf's guard checks the address,
// pkg/l7's Check judges HTTP requests under every reading of their path
// — and, for the transport, the conditions of the proxy's
// handle.go, inspect.go and transparent.go written out again here.

type transport int

const (
	tunnelSNI   transport = iota // CONNECT, bytes with a ClientHello naming the host
	tunnelOther                  // CONNECT, a ClientHello naming another host (or anything with tls: skip)
	native                       // raw bytes to a policy DNS synthetic address (transparent)
	httpReq                      // one HTTP request (forwarded or inspected)
)

type request struct {
	kind      transport
	host      string
	port      int
	binary    string
	ancestors []string
	addr      netip.Addr // the address the name resolves to
	method    string
	path      string
	query     url.Values
	ctype     string
	// cred names the provider whose placeholder the request carries
	// ("": none), in its body when credInBody, in a WebSocket text
	// message after its upgrade when credInMessage, else in a header
	// field.
	cred          string
	credInBody    bool
	credInMessage bool
	// body is a JSON request body (sent as application/json) and
	// version the MCP-Protocol-Version values, for the protocols that
	// read bodies; other endpoints never look at them.
	body    string
	version []string
}

func (r request) String() string {
	return fmt.Sprintf("{kind %d %s:%d %s<-%v addr %s %s %s?%s ct=%q cred=%q credInBody=%v body=%s version=%q}", r.kind, r.host, r.port, r.binary, r.ancestors, r.addr, r.method, r.path, r.query.Encode(), r.ctype, r.cred, r.credInBody || r.credInMessage, r.body, r.version)
}

var guard = &ssrf.Guard{ControlPlanePorts: []int{}}

// allowedBy says whether p lets r through and, for an HTTP request, what
// the proxy does to it with credentials on the way (credentialEffects;
// a refusal for a placeholder is an effect, not a refusal: it guards the
// credential, and a policy that passes the placeholder unresolved
// instead grants nothing more).
func allowedBy(p *policy.Policy, eng *decision.Engine, r request) (bool, []string) {
	res := eng.Decide(decision.Request{Host: r.host, Port: r.port, Binary: r.binary, Ancestors: r.ancestors})
	if !res.Allowed {
		return false, nil
	}
	addr := r.addr
	if a, ok := ssrf.ParseHostLiteral(r.host); ok {
		addr = a
	}
	if guard.CheckScope(netip.AddrPortFrom(addr, uint16(r.port)), res.Scope()) != nil {
		return false, nil
	}
	ep := res.Endpoint
	inspected := ep.TLS != policy.TLSSkip && (ep.Protocol == policy.ProtocolREST || ep.L7()) // handle.go, inspects
	switch r.kind {
	case tunnelSNI:
		return !inspected, nil
	case tunnelOther:
		return !inspected && ep.TLS == policy.TLSSkip, nil // connect(..., sni = TLS != skip)
	case native:
		// Bytes that are neither TLS nor HTTP to the name's synthetic
		// address: the name must be one policy DNS answers on the port,
		// and the tunnel one that relays them (transparent.go decides
		// and serves it as a CONNECT).
		n, ok := eng.Name(r.host)
		return ok && slices.Contains(n.Ports, r.port) && !inspected, nil
	}
	effects := credentialEffects(ep, r)
	if ep.BodyInspected() {
		return bodyAllowed(ep, res.Audit, r), effects
	}
	if !ep.L7() || res.Audit {
		return true, effects
	}
	path, err := l7.ParsePath(r.path)
	if err != nil {
		return false, nil
	}
	ok, _ := rest.Check(ep, &l7.Request{Method: r.method, Path: &path, Query: r.query, Field: func(name string) []string {
		if name == "Content-Type" && r.ctype != "" {
			return []string{r.ctype}
		}
		return nil
	}})
	return ok, effects
}

// credentialEffects is what the proxy's request preparation (pkg/proxy
// outgoing.go, after admission) does to an admitted HTTP request on
// endpoint ep, as far as the policy decides it (providers bound here by
// credential_binding; the credentials file's own endpoints are not the
// policy's): a placeholder of a provider the endpoint binds is resolved
// ("resolved:P"), one it does not bind is refused (false); a placeholder
// in a body is read only where the endpoint opts in and passes unread
// otherwise; one in a WebSocket text message is read only on a protocol
// websocket endpoint (whose messages the proxy reads), refused there
// when not bound, and resolved when bound only where the endpoint opts
// in (websocket_credential_rewrite; else relayed as it is, no effect);
// a credential_signing endpoint re-signs every request
// ("signed:SERVICE/REGION"). A policy is within its ceiling only if each
// request it lets through gets no effect the ceiling would not give it.
func credentialEffects(ep *policy.Endpoint, r request) []string {
	var out []string
	if ep.CredentialSigning != "" {
		out = append(out, "signed:"+ep.SigningService+"/"+ep.SigningRegion)
	}
	if r.cred == "" || r.credInBody && !ep.RequestBodyCredentialRewrite || r.credInMessage && ep.Protocol != policy.ProtocolWebSocket {
		return out
	}
	if ep.CredentialBinding == nil || ep.CredentialBinding.Provider != r.cred {
		return []string{"refused"} // credential_endpoint_mismatch: nothing goes (a message: close 1008)
	}
	if r.credInMessage && !ep.WebSocketCredentialRewrite {
		return out
	}
	return append(out, "resolved:"+r.cred)
}

// bodyAllowed is what pkg/l7/jsonrpc or pkg/l7/graphql let through of
// one request to a protocol mcp, json-rpc or graphql endpoint: what they
// allow, and under enforcement: audit their policy denials (403) too.
func bodyAllowed(ep *policy.Endpoint, audit bool, r request) bool {
	field := func(name string) []string {
		switch {
		case strings.EqualFold(name, "Content-Type") && r.ctype != "":
			return []string{r.ctype}
		case strings.EqualFold(name, jsonrpc.VersionField):
			return r.version
		case strings.EqualFold(name, "Accept"):
			return []string{"application/json, text/event-stream"}
		}
		return nil
	}
	var ok bool
	var status int
	if ep.Protocol == policy.ProtocolGraphQL {
		d := graphql.Decide(ep, &graphql.Request{Method: r.method, Query: r.query, Field: field, Body: []byte(r.body)})
		ok, status = d.Allowed, d.Status
	} else {
		d := jsonrpc.Decide(ep, &jsonrpc.Request{Method: r.method, Query: r.query, Field: field, Body: []byte(r.body)})
		ok, status = d.Allowed, d.Status
	}
	return ok || audit && status == 403
}

// bodyRead reports whether eng sends the HTTP request r to an endpoint
// that reads bodies.
func bodyRead(eng *decision.Engine, r request) bool {
	res := eng.Decide(decision.Request{Host: r.host, Port: r.port, Binary: r.binary, Ancestors: r.ancestors})
	return r.kind == httpReq && res.Allowed && res.Endpoint != nil && res.Endpoint.BodyInspected()
}

// fsAllowed is what Landlock grants: a path beneath a read_only entry is
// readable, beneath a read_write one writable too.
func fsAllowed(p *policy.Policy, x string, write bool) bool {
	roots := p.Filesystem.ReadWrite
	if !write {
		roots = append(slices.Clone(p.Filesystem.ReadOnly), roots...)
	}
	return slices.ContainsFunc(roots, func(r string) bool { return pathUnder(x, r) })
}

// The universe random policies are drawn from: small, so patterns,
// requests and the ceiling's entries collide often.
var (
	uLabels   = []string{"a", "b", "api", "x-y", "z9"}
	uDomains  = []string{"ex.test", "b.ex.test", "other.test"}
	uPorts    = []int{80, 443, 8080}
	uPatterns = []string{"/usr/bin/curl", "/usr/bin/git", "/usr/bin/python3*", "/opt/**/bin/pip", "/usr/bin/*", "/usr/**", "/bin/sh", "/usr/bin/[cg]*"}
	uBinaries = []string{"/usr/bin/curl", "/usr/bin/git", "/usr/bin/python3.11", "/opt/a/bin/pip", "/opt/bin/pip", "/bin/sh", "/usr/local/bin/x", "/usr/bin/gh"}
	uMethods  = []string{"GET", "POST", "*", "DELETE", "PUT"}
	uPaths    = []string{"/v1/**", "/v1/*/x", "/**", "/a?c", "/v2/items", "*", "/v1/items/*", "/repo/info/refs", "**/git-upload-pack", "/a?c/**", "**"}
	uFS       = []string{"/usr", "/usr/bin", "/opt", "/opt/data", "/etc", "/var/lib", "/var"}
	uRW       = []string{"/var", "/var/lib", "/srv", "/srv/x"}
	uIPs      = []string{"198.51.100.7", "10.1.2.3"}
	uAllowed  = []string{"10.0.0.0/8", "10.1.0.0/16", "198.51.100.0/24", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"}

	// The body-inspected protocols' universe.
	uMCPMethods = []string{"initialize", "tools/call", "tools/list", "tools/*", "ping", "notifications/initialized", "resources/read"}
	uRPCMethods = []string{"eth_call", "eth_send", "*", "ping", "tools/call"}
	uTools      = []string{"read_file", "write_file", "read_*", "*_file", "*", "r?ad_file"}
	uLaxTools   = []string{"read_file", "write_file", "send mail"}
	uCallTools  = []string{"read_file", "write_file", "read_dir", "send mail", "x"}
	uOpTypes    = []string{policy.OperationQuery, policy.OperationMutation, policy.OperationSubscription, "*"}
	uOpNames    = []string{"", "Get*", "GetUser", "DeleteUser", "*User"}
	uOpDocNames = []string{"", "GetUser", "DeleteUser", "GetRepo"}
	uHashes     = []string{"h1", "h2", "h3"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func randHost(r *rand.Rand) (host string, allowed []string) {
	switch r.IntN(9) {
	case 0, 1, 2:
		return pick(r, uLabels) + "." + pick(r, uDomains), nil
	case 3:
		return "*." + pick(r, uDomains), nil
	case 4:
		return "**." + pick(r, uDomains), nil
	case 5:
		return pick(r, []string{"a*", "*y", "x-*", "*"}) + "." + pick(r, uDomains), nil
	case 6:
		return pick(r, uIPs), nil
	case 7:
		return "", []string{pick(r, uAllowed)}
	}
	return "*." + pick(r, uDomains), []string{pick(r, uAllowed)}
}

func randMatch(r *rand.Rand) policy.RequestMatch {
	m := policy.RequestMatch{Method: pick(r, uMethods), Path: pick(r, uPaths)}
	if r.IntN(5) == 0 {
		m.Query = map[string]policy.QueryMatch{pick(r, []string{"service", "page"}): {Any: []string{pick(r, []string{"*", "git-upload-pack", "1*"})}}}
	}
	return m
}

func randEndpoint(r *rand.Rand) *policy.Endpoint {
	host, allowed := randHost(r)
	e := &policy.Endpoint{Host: host, AllowedIPs: allowed, Ports: []int{pick(r, uPorts)}}
	if r.IntN(3) == 0 {
		e.Ports = append(e.Ports, pick(r, uPorts))
	}
	switch r.IntN(7) {
	case 0, 1:
		e.Protocol = policy.ProtocolREST
		if r.IntN(2) == 0 {
			e.Access = pick(r, []string{policy.AccessReadOnly, policy.AccessReadWrite, policy.AccessFull})
		} else {
			for i := 1 + r.IntN(3); i > 0; i-- {
				e.Rules = append(e.Rules, policy.Rule{Allow: randMatch(r)})
			}
		}
		if r.IntN(3) == 0 {
			e.DenyRules = []policy.RequestMatch{randMatch(r)}
		}
		if r.IntN(6) == 0 {
			e.Enforcement = policy.EnforcementAudit
		}
		randCredentials(r, e)
	case 2:
		e.Protocol = policy.ProtocolTCP
	case 3:
		e.TLS = policy.TLSSkip
	case 4, 5:
		randBodyEndpoint(r, e)
	}
	return e
}

// The providers and AWS services credential fields name.
var (
	uProviders = []string{"p1", "p2"}
	uServices  = []string{"s3", "sts"}
	uRegions   = []string{"", "us-east-1"}
)

// randCredentials gives a protocol rest endpoint credential fields now
// and then: a binding, and body rewrite or SigV4 signing (never both).
func randCredentials(r *rand.Rand, e *policy.Endpoint) {
	if r.IntN(3) == 0 {
		e.CredentialBinding = &policy.CredentialBinding{Provider: pick(r, uProviders)}
	}
	switch r.IntN(6) {
	case 0:
		e.RequestBodyCredentialRewrite = true
	case 1:
		e.CredentialSigning, e.SigningService, e.SigningRegion = policy.SigningSigV4, pick(r, uServices), pick(r, uRegions)
	}
}

// randBodyEndpoint makes e a protocol mcp, json-rpc or graphql endpoint.
func randBodyEndpoint(r *rand.Rand, e *policy.Endpoint) {
	e.Host, e.AllowedIPs = pick(r, uLabels)+"."+pick(r, uDomains), nil
	e.Protocol = pick(r, []string{policy.ProtocolMCP, policy.ProtocolJSONRPC, policy.ProtocolGraphQL})
	n := 1 + r.IntN(3)
	switch e.Protocol {
	case policy.ProtocolMCP:
		e.MCP = &policy.MCPOptions{StrictToolNames: r.IntN(4) > 0, MaxBodyBytes: pick(r, []int{policy.DefaultMaxBodyBytes, 4096})}
		for _, v := range policy.MCPVersions() {
			if r.IntN(2) == 0 {
				e.MCP.Versions = append(e.MCP.Versions, v)
			}
		}
		for ; n > 0; n-- {
			e.Rules = append(e.Rules, policy.Rule{Allow: randMCPMatch(r, e.MCP.StrictToolNames)})
		}
		if r.IntN(3) == 0 {
			e.DenyRules = []policy.RequestMatch{randMCPMatch(r, e.MCP.StrictToolNames)}
		}
	case policy.ProtocolJSONRPC:
		e.JSONRPC = &policy.JSONRPCOptions{}
		for ; n > 0; n-- {
			e.Rules = append(e.Rules, policy.Rule{Allow: policy.RequestMatch{Method: pick(r, uRPCMethods)}})
		}
		if r.IntN(3) == 0 {
			e.DenyRules = []policy.RequestMatch{{Method: pick(r, uRPCMethods)}}
		}
	case policy.ProtocolGraphQL:
		if r.IntN(2) == 0 {
			e.Access = pick(r, []string{policy.AccessReadOnly, policy.AccessReadWrite, policy.AccessFull})
		} else {
			for ; n > 0; n-- {
				e.Rules = append(e.Rules, policy.Rule{Allow: randGQLMatch(r)})
			}
		}
		if r.IntN(3) == 0 {
			e.DenyRules = []policy.RequestMatch{randGQLMatch(r)}
		}
		if r.IntN(3) == 0 {
			e.GraphQLMaxBatchSize = 1 + r.IntN(3)
		}
		if r.IntN(3) == 0 {
			e.PersistedQueries = policy.PersistedQueriesAllowRegistered
			e.GraphQLPersistedQueries = map[string]policy.GraphQLOperation{}
			for _, h := range uHashes[:1+r.IntN(len(uHashes))] {
				e.GraphQLPersistedQueries[h] = policy.GraphQLOperation{OperationType: pick(r, uOpTypes[:3]), OperationName: pick(r, uOpDocNames)}
			}
		}
	}
	if r.IntN(6) == 0 {
		e.Enforcement = policy.EnforcementAudit
	}
	if r.IntN(4) == 0 {
		e.CredentialBinding = &policy.CredentialBinding{Provider: pick(r, uProviders)}
	}
}

func randMCPMatch(r *rand.Rand, strict bool) policy.RequestMatch {
	m := policy.RequestMatch{Method: pick(r, uMCPMethods)}
	if m.Method == policy.MCPToolCall && r.IntN(3) > 0 {
		tools := uLaxTools
		if strict {
			tools = uTools
		}
		q := policy.QueryMatch{Any: []string{pick(r, tools)}}
		if r.IntN(3) == 0 {
			q.Any = append(q.Any, pick(r, tools))
		}
		m.Params = map[string]policy.QueryMatch{"name": q}
	}
	return m
}

func randGQLMatch(r *rand.Rand) policy.RequestMatch {
	return policy.RequestMatch{OperationType: pick(r, uOpTypes), OperationName: pick(r, uOpNames)}
}

// narrowBody narrows or widens what a body-inspected endpoint admits.
func narrowBody(r *rand.Rand, e *policy.Endpoint) {
	switch r.IntN(9) {
	case 6:
		e.DenyRules = nil
	case 7:
		e.GraphQLMaxBatchSize++
		if e.MCP != nil {
			e.MCP.StrictToolNames = false
			for i := range e.Rules {
				if _, ok := e.Rules[i].Allow.ToolMatcher(); ok {
					e.Rules[i].Allow.Params = map[string]policy.QueryMatch{"name": {Any: []string{pick(r, uLaxTools)}}}
				}
			}
			e.DenyRules = nil
		}
	case 8:
		if e.Protocol == policy.ProtocolGraphQL {
			e.PersistedQueries = policy.PersistedQueriesAllowRegistered
			if e.GraphQLPersistedQueries == nil {
				e.GraphQLPersistedQueries = map[string]policy.GraphQLOperation{}
			}
			e.GraphQLPersistedQueries[pick(r, uHashes)] = policy.GraphQLOperation{OperationType: pick(r, uOpTypes[:3]), OperationName: pick(r, uOpDocNames)}
		}
		for i := range e.Rules {
			if q, ok := e.Rules[i].Allow.ToolMatcher(); ok && e.MCP.StrictToolNames {
				e.Rules[i].Allow.Params = map[string]policy.QueryMatch{"name": {Any: append(slices.Clone(q.Any), pick(r, uTools))}}
			}
		}
	case 0:
		if e.MCP != nil && len(e.MCP.Versions) > 1 {
			e.MCP.Versions = e.MCP.Versions[1:]
		}
	case 1:
		if e.MCP != nil && r.IntN(2) == 0 {
			e.MCP.StrictToolNames = !e.MCP.StrictToolNames
		}
		e.GraphQLMaxBatchSize = r.IntN(3)
	case 2:
		for i := range e.Rules {
			if q, ok := e.Rules[i].Allow.ToolMatcher(); ok && len(q.Any) > 0 {
				e.Rules[i].Allow.Params = map[string]policy.QueryMatch{"name": {Any: q.Any[:1]}}
			}
			if e.Rules[i].Allow.OperationName == "" && e.Protocol == policy.ProtocolGraphQL {
				e.Rules[i].Allow.OperationName = pick(r, uOpNames)
			}
		}
	case 3:
		if e.Protocol == policy.ProtocolMCP {
			e.DenyRules = append(e.DenyRules, randMCPMatch(r, e.MCP.StrictToolNames))
		} else if e.Protocol == policy.ProtocolGraphQL {
			e.DenyRules = append(e.DenyRules, randGQLMatch(r))
		}
	case 4:
		if e.MCP != nil {
			e.MCP.Versions = append(e.MCP.Versions, pick(r, policy.MCPVersions()))
		}
		if e.Protocol == policy.ProtocolGraphQL && e.PersistedQueries == policy.PersistedQueriesAllowRegistered {
			e.GraphQLPersistedQueries[pick(r, uHashes)] = policy.GraphQLOperation{OperationType: pick(r, uOpTypes[:3])}
		}
	case 5:
		if len(e.Rules) > 0 {
			i := r.IntN(len(e.Rules))
			switch e.Protocol {
			case policy.ProtocolMCP:
				e.Rules[i].Allow = randMCPMatch(r, e.MCP.StrictToolNames)
			case policy.ProtocolJSONRPC:
				e.Rules[i].Allow = policy.RequestMatch{Method: pick(r, uRPCMethods)}
			default:
				e.Rules[i].Allow = randGQLMatch(r)
			}
		}
	}
}

func randPolicy(r *rand.Rand) *policy.Policy {
	p := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{},
		Landlock: policy.Landlock{Compatibility: pick(r, []string{policy.CompatibilityHardRequirement, policy.CompatibilityHardRequirement, policy.CompatibilityBestEffort})},
		Process:  policy.Process{RunAsUser: pick(r, []string{"sandbox", "sandbox", "1500"}), RunAsGroup: "sandbox"}}
	for i := 0; i < 1+r.IntN(3); i++ {
		if r.IntN(2) == 0 {
			p.Filesystem.ReadOnly = append(p.Filesystem.ReadOnly, pick(r, uFS))
		} else {
			p.Filesystem.ReadWrite = append(p.Filesystem.ReadWrite, pick(r, uRW))
		}
	}
	p.Filesystem.IncludeWorkdir = r.IntN(3) == 0
	for e := 0; e < 1+r.IntN(4); e++ {
		np := &policy.NetworkPolicy{}
		for i := 0; i < 1+r.IntN(2); i++ {
			np.Binaries = append(np.Binaries, policy.Binary{Path: pick(r, uPatterns)})
		}
		for i := 0; i < 1+r.IntN(3); i++ {
			np.Endpoints = append(np.Endpoints, randEndpoint(r))
		}
		p.NetworkPolicies[fmt.Sprintf("e%d", e)] = np
	}
	return p
}

// narrow returns a policy derived from c by dropping and narrowing parts
// and, now and then, widening one: pairs near containment, both ways.
func narrow(r *rand.Rand, c *policy.Policy) *policy.Policy {
	p := c.Clone()
	p.Filesystem.ReadOnly = dropSome(r, p.Filesystem.ReadOnly)
	p.Filesystem.ReadWrite = dropSome(r, p.Filesystem.ReadWrite)
	if r.IntN(6) == 0 {
		p.Filesystem.ReadWrite = append(p.Filesystem.ReadWrite, pick(r, uRW))
	}
	if r.IntN(6) == 0 {
		p.Filesystem.IncludeWorkdir = true
	}
	if r.IntN(8) == 0 {
		p.Landlock.Compatibility = policy.CompatibilityBestEffort
	}
	for i, x := range p.Filesystem.ReadOnly {
		if r.IntN(3) == 0 {
			p.Filesystem.ReadOnly[i] = x + "/sub"
		}
	}
	for key, np := range p.NetworkPolicies {
		if r.IntN(4) == 0 {
			delete(p.NetworkPolicies, key)
			continue
		}
		if len(np.Binaries) > 1 && r.IntN(2) == 0 {
			np.Binaries = np.Binaries[:1]
		}
		if r.IntN(4) == 0 {
			np.Binaries[0].Path = pick(r, uBinaries)
		}
		var eps []*policy.Endpoint
		for _, e := range np.Endpoints {
			if r.IntN(4) == 0 {
				continue
			}
			narrowEndpoint(r, e)
			if r.IntN(4) == 0 {
				widenEndpoint(r, e)
			}
			if e.CredentialBinding != nil && r.IntN(3) == 0 {
				widenCredentials(r, e)
			}
			if e.BodyInspected() && r.IntN(4) > 0 {
				narrowBody(r, e)
			}
			eps = append(eps, e)
		}
		if len(eps) == 0 {
			eps = []*policy.Endpoint{randEndpoint(r)}
		}
		np.Endpoints = eps
	}
	if r.IntN(5) == 0 {
		p.NetworkPolicies["extra"] = &policy.NetworkPolicy{Binaries: []policy.Binary{{Path: pick(r, uPatterns)}}, Endpoints: []*policy.Endpoint{randEndpoint(r)}}
	}
	return p
}

func narrowEndpoint(r *rand.Rand, e *policy.Endpoint) {
	if len(e.Ports) > 1 {
		e.Ports = e.Ports[:1]
	}
	if strings.HasPrefix(e.Host, "*.") || strings.HasPrefix(e.Host, "**.") {
		if r.IntN(2) == 0 {
			_, suffix, _ := strings.Cut(e.Host, ".")
			e.Host = pick(r, uLabels) + "." + suffix
		}
	}
	switch r.IntN(8) {
	case 0:
		if e.Protocol == "" && e.TLS == "" {
			e.Protocol, e.Access = policy.ProtocolREST, pick(r, []string{policy.AccessReadOnly, policy.AccessReadWrite})
		}
	case 1:
		if e.Access == policy.AccessReadWrite || e.Access == policy.AccessFull {
			e.Access = policy.AccessReadOnly
		}
	case 2:
		if len(e.Rules) > 1 {
			e.Rules = e.Rules[:1]
		}
	case 3:
		for i := range e.Rules {
			if e.Rules[i].Allow.Method == "*" {
				e.Rules[i].Allow.Method = "GET"
			}
			if e.Rules[i].Allow.Path == "/**" || e.Rules[i].Allow.Path == "*" {
				e.Rules[i].Allow.Path = "/v1/items/*"
			}
		}
	case 4:
		e.Enforcement = policy.EnforcementEnforce
	case 5:
		if e.Protocol == policy.ProtocolREST {
			e.DenyRules = append(e.DenyRules, randMatch(r))
		}
	case 6:
		e.CredentialBinding = nil
		e.RequestBodyCredentialRewrite = false
	case 7:
		e.CredentialSigning, e.SigningService, e.SigningRegion = "", "", ""
	}
}

// widenEndpoint makes one change that may take e beyond what it was.
func widenEndpoint(r *rand.Rand, e *policy.Endpoint) {
	switch r.IntN(8) {
	case 0:
		e.Host, e.AllowedIPs = randHost(r)
	case 1:
		if e.Protocol == "" {
			e.TLS = policy.TLSSkip
		}
	case 2:
		e.DenyRules = nil
	case 3:
		if e.Access == policy.AccessReadOnly || e.Access == policy.AccessReadWrite {
			e.Access = ""
			e.Rules = []policy.Rule{{Allow: policy.RequestMatch{Method: "GET", Path: pick(r, []string{"/v1/**", "/repo/info/refs", "/v2/items"})}}}
		}
	case 4:
		for i := range e.Rules {
			e.Rules[i].Allow.Path = strings.ReplaceAll(e.Rules[i].Allow.Path, "?", "*")
		}
	case 5:
		first, suffix, _ := strings.Cut(e.Host, ".")
		switch first {
		case "*":
			e.Host = "**." + suffix
		case "**":
			if _, parent, ok := strings.Cut(suffix, "."); ok && strings.Contains(parent, ".") {
				e.Host = "**." + parent
			}
		}
	case 6:
		e.Enforcement = policy.EnforcementAudit
	case 7:
		widenCredentials(r, e)
	}
}

// widenCredentials makes one change to a protocol rest endpoint's
// credential fields that may take it beyond what it was: another (or a
// first) binding, body rewrite, signing (for another service or region).
func widenCredentials(r *rand.Rand, e *policy.Endpoint) {
	if e.Protocol != policy.ProtocolREST {
		return
	}
	switch r.IntN(3) {
	case 0:
		e.CredentialBinding = &policy.CredentialBinding{Provider: pick(r, uProviders)}
	case 1:
		e.RequestBodyCredentialRewrite = e.CredentialSigning == ""
	case 2:
		if !e.RequestBodyCredentialRewrite {
			e.CredentialSigning, e.SigningService, e.SigningRegion = policy.SigningSigV4, pick(r, uServices), pick(r, uRegions)
		}
	}
}

func dropSome(r *rand.Rand, s []string) []string {
	var out []string
	for _, x := range s {
		if r.IntN(3) > 0 {
			out = append(out, x)
		}
	}
	return out
}

// valid normalises p through the loader; nil when the loader refuses it.
func valid(p *policy.Policy) *policy.Policy {
	q, err := policy.Parse(p.Canonical())
	if err != nil {
		return nil
	}
	return q
}

// instances returns names a host pattern selects (and a few it does not).
func instances(r *rand.Rand, host string) []string {
	if host == "" {
		return []string{pick(r, uLabels) + "." + pick(r, uDomains), pick(r, uIPs), "10.1.9.9"}
	}
	first, suffix, _ := strings.Cut(host, ".")
	label := func() string {
		return strings.ReplaceAll(first, "*", pick(r, []string{"", "a", "q-", "x-y"}))
	}
	switch {
	case first == "*":
		return []string{pick(r, uLabels) + "." + suffix, "q." + suffix}
	case first == "**":
		return []string{pick(r, uLabels) + "." + suffix, "a.b." + suffix, "q." + pick(r, uLabels) + "." + suffix}
	case strings.Contains(first, "*"):
		return []string{label() + "." + suffix, label() + "." + suffix}
	}
	return []string{host}
}

// paths returns request paths a rule glob matches, and some it does not.
func paths(r *rand.Rand, g string) []string {
	fill := func() string {
		return pick(r, []string{"", "x", "items/7", "a/b", "info/refs", "q"})
	}
	var out []string
	for i := 0; i < 3; i++ {
		s := strings.ReplaceAll(g, "**", "*")
		var b strings.Builder
		for _, c := range s {
			switch c {
			case '*':
				b.WriteString(fill())
			case '?':
				b.WriteByte(pick(r, []byte("bxZ/")))
			default:
				b.WriteRune(c)
			}
		}
		p := b.String()
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		out = append(out, p)
	}
	return append(out, "/repo/info/refs", "/r/git-upload-pack", "/v1/items/7", "/V1/Items/7", "/v1/x/",
		"/v1/%C3%A9", "/a%2Fc", "/v1;x/items", "/v2/items.")
}

func randRequests(r *rand.Rand, p, c *policy.Policy, n int) []request {
	var hosts []string
	var globs []string
	for _, pol := range []*policy.Policy{p, c} {
		for _, np := range pol.NetworkPolicies {
			for _, e := range np.Endpoints {
				hosts = append(hosts, instances(r, e.Host)...)
				for _, ru := range e.Rules {
					if ru.Allow.Path != "" {
						globs = append(globs, ru.Allow.Path)
					}
				}
				for _, d := range e.DenyRules {
					if d.Path != "" {
						globs = append(globs, d.Path)
					}
				}
			}
		}
	}
	globs = append(globs, "/**")
	pool := map[string][]policy.RequestMatch{} // the body-inspected rules, by protocol
	for _, pol := range []*policy.Policy{p, c} {
		for _, np := range pol.NetworkPolicies {
			for _, e := range np.Endpoints {
				if !e.BodyInspected() {
					continue
				}
				for _, ru := range e.Rules {
					pool[e.Protocol] = append(pool[e.Protocol], ru.Allow)
				}
				pool[e.Protocol] = append(pool[e.Protocol], e.DenyRules...)
			}
		}
	}
	out := make([]request, 0, n)
	for i := 0; i < n; i++ {
		q := request{
			kind:   transport(r.IntN(4)),
			host:   pick(r, hosts),
			port:   pick(r, uPorts),
			binary: pick(r, uBinaries),
			addr:   netip.MustParseAddr(pick(r, []string{"198.51.100.7", "10.1.2.3", "172.16.0.1", "fd00::1", "10.9.0.5", "192.168.1.1"})),
			method: pick(r, []string{"GET", "POST", "get", "DELETE", "PUT", "HEAD", "PATCH", "Post"}),
			path:   pick(r, paths(r, pick(r, globs))),
		}
		if r.IntN(3) == 0 {
			q.ancestors = []string{pick(r, uBinaries)}
		}
		var aimed *policy.Endpoint
		if r.IntN(2) == 0 {
			aimed = aimAt(r, p, &q)
			if r.IntN(2) == 0 {
				// An ancestor some ceiling entry lists: it can make a
				// ceiling endpoint outrank the one that covers q.
				var other request
				aimAt(r, c, &other)
				q.ancestors = []string{other.binary}
			}
		}
		switch r.IntN(4) {
		case 0:
			q.query = url.Values{"service": {pick(r, []string{"git-receive-pack", "git-upload-pack"})}}
		case 1:
			q.query = url.Values{"page": {pick(r, []string{"1", "12", "x"})}}
		}
		if r.IntN(3) == 0 {
			q.ctype = policy.GitUploadPackRequestType
		}
		if r.IntN(2) == 0 {
			q.cred, q.credInBody = pick(r, uProviders), r.IntN(3) == 0
			q.credInMessage = !q.credInBody && r.IntN(3) == 0
		}
		if q.kind == httpReq && r.IntN(2) == 0 {
			randBody(r, &q)
		}
		if aimed != nil && aimed.BodyInspected() && r.IntN(4) > 0 {
			aimBody(r, aimed, pool[aimed.Protocol], &q)
		}
		out = append(out, q)
	}
	return out
}

// aimBody makes q an HTTP request to e (a body-inspected endpoint) whose
// body one of the rules in pool (of e's protocol) matches, or nearly.
func aimBody(r *rand.Rand, e *policy.Endpoint, pool []policy.RequestMatch, q *request) {
	q.kind, q.method, q.ctype, q.query, q.version = httpReq, "POST", "application/json", nil, nil
	m := policy.RequestMatch{Method: "*", OperationType: "*"}
	if len(pool) > 0 {
		m = pick(r, pool)
	}
	fill := func(g string) string {
		g = strings.ReplaceAll(g, "*", pick(r, []string{"", "file", "_file", "call", "x"}))
		return strings.ReplaceAll(g, "?", pick(r, []string{"e", "a", "_"}))
	}
	if e.Protocol == policy.ProtocolGraphQL {
		typ := m.OperationType
		if typ == "*" || typ == "" {
			typ = pick(r, uOpTypes[:3])
		}
		names := slices.DeleteFunc(slices.Clone(uOpDocNames), func(n string) bool { return m.OperationName != "" && !policy.MatchGlob(m.OperationName, n) })
		if len(names) == 0 {
			names = uOpDocNames
		}
		doc := typ + " " + pick(r, names) + " { a }"
		switch r.IntN(6) {
		case 0:
			q.body = fmt.Sprintf(`{"extensions":{"persistedQuery":{"version":1,"sha256Hash":%q}}}`, pick(r, uHashes))
			return
		case 1:
			q.body = fmt.Sprintf(`[{"query":%q},{"query":%q}]`, doc, doc)
			return
		}
		if r.IntN(4) == 0 {
			q.method, q.ctype, q.query = "GET", "", url.Values{"query": {doc}}
			return
		}
		q.body = fmt.Sprintf(`{"query":%q}`, doc)
		return
	}
	if e.MCP != nil && r.IntN(5) > 0 {
		q.version = []string{pick(r, e.MCP.Versions)}
	}
	method := fill(m.Method)
	if m.Method == "*" {
		method = pick(r, uRPCMethods[:2])
	}
	switch {
	case method == policy.MCPToolCall:
		tool := pick(r, uCallTools)
		if t, ok := m.ToolMatcher(); ok {
			tool = fill(pick(r, t.Any))
		}
		q.body = fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q}}`, tool)
	case method == "initialize":
		q.body = fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q}}`, pick(r, policy.MCPVersions()))
	case strings.HasPrefix(method, "notifications/"):
		q.body = fmt.Sprintf(`{"jsonrpc":"2.0","method":%q}`, method)
	default:
		q.body = fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":%q}`, method)
	}
}

// randBody gives q a JSON-RPC or GraphQL body (or a GraphQL GET).
func randBody(r *rand.Rand, q *request) {
	q.method = pick(r, []string{"POST", "POST", "POST", "GET", "post"})
	q.version = pick(r, [][]string{nil, {"2025-11-25"}, {"2025-06-18"}, {"2025-03-26"}, {"2025-11-25", "2025-11-25"}, {"latest"}, {""}})
	if q.method == "GET" && r.IntN(2) == 0 {
		q.query = url.Values{"query": {gqlDoc(r)}}
		return
	}
	if q.method == "GET" {
		return // an MCP event stream, or nothing
	}
	q.ctype = "application/json"
	var one func() string
	switch r.IntN(3) {
	case 0:
		one = func() string {
			if r.IntN(4) == 0 {
				return fmt.Sprintf(`{"extensions":{"persistedQuery":{"version":1,"sha256Hash":%q}}}`, pick(r, uHashes))
			}
			return fmt.Sprintf(`{"query":%q}`, gqlDoc(r))
		}
	default:
		one = func() string { return rpcMessage(r) }
	}
	q.body = one()
	if r.IntN(5) == 0 {
		q.body = "[" + q.body + "," + one() + "]"
	}
}

func gqlDoc(r *rand.Rand) string {
	return fmt.Sprintf("%s %s { a }", pick(r, uOpTypes[:3]), pick(r, uOpDocNames))
}

func rpcMessage(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return `{"jsonrpc":"2.0","id":1,"result":{}}`
	case 1:
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q}}`, pick(r, policy.MCPVersions()))
	case 2:
		return fmt.Sprintf(`{"jsonrpc":"2.0","method":%q}`, pick(r, []string{"notifications/initialized", "ping", "eth_send"}))
	case 3, 4, 5:
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, pick(r, uCallTools))
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":%q,"params":{}}`, pick(r, append([]string{"tools/list", "resources/read", "eth_call"}, uRPCMethods[:2]...)))
}

// binsCache holds, per entry, the universe's binaries its patterns match.
var binsCache = map[*policy.NetworkPolicy][]string{}

// aimAt points q at one endpoint of p: a destination it selects, one of
// its ports, a binary its entry lists, a path one of its rules matches.
func aimAt(r *rand.Rand, p *policy.Policy, q *request) *policy.Endpoint {
	keys := sortedKeys(p.NetworkPolicies)
	if len(keys) == 0 {
		return nil
	}
	np := p.NetworkPolicies[pick(r, keys)]
	e := pick(r, np.Endpoints)
	q.host = pick(r, instances(r, e.Host))
	q.port = pick(r, e.Ports)
	bins, ok := binsCache[np]
	if !ok {
		for _, b := range uBinaries {
			if slices.ContainsFunc(np.Binaries, func(pb policy.Binary) bool { return policy.MatchBinary(pb.Path, b) }) {
				bins = append(bins, b)
			}
		}
		binsCache[np] = bins
	}
	if len(bins) > 0 {
		q.binary = pick(r, bins)
	}
	if len(e.Rules) > 0 && !e.BodyInspected() {
		ru := pick(r, e.Rules).Allow
		q.path = pick(r, paths(r, ru.Path))
		if ru.Method != "*" && r.IntN(4) > 0 {
			q.method = ru.Method
		}
	}
	return e
}

// Containment agrees with brute force: whenever Contains proves p within
// c, no generated request (nor filesystem access) is allowed by p and
// refused by c, judged by the real decision, SSRF, policy DNS and L7 code.
// The pairs are random policies and narrowed copies of them, so both
// proofs and refusals are common; the test fails when too few pairs are
// proved (a prover that refuses everything is sound and useless).
func TestContainsAgreesWithBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 2026))
	proved, refused, witnessed := 0, 0, 0
	bodyProved, bodyWitnessed := 0, 0 // the same, for requests read by their bodies
	for round := 0; round < 4000; round++ {
		c := valid(randPolicy(r))
		if c == nil {
			continue
		}
		p := valid(narrow(r, c))
		if p == nil {
			continue
		}
		pe, err := decision.Compile(p, 1)
		if err != nil {
			t.Fatal(err)
		}
		ce, err := decision.Compile(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		xs := Contains(c, p, Options{})
		clear(binsCache)
		reqs := randRequests(r, p, c, 400)
		var witness *request
		bodyAllowedByP := false
		for i := range reqs {
			pOK, pEffects := allowedBy(p, pe, reqs[i])
			cOK, cEffects := allowedBy(c, ce, reqs[i])
			if slices.Contains(pEffects, "refused") {
				continue
			}
			bodyAllowedByP = bodyAllowedByP || pOK && bodyRead(pe, reqs[i])
			if slices.Contains(cEffects, "refused") {
				cEffects = nil
			}
			if pOK && (!cOK || !subset(pEffects, cEffects)) {
				witness = &reqs[i]
				break
			}
		}
		fsWitness := ""
		for _, x := range append(append(slices.Clone(uFS), uRW...), "/usr/bin/x", "/opt/data/f", "/var/lib/y", "/etc/sub", "/srv/x/y") {
			for _, w := range []bool{false, true} {
				if fsAllowed(p, x, w) && !fsAllowed(c, x, w) {
					fsWitness = fmt.Sprintf("%s write=%v", x, w)
				}
			}
		}
		if len(xs) == 0 {
			proved++
			if bodyAllowedByP {
				bodyProved++
			}
			if witness != nil || fsWitness != "" {
				t.Fatalf("round %d: Contains proved p within c, but %v %s is allowed by p and refused by c\nceiling: %s\npolicy: %s", round, witness, fsWitness, c.Canonical(), p.Canonical())
			}
			continue
		}
		refused++
		if witness != nil || fsWitness != "" {
			witnessed++
		}
		if witness != nil && bodyRead(pe, *witness) {
			bodyWitnessed++
		}
	}
	t.Logf("proved %d, refused %d (%d with a witness of excess); protocols mcp, json-rpc, graphql: %d proved with a body request allowed, %d refused with a body witness", proved, refused, witnessed, bodyProved, bodyWitnessed)
	if proved < 250 || witnessed < 700 || bodyProved < 80 || bodyWitnessed < 90 {
		t.Fatalf("weak coverage: proved %d, refused with a witness %d; body requests: proved %d, witnessed %d", proved, witnessed, bodyProved, bodyWitnessed)
	}
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// Every policy is within itself: the prover's incompleteness never
// refuses a policy as its own ceiling (a union-free comparison, and each
// endpoint that outranks another in the ceiling outranks it in the policy
// too).
func TestContainsIsReflexive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	n := 0
	for round := 0; round < 2000; round++ {
		p := valid(randPolicy(r))
		if p == nil {
			continue
		}
		n++
		if xs := Contains(p, p, Options{}); len(xs) > 0 {
			t.Fatalf("round %d: a policy is not within itself: %v\n%s", round, xs[0], p.Canonical())
		}
	}
	if n < 500 {
		t.Fatalf("only %d valid policies", n)
	}
}
