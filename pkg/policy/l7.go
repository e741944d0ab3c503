package policy

import (
	"net/url"
	"strings"
)

// L7 reasons CheckRequest returns; the proxy puts them in its 403 body.
const (
	L7DeniedByRule   = "l7_deny_rule"      // a deny_rules entry matched
	L7AccessDenied   = "l7_access_denied"  // the method is outside access
	L7NoRuleMatched  = "l7_no_rule"        // rules exist and none allows it
	L7AmbiguousPath  = "l7_ambiguous_path" // the readings servers may take of the path are decided differently
	L7InvalidRequest = "l7_invalid_request"
)

// L7 reports whether the endpoint constrains HTTP requests (access,
// rules or deny_rules, or a protocol whose bodies are read).
func (e *Endpoint) L7() bool {
	return e.BodyInspected() || e.Access != "" || len(e.Rules) > 0 || len(e.DenyRules) > 0
}

// CheckRequest judges one HTTP request against the endpoint's L7
// constraints: a matching deny rule denies; then access, when set, must
// allow the method; then rules, when set, must contain a matching allow.
// escapedPath is the request path as sent (URL.EscapedPath). A path that
// servers might read differently from this matcher — dot segments, or an
// encoded "/", "\" or "." — is denied whenever the endpoint has L7
// constraints: rules are written against one reading only. contentType
// is the request's Content-Type ("" when absent or repeated): the presets
// read a POST as git's fetch only with git's own content type.
func (e *Endpoint) CheckRequest(method, escapedPath string, query url.Values, contentType string) (bool, string) {
	if !e.L7() {
		return true, ""
	}
	if method == "" || strings.ContainsAny(method, " \t\r\n") {
		return false, L7InvalidRequest
	}
	if escapedPath == "" {
		escapedPath = "/"
	}
	if ambiguousPath(escapedPath) {
		return false, L7AmbiguousPath
	}
	return e.CheckReading(method, escapedPath, query, contentType)
}

// CheckReading judges one reading of an HTTP request against the
// endpoint's L7 constraints, as CheckRequest does, but takes path as
// one decoded, normalised reading of the request's path (package l7
// lists them; it decides the request under each): it does not refuse
// what would be ambiguous as a path sent on the wire.
func (e *Endpoint) CheckReading(method, path string, query url.Values, contentType string) (bool, string) {
	if e.BodyInspected() {
		return false, L7BodyNotInspected // decided by pkg/l7/jsonrpc or pkg/l7/graphql, never by method and path
	}
	if !e.L7() {
		return true, ""
	}
	if method == "" || strings.ContainsAny(method, " \t\r\n") {
		return false, L7InvalidRequest
	}
	if path == "" {
		path = "/"
	}
	for _, d := range e.DenyRules {
		if d.matches(method, path, query, true) {
			return false, L7DeniedByRule
		}
	}
	if e.Access != "" && !AccessAllowsRequest(e.Access, method, path, query, contentType) {
		return false, L7AccessDenied
	}
	if len(e.Rules) > 0 {
		for _, r := range e.Rules {
			if r.Allow.matches(method, path, query, false) {
				return true, ""
			}
		}
		return false, L7NoRuleMatched
	}
	return true, ""
}

// PathMatters reports whether the decision of a request with the given
// method can depend on its path: a deny rule or an allow rule for that
// method (or "*") whose path is not "*" or "**". Under access alone the
// path matters only to git's shortcuts, which never make a request more
// permitted than its method.
func (e *Endpoint) PathMatters(method string) bool {
	specific := func(m RequestMatch) bool {
		return (m.Method == "*" || strings.EqualFold(m.Method, method)) && m.Path != "*" && m.Path != "**"
	}
	for _, d := range e.DenyRules {
		if specific(d) {
			return true
		}
	}
	for _, r := range e.Rules {
		if specific(r.Allow) {
			return true
		}
	}
	return false
}

