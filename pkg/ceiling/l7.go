package ceiling

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// What a connection through an endpoint may carry, once the endpoint
// decides it (the proxy's handle.go, inspect.go and transparent.go):
//
//   - raw: a CONNECT tunnel relayed without inspection (no protocol: rest
//     and no L7 rules, or tls: skip); with TLS auto-detection the tunnel's
//     ClientHello must name the CONNECT host, with tls: skip nothing is
//     looked at (rawNoSNI);
//   - a transparent connection (a client that ignored the proxy and
//     connected to the name's policy DNS synthetic address) carries what
//     a CONNECT tunnel to the name would: raw or inspected as above;
//   - HTTP requests (forwarded http:// or inside an inspected tunnel):
//     every request when the endpoint has no L7 rules or its enforcement
//     is audit, else those pkg/l7/rest.Check allows (every reading of the
//     path allowed by Endpoint.CheckReading, and a path outside ASCII
//     only where no rule for the method names a path).
//   - WebSocket messages after an upgrade (protocol websocket): those
//     its websocket rules allow, the upgrade itself held to its REST
//     rules when it has any. Its rules are proved within a ceiling's
//     only syntactically (see webSocketWithin).
func raw(e *policy.Endpoint) bool {
	return !(e.TLS != policy.TLSSkip && e.Inspected())
}

func rawNoSNI(e *policy.Endpoint) bool { return raw(e) && e.TLS == policy.TLSSkip }

// everyRequest: no L7 rules, or rules only logged. An endpoint whose
// requests are read by their bodies (protocols mcp, json-rpc, graphql)
// never lets every request through: a body it cannot read, or over its
// bound, is refused under enforcement: audit too.
func everyRequest(e *policy.Endpoint) bool {
	return !e.BodyInspected() && ((!e.L7() && e.Protocol != policy.ProtocolWebSocket) || e.Enforcement == policy.EnforcementAudit)
}

// behaviourWithin checks that whatever a connection e decides may carry,
// a connection w decides may carry too. It returns the field (relative to
// e's field path) and the reason, or "" when within.
func behaviourWithin(e, w *policy.Endpoint, wPath string) (string, string) {
	switch {
	case e.CredentialBinding != nil && (w.CredentialBinding == nil || w.CredentialBinding.Provider != e.CredentialBinding.Provider):
		return ".credential_binding", fmt.Sprintf("resolves provider %s's credentials in its requests, but the ceiling's %s does not bind them", e.CredentialBinding.Provider, wPath)
	case e.CredentialSigning != "" && (w.CredentialSigning == "" || e.SigningService != w.SigningService || e.SigningRegion != w.SigningRegion):
		return ".credential_signing", fmt.Sprintf("re-signs requests for %s with AWS credentials, but the ceiling's %s does not (for that service and region)", e.SigningService, wPath)
	case e.RequestBodyCredentialRewrite && !w.RequestBodyCredentialRewrite:
		return ".request_body_credential_rewrite", fmt.Sprintf("resolves credential placeholders in request bodies, but the ceiling's %s does not", wPath)
	case e.WebSocketCredentialRewrite && !w.WebSocketCredentialRewrite:
		return ".websocket_credential_rewrite", fmt.Sprintf("resolves credential placeholders in WebSocket messages, but the ceiling's %s does not", wPath)
	case raw(e) && !raw(w):
		return "", fmt.Sprintf("relays tunnels without inspection (%s), but the ceiling's %s inspects them (protocol rest)", protoName(e), wPath)
	case rawNoSNI(e) && !rawNoSNI(w):
		return ".tls", fmt.Sprintf("tls: skip relays tunnels without checking the TLS server name, but the ceiling's %s checks it", wPath)
	case everyRequest(e) && !everyRequest(w):
		why := "has no L7 rules"
		if e.Enforcement == policy.EnforcementAudit {
			why = "has enforcement: audit"
		}
		return "", fmt.Sprintf("%s, so every HTTP request passes, but the ceiling's %s enforces L7 rules", why, wPath)
	case everyRequest(w):
		return "", ""
	case e.BodyInspected() || w.BodyInspected():
		return protocolWithin(e, w, wPath)
	}
	if e.Protocol == policy.ProtocolWebSocket || w.Protocol == policy.ProtocolWebSocket {
		if f, why := webSocketWithin(e, w, wPath); why != "" {
			return f, why
		}
	}
	cells := cellsOf(e)
	for _, c := range cells {
		if why := cellWithin(c, e, w, wPath); why != "" {
			return c.field, why
		}
	}
	for _, c := range cells {
		if why := pathMattersWithin(c, e, w, wPath); why != "" {
			return c.field, why
		}
	}
	return "", ""
}

