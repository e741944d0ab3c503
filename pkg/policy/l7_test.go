package policy

import (
	"net/url"
	"strings"
	"testing"
)

func TestPathGlob(t *testing.T) {
	for _, c := range []struct {
		pat, s string
		want   bool
	}{
		{"/v1/chat/completions", "/v1/chat/completions", true},
		{"/v1/chat/completions", "/v1/chat/completions/x", false},
		{"/v1/*", "/v1/a/b", true},
		{"/v1/**", "/v1/a/b", true},
		{"/v1/*/x", "/v1/a/b/x", true},
		{"/v?/x", "/v1/x", true},
		{"/v?/x", "/v12/x", false},
		{"*", "/anything", true},
		{"/a*b*c", "/axxbyyc", true},
		{"/a*b*c", "/axxbyy", false},
		{"/simple/**", "/simple", false},
	} {
		if got := pathGlob(c.pat, c.s); got != c.want {
			t.Errorf("pathGlob(%q, %q) = %v", c.pat, c.s, got)
		}
	}
}

func TestCheckRequest(t *testing.T) {
	router := &Endpoint{Rules: []Rule{
		{Allow: RequestMatch{Method: "POST", Path: "/v1/chat/completions"}},
		{Allow: RequestMatch{Method: "POST", Path: "/v1/embeddings"}},
	}}
	readOnly := &Endpoint{Access: AccessReadOnly, DenyRules: []RequestMatch{{Method: "*", Path: "/admin/**"}}}
	query := &Endpoint{Rules: []Rule{{Allow: RequestMatch{Method: "GET", Path: "/search", Query: map[string]QueryMatch{"q": {Any: []string{"palisade*"}}}}}}}
	plain := &Endpoint{}
	denyExact := &Endpoint{Access: AccessFull, DenyRules: []RequestMatch{{Method: "DELETE", Path: "/api/users/1"}}}
	denyQuery := &Endpoint{Access: AccessReadOnly, DenyRules: []RequestMatch{{Method: "GET", Path: "/api/**", Query: map[string]QueryMatch{"action": {Any: []string{"delete"}}}}}}
	for _, c := range []struct {
		name   string
		ep     *Endpoint
		method string
		path   string
		q      string
		ok     bool
		reason string
	}{
		{"allowed route", router, "POST", "/v1/chat/completions", "", true, ""},
		{"second route", router, "POST", "/v1/embeddings", "", true, ""},
		{"wrong method", router, "GET", "/v1/chat/completions", "", false, L7NoRuleMatched},
		{"other path", router, "POST", "/v1/models", "", false, L7NoRuleMatched},
		{"dot segments", router, "POST", "/v1/embeddings/../admin", "", false, L7AmbiguousPath},
		{"encoded slash", router, "POST", "/v1%2fchat/completions", "", false, L7AmbiguousPath},
		{"encoded dot", router, "POST", "/v1/%2e%2e/admin", "", false, L7AmbiguousPath},
		{"read-only GET", readOnly, "GET", "/simple/pkg/", "", true, ""},
		{"read-only POST", readOnly, "POST", "/simple/pkg/", "", false, L7AccessDenied},
		{"deny rule beats access", readOnly, "GET", "/admin/users", "", false, L7DeniedByRule},
		{"query matches", query, "GET", "/search", "q=palisade-sandbox", true, ""},
		{"query mismatch", query, "GET", "/search", "q=secret", false, L7NoRuleMatched},
		{"query missing", query, "GET", "/search", "", false, L7NoRuleMatched},
		{"query one bad value", query, "GET", "/search", "q=palisade&q=secret", false, L7NoRuleMatched},
		// A deny rule's query matcher holds when any value matches.
		{"deny query", denyQuery, "GET", "/api/x", "action=delete", false, L7DeniedByRule},
		{"deny query repeated last", denyQuery, "GET", "/api/x", "action=list&action=delete", false, L7DeniedByRule},
		{"deny query repeated first", denyQuery, "GET", "/api/x", "action=delete&action=list", false, L7DeniedByRule},
		{"deny query other value", denyQuery, "GET", "/api/x", "action=list", true, ""},
		{"deny query absent", denyQuery, "GET", "/api/x", "", true, ""},
		{"deny query name case", denyQuery, "GET", "/api/x", "Action=delete", false, L7DeniedByRule},
		{"deny query name array", denyQuery, "GET", "/api/x", "action[]=delete", false, L7DeniedByRule},
		{"deny query name keyed array", denyQuery, "GET", "/api/x", "action[0]=delete", false, L7DeniedByRule},
		{"deny query other name", denyQuery, "GET", "/api/x", "actions=delete", true, ""},
		// Deny rules compare query values in any case, allow rules as written.
		{"deny query value case", denyQuery, "GET", "/api/x", "action=DELETE", false, L7DeniedByRule},
		{"deny query value mixed case", denyQuery, "GET", "/api/x", "action=Delete&action=list", false, L7DeniedByRule},
		{"allow query value case", query, "GET", "/search", "q=Palisade-sandbox", false, L7NoRuleMatched},
		{"deny path case", readOnly, "GET", "/Admin/users", "", false, L7DeniedByRule},
		{"deny bare prefix", readOnly, "GET", "/admin", "", false, L7DeniedByRule},
		{"deny trailing slash", denyExact, "DELETE", "/api/users/1/", "", false, L7DeniedByRule},
		{"deny exact case", denyExact, "DELETE", "/API/Users/1", "", false, L7DeniedByRule},
		{"deny exact other", denyExact, "DELETE", "/api/users/12", "", true, ""},
		{"allow rule stays strict on case", router, "POST", "/V1/chat/completions", "", false, L7NoRuleMatched},
		{"allow rule stays strict on slash", router, "POST", "/v1/chat/completions/", "", false, L7NoRuleMatched},
		{"no L7 constraints", plain, "DELETE", "/../anything", "", true, ""},
	} {
		qv, _ := url.ParseQuery(c.q)
		ok, reason := c.ep.CheckRequest(c.method, c.path, qv, "")
		if ok != c.ok || reason != c.reason {
			t.Errorf("%s: CheckRequest = %v %q, want %v %q", c.name, ok, reason, c.ok, c.reason)
		}
	}
}

