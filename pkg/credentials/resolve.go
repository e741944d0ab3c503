package credentials

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Prefix begins every placeholder: Prefix + KEY stands for the value of
// credential KEY (OpenShell's canonical form).
const Prefix = "openshell:resolve:env:"

// Placeholder is the placeholder of credential key: what the sandbox's
// variable key holds.
func Placeholder(key string) string { return Prefix + key }

// Reasons a request with a placeholder is refused (the proxy's 403
// reason). None names the placeholder, its key or a value.
const (
	// ReasonEndpointMismatch: the credential is not bound to the
	// request's endpoint (host, port, path, or the policy endpoint's
	// credential_binding). The proxy also reports a Detection Finding.
	ReasonEndpointMismatch = "credential_endpoint_mismatch"
	// ReasonUnknown: no credential has the placeholder's key.
	ReasonUnknown = "credential_unknown"
	// ReasonRevoked: the last reload of the credentials failed, so
	// every value is revoked until one succeeds.
	ReasonRevoked = "credentials_revoked"
)

// Refusal is why a request's placeholders cannot be resolved.
type Refusal struct{ Reason string }

func (r *Refusal) Error() string { return "credentials: placeholder refused: " + r.Reason }

// rank orders refusals: the one a request reports is the gravest.
func rank(reason string) int {
	switch reason {
	case ReasonEndpointMismatch:
		return 3
	case ReasonRevoked:
		return 2
	}
	return 1
}

// encoding is how the text around a placeholder is encoded, and so how
// the placeholder may be written and how its value is written in.
type encoding int

const (
	encRaw   encoding = iota // header values, text bodies: as is
	encQuery                 // query strings, form bodies: ':' may be %3A; value percent-encoded
	encJSON                  // JSON bodies: inside a string; value JSON-escaped
)

// MayHold reports cheaply whether s may hold a placeholder in any
// encoding; false means it certainly holds none.
func MayHold(s string) bool { return strings.Contains(s, "openshell") }

// find returns the next placeholder in s at or after i: its bounds and
// key.
func find(s string, i int, enc encoding) (start, end int, key string, ok bool) {
	for {
		j := strings.Index(s[i:], "openshell")
		if j < 0 {
			return 0, 0, "", false
		}
		start = i + j
		p := start + len("openshell")
		good := true
		for _, word := range []string{"resolve", "env", ""} {
			n := sep(s[p:], enc)
			if n == 0 {
				good = false
				break
			}
			p += n
			if word != "" {
				if !strings.HasPrefix(s[p:], word) {
					good = false
					break
				}
				p += len(word)
			}
		}
		if good {
			k := p
			for k < len(s) && isKeyByte(s[k]) {
				k++
			}
			if k > p {
				return start, k, s[p:k], true
			}
		}
		i = start + len("openshell")
	}
}

func sep(s string, enc encoding) int {
	switch {
	case strings.HasPrefix(s, ":"):
		return 1
	case enc == encQuery && len(s) >= 3 && s[0] == '%' && s[1] == '3' && (s[2] == 'A' || s[2] == 'a'):
		return 3
	}
	return 0
}