// pathMattersWithin: a request whose path holds bytes outside ASCII has
// readings nobody can list, so pkg/l7 refuses it as ambiguous when a rule
// could tell them apart (Endpoint.PathMatters: an allow or deny rule for
// the method whose path is not "*"), and decides it by method otherwise.
// If the ceiling's w has such a rule for a method of c, e must have one
// too, or e allows a request w refuses.
func pathMattersWithin(c cell, e, w *policy.Endpoint, wPath string) string {
	for _, s := range specificMethods(w) {
		if methodsDisjoint(c.methods, s) {
			continue
		}
		need := s
		if s == "*" && !c.methods.any {
			need = c.methods.m
		}
		if !slices.ContainsFunc(specificMethods(e), func(m string) bool { return m == "*" || need != "*" && strings.EqualFold(m, need) }) {
			return fmt.Sprintf("%s lets a request with a path outside ASCII through by method, but the ceiling's %s has a rule for %s naming a path, so it refuses such a path as ambiguous", c.describe(), wPath, s)
		}
	}
	return ""
}

// specificMethods lists the methods of e's allow and deny rules whose
// path is not "*" or "**" (policy.Endpoint.PathMatters).
func specificMethods(e *policy.Endpoint) []string {
	var out []string
	add := func(m policy.RequestMatch) {
		if m.Path != "*" && m.Path != "**" {
			out = append(out, m.Method)
		}
	}
	for _, d := range e.DenyRules {
		add(d)
	}
	for _, r := range e.Rules {
		add(r.Allow)
	}
	return out
}

func protoName(e *policy.Endpoint) string {
	switch {
	case e.Protocol == policy.ProtocolTCP:
		return "protocol tcp"
	case e.TLS == policy.TLSSkip:
		return "tls: skip"
	}
	return "no protocol"
}

// methodSet is the set of request methods a cell admits.
type methodSet struct {
	any  bool
	fold bool   // every letter-case spelling of m (rules compare methods case-insensitively)
	m    string // exact (presets compare exactly)
}

func (s methodSet) String() string {
	switch {
	case s.any:
		return "*"
	case s.fold:
		return s.m
	}
	return s.m
}

// cell is one part of an endpoint's L7 allow set: requests with a method
// in methods, a normalised path matching the glob, and the query
// constraints (each named parameter present, every value matching one of
// its globs). noQuery and gitType narrow it further (read-only's git
// fetch: no query at all, git's Content-Type); noPush leaves out git's
// push discovery (".../info/refs?service=git-receive-pack"), which
// read-only refuses.
type cell struct {
	field   string // ".rules[2]" or ".access"
	methods methodSet
	path    string
	query   map[string][]string
	noQuery bool
	gitType bool
	noPush  bool
}

func (c cell) describe() string {
	return c.methods.String() + " " + c.path
}

var (
	readOnlyMethods  = []string{"GET", "HEAD", "OPTIONS"}
	readWriteMethods = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"}
)

// cellsOf decomposes the requests e's allow part admits (deny_rules are
// ignored: dropping them only enlarges the set, which keeps the proof
// sound). Preset cells are exact method names, one per method.
func cellsOf(e *policy.Endpoint) []cell {
	var out []cell
	if len(e.Rules) > 0 {
		for i, r := range e.Rules {
			c := cell{field: fmt.Sprintf(".rules[%d]", i), path: r.Allow.Path}
			if r.Allow.Method == "*" {
				c.methods.any = true
			} else {
				c.methods = methodSet{fold: true, m: r.Allow.Method}
			}
			if len(r.Allow.Query) > 0 {
				c.query = map[string][]string{}
				for k, q := range r.Allow.Query {
					c.query[k] = q.Any
				}
			}
			out = append(out, c)
		}
		return out
	}
	switch e.Access {
	case policy.AccessFull:
		return []cell{{field: ".access", methods: methodSet{any: true}, path: "*"}}
	case policy.AccessReadWrite:
		for _, m := range readWriteMethods {
			out = append(out, cell{field: ".access", methods: methodSet{m: m}, path: "*"})
		}
	case policy.AccessReadOnly:
		for _, m := range readOnlyMethods {
			out = append(out, cell{field: ".access", methods: methodSet{m: m}, path: "*", noPush: true})
		}
		// git's fetch: POST .../git-upload-pack, no query, git's type.
		out = append(out, cell{field: ".access", methods: methodSet{m: "POST"}, path: "*/git-upload-pack", noQuery: true, gitType: true})
	}
	if len(out) == 0 && e.Protocol == policy.ProtocolWebSocket {
		// No REST rules: a WebSocket upgrade (GET) of any path.
		out = append(out, cell{field: ".protocol", methods: methodSet{m: "GET"}, path: "*"})
	}
	return out
}