// AccessAllowsRequest is AccessAllows for a whole request, reading git's
// smart HTTP protocol by what it does rather than by its methods: a fetch
// or clone posts to ".../git-upload-pack" but only reads, so read-only
// allows it; a push starts with "GET .../info/refs?service=git-receive-pack"
// and then posts to ".../git-receive-pack", so read-only refuses both
// (the first refusal is what git shows its user); the push's path and
// "service" parameter are read in any case and spelling a server may
// route the same way (as a deny rule reads them), since reading more
// requests as a push only refuses more. Everything else is
// AccessAllows(access, method).
//
// A POST is read as a fetch only when it is shaped like git's: no query
// and git's request content type. The path suffix alone is a name the
// agent chooses on any REST API ("POST .../repository/files/git-upload-pack"
// creates a file on GitLab), so it never makes a write read-only.
func AccessAllowsRequest(access, method, path string, query url.Values, contentType string) bool {
	switch {
	case method == "POST" && strings.HasSuffix(path, "/git-upload-pack") && len(query) == 0 &&
		strings.EqualFold(strings.TrimSpace(contentType), GitUploadPackRequestType):
		return AccessAllows(access, "GET")
	case len(path) >= len("/info/refs") && strings.EqualFold(path[len(path)-len("/info/refs"):], "/info/refs") &&
		containsFold(denyQueryValues(query, "service"), "git-receive-pack"):
		return AccessAllows(access, "POST") && AccessAllows(access, method)
	}
	return AccessAllows(access, method)
}

// containsFold reports whether vs holds v in any case.
func containsFold(vs []string, v string) bool {
	for _, x := range vs {
		if strings.EqualFold(x, v) {
			return true
		}
	}
	return false
}

// GitUploadPackRequestType is the Content-Type of git's fetch POST.
const GitUploadPackRequestType = "application/x-git-upload-pack-request"

// matches reports whether a request is selected. An allow rule matches
// strictly. A deny rule (deny set) matches every reading a common server
// may give the request, since a rule written for one spelling must not be
// bypassed by another the upstream routes the same way: the path and the
// query names compare case-insensitively (Express, ASP.NET), a trailing
// slash is optional ("/admin/" and, for "/admin/**", "/admin" itself:
// Express, older Spring), a query name "a[]" or "a[k]" is "a" (PHP,
// Rails), a query value compares case-insensitively (a server that
// lower-cases or compares "TRUE" to "true" without regard to case acts
// on the denied value), and a query matcher holds when any value of a
// repeated parameter matches (servers read the first, the last or all);
// an allow rule's needs every value to match, case and all.
func (m RequestMatch) matches(method, path string, query url.Values, deny bool) bool {
	if m.Method != "*" && !strings.EqualFold(m.Method, method) {
		return false
	}
	if deny {
		if !denyPathMatch(m.Path, path) {
			return false
		}
	} else if !pathGlob(m.Path, path) {
		return false
	}
	for name, qm := range m.Query {
		vals := query[name]
		if deny {
			vals = denyQueryValues(query, name)
		}
		if len(vals) == 0 {
			return false
		}
		matched := 0
		for _, v := range vals {
			if deny {
				v = asciiLower(v)
			}
			for _, g := range qm.Any {
				if deny {
					g = asciiLower(g)
				}
				if pathGlob(g, v) {
					matched++
					break
				}
			}
		}
		if matched == 0 || !deny && matched < len(vals) {
			return false
		}
	}
	return true
}

// denyPathMatch is pathGlob for a deny rule: case-insensitive, with a
// trailing slash optional on either side.
func denyPathMatch(pattern, path string) bool {
	pattern, path = asciiLower(pattern), asciiLower(path)
	if pathGlob(pattern, path) {
		return true
	}
	if len(path) > 1 && strings.HasSuffix(path, "/") {
		return pathGlob(pattern, path[:len(path)-1])
	}
	return pathGlob(pattern, path+"/")
}

// asciiLower lower-cases ASCII letters only: a decoded path may hold any
// byte, and a Unicode mapping would change its length (and what "?"
// matches).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// denyQueryValues collects the values of every query parameter a server
// may read as name: any case, and "name[...]".
func denyQueryValues(query url.Values, name string) []string {
	var out []string
	for k, vv := range query {
		if i := strings.IndexByte(k, '['); i > 0 && strings.HasSuffix(k, "]") {
			k = k[:i]
		}
		if strings.EqualFold(k, name) {
			out = append(out, vv...)
		}
	}
	return out
}

func ambiguousPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return true
	}
	lower := strings.ToLower(p)
	for _, enc := range []string{"%2f", "%5c", "%2e", "%00"} {
		if strings.Contains(lower, enc) {
			return true
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// pathGlob matches s against a glob in which "*" and "**" match any run
// of characters (including "/") and "?" exactly one; "*" or "**" alone
// match everything. Matching is iterative (no backtracking blow-up).
func pathGlob(pattern, s string) bool {
	if pattern == "*" || pattern == "**" {
		return true
	}
	// Collapse "**" to "*": both mean any run of characters.
	for strings.Contains(pattern, "**") {
		pattern = strings.ReplaceAll(pattern, "**", "*")
	}
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
