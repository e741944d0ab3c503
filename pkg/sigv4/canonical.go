package sigv4

import (
	"sort"
	"strings"
)

// uriEncode percent-encodes every byte of s but the unreserved
// characters (A-Z a-z 0-9 - . _ ~), and '/' when keepSlash: AWS's
// UriEncode, upper-case hex.
func uriEncode(s string, keepSlash bool) string {
	const hexdigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) || keepSlash && c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
	return b.String()
}

func unreserved(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// percentDecode decodes %XX escapes (a '%' not followed by two hex
// digits stays as it is); '+' is not a space.
func percentDecode(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// canonicalURI is the canonical form of a request path as sent:
// normalised (dot and empty segments removed) when normalize, then
// encoded once more when double, else each segment decoded and encoded
// once (the key as S3 reads it).
func canonicalURI(path string, double, normalize bool) string {
	if path == "" {
		return "/"
	}
	if normalize {
		path = normalizePath(path)
	}
	if double {
		return uriEncode(path, true)
	}
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = uriEncode(percentDecode(s), false)
	}
	return strings.Join(segs, "/")
}

// normalizePath removes "." and ".." segments and empty segments (a
// trailing slash stays), as RFC 3986 5.2.4 with repeated slashes
// collapsed.
func normalizePath(p string) string {
	trailing := strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..")
	var out []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "/"
	}
	r := "/" + strings.Join(out, "/")
	if trailing {
		r += "/"
	}
	return r
}

// canonicalQuery sorts the query's parameters by encoded name, then
// value, each decoded and encoded again; a parameter without '=' has an
// empty value.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	type kv struct{ k, v string }
	var pairs []kv
	for _, p := range strings.Split(raw, "&") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		pairs = append(pairs, kv{uriEncode(percentDecode(k), false), uriEncode(percentDecode(v), false)})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].k != pairs[j].k {
			return pairs[i].k < pairs[j].k
		}
		return pairs[i].v < pairs[j].v
	})
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.k)
		b.WriteByte('=')
		b.WriteString(p.v)
	}
	return b.String()
}