// cellWithin reports "" when every request of c that e allows, w allows
// too (w enforces L7 rules), or why not.
func cellWithin(c cell, e, w *policy.Endpoint, wPath string) string {
	for i, d := range w.DenyRules {
		if methodsDisjoint(c.methods, d.Method) {
			continue
		}
		if slices.ContainsFunc(e.DenyRules, func(de policy.RequestMatch) bool { return denyWithin(d, de) }) {
			continue
		}
		return fmt.Sprintf("%s is not held to the ceiling's deny rule %s %s (%s.deny_rules[%d]); copy it into the policy", c.describe(), d.Method, d.Path, wPath, i)
	}
	switch {
	case w.Access != "":
		return accessCovers(c, w.Access, wPath)
	case len(w.Rules) > 0:
		for _, r := range w.Rules {
			if ruleCovers(r.Allow, c) {
				return ""
			}
		}
		return fmt.Sprintf("%s is not inside any one allow rule of the ceiling's %s", c.describe(), wPath)
	}
	return "" // deny_rules only: everything else passes
}

func methodsDisjoint(s methodSet, m string) bool {
	return m != "*" && !s.any && !strings.EqualFold(s.m, m)
}

// accessCovers is cellWithin's part for a ceiling preset
// (policy.AccessAllowsRequest).
func accessCovers(c cell, access, wPath string) string {
	if access == policy.AccessFull {
		return ""
	}
	switch {
	case c.methods.any:
		return fmt.Sprintf("every method on %s is outside the ceiling's access: %s (%s)", c.path, access, wPath)
	case c.methods.fold:
		return fmt.Sprintf("the rule for %s also admits other letter cases of the method (a rule compares methods case-insensitively), which the ceiling's access: %s (%s) refuses", c.describe(), access, wPath)
	}
	if access == policy.AccessReadWrite {
		if slices.Contains(readWriteMethods, c.methods.m) {
			return ""
		}
		return fmt.Sprintf("%s is outside the ceiling's access: read-write (%s)", c.describe(), wPath)
	}
	// read-only
	if c.methods.m == "POST" && c.noQuery && c.gitType && urlGlobWithin(c.path, "*/git-upload-pack") {
		return "" // git's fetch
	}
	if !slices.Contains(readOnlyMethods, c.methods.m) {
		return fmt.Sprintf("%s is outside the ceiling's access: read-only (%s)", c.describe(), wPath)
	}
	// read-only refuses ".../info/refs?service=git-receive-pack" (a push).
	if !c.noPush && mayEndWith(c.path, "/info/refs") && !queryExcludes(c.query, "service", "git-receive-pack") {
		return fmt.Sprintf("%s admits git's push discovery (.../info/refs?service=git-receive-pack), which the ceiling's access: read-only (%s) refuses", c.describe(), wPath)
	}
	return ""
}

// ruleCovers reports whether the allow rule r matches every request of c.
func ruleCovers(r policy.RequestMatch, c cell) bool {
	switch {
	case r.Method == "*":
	case c.methods.any:
		return false
	case !strings.EqualFold(r.Method, c.methods.m):
		return false
	}
	if !urlGlobWithin(c.path, r.Path) {
		return false
	}
	for name, q := range r.Query {
		globs, ok := c.query[name]
		if !ok {
			return false // c admits requests without the parameter
		}
		for _, g := range globs {
			if !slices.ContainsFunc(q.Any, func(rg string) bool { return valueGlobWithin(g, rg) }) {
				return false
			}
		}
	}
	return true
}