func isKeyByte(c byte) bool {
	return c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

// Resolver resolves the placeholders of one request. Use it once per
// request, then check Err: a request with any refused placeholder must
// not be sent.
type Resolver struct {
	s      *Store
	t      *Target
	used   []string
	refuse string
}

// Resolver returns a Resolver for a request to t. s nil means no
// credentials are configured: placeholders are left as they are.
func (s *Store) Resolver(t *Target) *Resolver { return &Resolver{s: s, t: t} }

// Err is the gravest refusal met so far (nil when none).
func (r *Resolver) Err() error {
	if r.refuse == "" {
		return nil
	}
	return &Refusal{Reason: r.refuse}
}

// Injected reports whether a value was written into the request.
func (r *Resolver) Injected() bool { return len(r.used) > 0 }

func (r *Resolver) refused(reason string) {
	if rank(reason) > rank(r.refuse) || r.refuse == "" {
		r.refuse = reason
	}
}

// value is the value of key for the request, or "" after recording why
// not.
func (r *Resolver) value(key string) (string, bool) {
	s := r.s
	if s.revoked {
		r.refused(ReasonRevoked)
		return "", false
	}
	c, ok := s.creds[key]
	switch {
	case !ok:
		r.refused(ReasonUnknown)
		return "", false
	case !s.bound(c.prov, r.t):
		r.refused(ReasonEndpointMismatch)
		return "", false
	}
	r.used = append(r.used, c.value)
	return c.value, true
}

// resolve replaces every placeholder in v; it returns v itself when
// there is none.
func (r *Resolver) resolve(v string, enc encoding) string {
	if r.s == nil || !MayHold(v) {
		return v
	}
	var b strings.Builder
	last := 0
	for i := 0; ; {
		start, end, key, ok := find(v, i, enc)
		if !ok {
			break
		}
		i = end
		val, ok := r.value(key)
		if !ok {
			continue
		}
		if b.Len() == 0 {
			b.Grow(len(v) + len(val))
		}
		b.WriteString(v[last:start])
		writeValue(&b, val, enc)
		last = end
	}
	if last == 0 {
		return v
	}
	b.WriteString(v[last:])
	return b.String()
}

func writeValue(b *strings.Builder, v string, enc encoding) {
	switch enc {
	case encQuery:
		b.WriteString(url.QueryEscape(v))
	case encJSON:
		q, _ := json.Marshal(v) // a string always marshals
		b.Write(q[1 : len(q)-1])
	default:
		b.WriteString(v)
	}
}

// Header resolves placeholders in every value of h, in place (the value
// slices are copied before they change: they may be shared with the
// client's request).
func (r *Resolver) Header(h http.Header) {
	if r.s == nil {
		return
	}
	for k, vv := range h {
		copied := false
		for i, v := range vv {
			nv := r.resolve(v, encRaw)
			if nv == v {
				continue
			}
			if !copied {
				vv = append([]string(nil), vv...)
				h[k] = vv
				copied = true
			}
			vv[i] = nv
		}
	}
}

// Query resolves placeholders in a raw query string (written as they
// are, or with each ':' percent-encoded); values go in percent-encoded.
func (r *Resolver) Query(raw string) string { return r.resolve(raw, encQuery) }

// Scrub removes from msg (an error about the request, bound for a log or
// an event) every value this Resolver wrote into the request.
func (r *Resolver) Scrub(msg string) string {
	for _, v := range r.used {
		msg = strings.ReplaceAll(msg, v, "[credential]")
	}
	return msg
}

// MaxBody is the largest request body placeholders are resolved in
// (OpenShell's bound): a larger one on an endpoint that opted in is
// refused (ReasonBodyTooLarge) rather than sent with placeholders the
// operator expected resolved.
const MaxBody = 256 << 10

// ReasonBodyTooLarge: the request body exceeds MaxBody on an endpoint
// with request_body_credential_rewrite.
const ReasonBodyTooLarge = "credential_body_too_large"

// bodyEncoding says how a body of the given Content-Type is read for
// placeholders: JSON (application/json, */*+json) inside strings, form
// (application/x-www-form-urlencoded) like a query, text (text/*) as it
// is. ok is false for any other type, and for a charset other than
// UTF-8 or US-ASCII: such a body passes unchanged.
func bodyEncoding(contentType string) (enc encoding, ok bool) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return 0, false
	}
	if cs := strings.ToLower(params["charset"]); cs != "" && cs != "utf-8" && cs != "utf8" && cs != "us-ascii" {
		return 0, false
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return encJSON, true
	case mt == "application/x-www-form-urlencoded":
		return encQuery, true
	case strings.HasPrefix(mt, "text/"):
		return encRaw, true
	}
	return 0, false
}

// RewritableBody reports whether a request body of this Content-Type is
// read for placeholders (on an endpoint that opted in).
func RewritableBody(contentType string) bool {
	_, ok := bodyEncoding(contentType)
	return ok
}

// Body resolves the placeholders of a request body of the given
// Content-Type (RewritableBody); it returns b itself when there is
// nothing to replace.
func (r *Resolver) Body(b []byte, contentType string) []byte {
	enc, ok := bodyEncoding(contentType)
	if !ok || r.s == nil || !bytes.Contains(b, []byte("openshell")) {
		return b
	}
	s := string(b)
	out := r.resolve(s, enc)
	if out == s {
		return b
	}
	return []byte(out)
}

// Text resolves the placeholders of a WebSocket text message: inside
// JSON strings (values JSON-escaped) when the message is JSON, as it is
// otherwise. It returns b itself when there is nothing to replace; Err
// reports a placeholder that may not be resolved, as for a request.
func (r *Resolver) Text(b []byte) []byte {
	if r.s == nil || !bytes.Contains(b, []byte("openshell")) {
		return b
	}
	enc := encRaw
	if json.Valid(b) {
		enc = encJSON
	}
	s := string(b)
	out := r.resolve(s, enc)
	if out == s {
		return b
	}
	return []byte(out)
}
