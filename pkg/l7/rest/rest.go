// Package rest holds the requests of a protocol: rest endpoint (or of
// any endpoint with access, rules or deny_rules) to its method, path and
// query rules: the proxy's l7.Inspector for REST. A request is decided
// under every reading an upstream may take of it (package l7 lists the
// readings of its path and query names) and every method it may be read
// as (override fields, "_method").
package rest

import (
	"net/url"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Inspector is the l7.Inspector of a REST endpoint.
type Inspector struct{ ep *policy.Endpoint }

// New is the REST inspector of ep (never an error: REST rules need no
// compiling).
func New(ep *policy.Endpoint) *Inspector { return &Inspector{ep: ep} }

// Request implements l7.Inspector with Check.
func (in *Inspector) Request(r *l7.Request) l7.Decision {
	if ok, why := Check(in.ep, r); !ok {
		return l7.Denied(why, "")
	}
	return l7.Allowed()
}

// methodOverrideFields are the request fields web frameworks read as the
// request's real method (Symfony, OData, Google APIs, custom middleware).
var methodOverrideFields = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// Check decides a request against the endpoint's L7 constraints.
//
// It decides the request under each reading of its path (l7.Path) and of
// its query's parameter names (l7.QueryAlternates) and, within each, under
// its own method and every method an override field
// or the "_method" query parameter (Symfony, Laravel) names: an upstream
// that honours them acts on that method, so a GET carrying
// "X-HTTP-Method-Override: DELETE" is a DELETE to it. A "_method" in a
// form body is not seen (bodies are not read).
//
// When every reading gets the same decision, that is the decision (the
// reason is the first reading's). When they differ the request is
// refused as policy.L7AmbiguousPath: a server taking the other reading
// would act on a path the rules decide otherwise. A path holding bytes
// outside ASCII has readings no list enumerates (Unicode folding), so it
// is refused as ambiguous when it would be allowed and a rule's path
// could tell its readings apart (policy.Endpoint.PathMatters).
func Check(ep *policy.Endpoint, r *l7.Request) (bool, string) {
	var buf [4]string
	methods := append(buf[:0], r.Method)
	for _, f := range methodOverrideFields {
		methods = appendMethods(methods, r.Field(f))
	}
	methods = appendMethods(methods, r.Query["_method"])
	ctype := singleValue(r.Field("Content-Type"))
	queries := l7.QueryAlternates(r.Query)
	decide := func(path string, q url.Values) (bool, string) {
		for _, m := range methods {
			if ok, why := ep.CheckReading(m, path, q, ctype); !ok {
				return false, why
			}
		}
		return true, ""
	}
	ok, why := decide(r.Path.Decoded, r.Query)
	differ := false
	r.Path.Readings(func(path string) bool {
		if path != r.Path.Decoded {
			if aok, _ := decide(path, r.Query); aok != ok {
				differ = true
				return false
			}
		}
		for _, q := range queries {
			if aok, _ := decide(path, q); aok != ok {
				differ = true
				return false
			}
		}
		return true
	})
	if differ {
		return false, policy.L7AmbiguousPath
	}
	if ok && r.Path.NonASCII {
		for _, m := range methods {
			if ep.PathMatters(m) {
				return false, policy.L7AmbiguousPath
			}
		}
	}
	return ok, why
}

// appendMethods adds the methods named by override values ("DELETE",
// "put, patch").
func appendMethods(methods, values []string) []string {
	for _, v := range values {
		for _, m := range strings.Split(v, ",") {
			methods = append(methods, strings.ToUpper(strings.TrimSpace(m)))
		}
	}
	return methods
}

// singleValue is a field's value when it was sent once, else "".
func singleValue(vv []string) string {
	if len(vv) != 1 {
		return ""
	}
	return vv[0]
}