// denyWithin reports whether every request the deny rule d matches, de
// matches too (deny matching: methods, path and query names compare
// case-insensitively, a trailing slash is optional, a parameter matches
// when any value does).
func denyWithin(d, de policy.RequestMatch) bool {
	if de.Method != "*" && (d.Method == "*" || !strings.EqualFold(d.Method, de.Method)) {
		return false
	}
	if !urlGlobWithin(asciiLower(d.Path), asciiLower(de.Path)) {
		return false
	}
	for name, q := range de.Query {
		var globs []string
		found := false
		for dn, dq := range d.Query {
			if strings.EqualFold(dn, name) {
				globs, found = dq.Any, true
				break
			}
		}
		if !found {
			return false
		}
		for _, g := range globs {
			if !slices.ContainsFunc(q.Any, func(eg string) bool { return valueGlobWithin(g, eg) }) {
				return false
			}
		}
	}
	return true
}

// valueGlobWithin is inclusion for query value globs (pkg/policy's path
// glob syntax over arbitrary values).
func valueGlobWithin(a, b string) bool {
	a, b = collapseStars(a), collapseStars(b)
	if b == "*" {
		return true
	}
	return starGlobWithin(a, b, true)
}

// mayEndWith over-approximates whether some path the glob matches ends
// with suffix.
func mayEndWith(glob, suffix string) bool {
	g := collapseStars(glob)
	if g == "*" {
		return true
	}
	i := strings.LastIndexAny(g, "*?")
	if i < 0 {
		return strings.HasSuffix(g, suffix)
	}
	tail := g[i+1:]
	return strings.HasSuffix(suffix, tail) || strings.HasSuffix(tail, suffix)
}

// queryExcludes reports whether the constraints q forbid the parameter
// name from carrying value: q constrains name and none of its globs
// matches value (an allow rule needs every value to match).
func queryExcludes(q map[string][]string, name, value string) bool {
	globs, ok := q[name]
	if !ok {
		return false
	}
	for _, g := range globs {
		if valueGlobWithin(value, g) {
			return false
		}
	}
	return true
}

// asciiLower is pkg/policy's lowering for deny-rule paths (ASCII letters
// only, so the length and what "?" matches never change), repeated here
// because the inclusion must read the patterns exactly as the matcher
// does.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// webSocketWithin: the messages a protocol websocket endpoint e relays
// must be relayed by the ceiling's w. Message matchers are compared by
// what they say, not by the messages they admit: w must be protocol
// websocket too, list every text matcher of e, deny nothing with a
// deny_text matcher e does not list, allow binary messages when e
// does, and bound messages no lower. Anything else is refused as
// unprovable. An endpoint w of protocol websocket with e not one
// relays messages w would refuse (e reads none).
func webSocketWithin(e, w *policy.Endpoint, wPath string) (string, string) {
	switch {
	case e.Protocol != policy.ProtocolWebSocket:
		return "", fmt.Sprintf("relays WebSocket messages unread, but the ceiling's %s holds them to websocket rules", wPath)
	case w.Protocol != policy.ProtocolWebSocket:
		return ".protocol", fmt.Sprintf("protocol websocket cannot be proved within the ceiling's %s, which is not protocol websocket (its requests are not held to REST rules alone)", wPath)
	}
	ew, ww := e.WebSocket, w.WebSocket
	if ew == nil || ww == nil {
		return ".websocket", "websocket rules are missing"
	}
	has := func(list []policy.MessageMatch, m policy.MessageMatch) bool {
		return slices.ContainsFunc(list, func(x policy.MessageMatch) bool { return sameMatch(x, m) })
	}
	for i, m := range ew.Text {
		if !has(ww.Text, m) {
			return fmt.Sprintf(".websocket.text[%d]", i), fmt.Sprintf("is not one of the ceiling's %s.websocket.text matchers (matchers are compared as written)", wPath)
		}
	}
	for i, m := range ww.DenyText {
		if !has(ew.DenyText, m) {
			return ".websocket.deny_text", fmt.Sprintf("does not list the ceiling's %s.websocket.deny_text[%d]", wPath, i)
		}
	}
	switch {
	case ew.Binary && !ww.Binary:
		return ".websocket.binary", fmt.Sprintf("allows binary messages, but the ceiling's %s does not", wPath)
	case ew.MaxMessageBytes > ww.MaxMessageBytes:
		return ".websocket.max_message_bytes", fmt.Sprintf("is above the ceiling's %s (%d)", wPath, ww.MaxMessageBytes)
	}
	return "", ""
}

func sameMatch(a, b policy.MessageMatch) bool {
	eq := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.Exact, b.Exact) && eq(a.Prefix, b.Prefix) && maps.Equal(a.JSON, b.JSON)
}