func FuzzPathGlob(f *testing.F) {
	f.Add("/v1/*/x", "/v1/a/b/x")
	f.Add("**", "")
	f.Fuzz(func(t *testing.T, pat, s string) {
		if len(pat) > 64 || len(s) > 256 {
			return
		}
		pathGlob(pat, s) // must terminate quickly and not panic
		if pathGlob(s, s) != true && !containsMeta(s) {
			t.Fatalf("a literal pattern does not match itself: %q", s)
		}
	})
}

func containsMeta(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '*' || s[i] == '?' {
			return true
		}
	}
	return false
}

// Presets read git's smart HTTP by what it does: fetch reads, push writes.
func TestAccessAllowsRequestGit(t *testing.T) {
	q := func(s string) url.Values { v, _ := url.ParseQuery(s); return v }
	const git = GitUploadPackRequestType
	for _, c := range []struct {
		access, method, path, query, ctype string
		want                               bool
	}{
		{AccessReadOnly, "GET", "/r.git/info/refs", "service=git-upload-pack", "", true},
		{AccessReadOnly, "POST", "/r.git/git-upload-pack", "", git, true},
		{AccessReadOnly, "POST", "/r.git/git-upload-pack", "", "Application/X-Git-Upload-Pack-Request ", true},
		{AccessReadOnly, "GET", "/r.git/info/refs", "service=git-receive-pack", "", false},
		// Spellings a server may route as the push advertisement.
		{AccessReadOnly, "GET", "/r.git/info/refs", "Service=git-receive-pack", "", false},
		{AccessReadOnly, "GET", "/r.git/info/refs", "service=GIT-Receive-Pack", "", false},
		{AccessReadOnly, "GET", "/r.git/info/refs", "service%5B%5D=git-receive-pack", "", false},
		{AccessReadOnly, "GET", "/r.git/INFO/Refs", "service=git-receive-pack", "", false},
		{AccessReadOnly, "POST", "/r.git/git-receive-pack", "", "application/x-git-receive-pack-request", false},
		{AccessReadOnly, "POST", "/r.git/other", "", git, false},
		{AccessReadOnly, "POST", "/git-upload-pack-not", "", git, false},
		// The suffix alone is a name the agent picks on any REST API
		// (GitLab: POST .../repository/files/git-upload-pack creates a
		// file): without git's content type, or with a query, a write.
		{AccessReadOnly, "POST", "/api/v4/projects/1/repository/files/git-upload-pack", "", "application/json", false},
		{AccessReadOnly, "POST", "/api/v4/projects/1/repository/files/git-upload-pack", "", "", false},
		{AccessReadOnly, "POST", "/api/v4/projects/1/repository/files/git-upload-pack", "branch=main&content=x", git, false},
		{AccessReadWrite, "GET", "/r.git/info/refs", "service=git-receive-pack", "", true},
		{AccessReadWrite, "POST", "/r.git/git-receive-pack", "", "", true},
		{AccessReadWrite, "DELETE", "/r.git/info/refs", "service=git-receive-pack", "", false},
		{AccessFull, "GET", "/r.git/info/refs", "service=git-receive-pack", "", true},
	} {
		if got := AccessAllowsRequest(c.access, c.method, c.path, q(c.query), c.ctype); got != c.want {
			t.Errorf("%s %s %s?%s = %v, want %v", c.access, c.method, c.path, c.query, got, c.want)
		}
	}
	ep := &Endpoint{Access: AccessReadOnly, DenyRules: []RequestMatch{{Method: "POST", Path: "/blocked/**"}}}
	if ok, why := ep.CheckRequest("POST", "/blocked/r.git/git-upload-pack", nil, GitUploadPackRequestType); ok || why != L7DeniedByRule {
		t.Errorf("deny rule did not win over the git fetch reading: %v %s", ok, why)
	}
}

// A deny rule matches at least what the same rule matches strictly, and
// every case and trailing-slash spelling of it: deny only widens.
func FuzzDenyPathMatch(f *testing.F) {
	f.Add("/admin/**", "/admin")
	f.Add("/api/users/1", "/API/users/1/")
	f.Add("/v?/x", "/V1/X")
	f.Fuzz(func(t *testing.T, pat, s string) {
		if len(pat) > 64 || len(s) > 256 {
			return
		}
		if pathGlob(pat, s) && !denyPathMatch(pat, s) {
			t.Fatalf("deny %q misses %q, which the strict match selects", pat, s)
		}
		if denyPathMatch(pat, s) != denyPathMatch(pat, asciiUpper(s)) {
			t.Fatalf("deny %q depends on the case of %q", pat, s)
		}
		if len(s) > 1 && !strings.HasSuffix(s, "/") && denyPathMatch(pat, s) != denyPathMatch(pat, s+"/") {
			t.Fatalf("deny %q depends on a trailing slash after %q", pat, s)
		}
	})
}

func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
