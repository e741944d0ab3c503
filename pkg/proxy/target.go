package proxy

import (
	"net/url"
	"strings"
)

// ParseForwardTarget checks the request target of a forwarded (non-CONNECT)
// request. Only absolute-form http:// URLs are proxied in the clear:
// https:// in absolute form is refused (clients must CONNECT, so TLS stays
// end to end), origin-form ("/path") and asterisk-form are refused because
// they name no destination, and userinfo is refused so credentials never
// travel in a URL the proxy would have to log around. It returns the URL,
// its host (brackets removed for IPv6) and port (80 when absent).
func ParseForwardTarget(target string) (u *url.URL, host string, port int, err error) {
	if !hasPrefixFold(target, "http://") {
		switch {
		case hasPrefixFold(target, "https://"):
			return nil, "", 0, headErrorf("https:// in absolute form is not proxied; use CONNECT")
		case strings.HasPrefix(target, "/") || target == "*":
			return nil, "", 0, headErrorf("origin-form request target; this is a proxy, send an absolute http:// URL or CONNECT")
		}
		return nil, "", 0, headErrorf("request target must be an absolute http:// URL")
	}
	u, perr := url.Parse(target)
	if perr != nil {
		return nil, "", 0, headErrorf("request target is not a valid URL")
	}
	u.Fragment, u.RawFragment = "", "" // never part of a request; not forwarded
	if u.User != nil {
		return nil, "", 0, headErrorf("request target carries userinfo; send credentials in a header instead")
	}
	if u.Host == "" || u.Opaque != "" {
		return nil, "", 0, headErrorf("request target has no host")
	}
	host = u.Hostname()
	if host == "" {
		return nil, "", 0, headErrorf("request target has no host")
	}
	port = 80
	if ps := u.Port(); ps != "" || strings.HasSuffix(u.Host, ":") {
		if port, err = parsePort(ps); err != nil {
			return nil, "", 0, err
		}
	}
	u.Scheme = "http"
	return u, host, port, nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// targetPath is the path of an absolute-form target as sent ("/" when
// it has none): url.URL's EscapedPath re-escapes a path whose raw form
// it finds invalid, which would turn an encoded "/" into a separator.
func targetPath(target string) string {
	rest := target[len("http://"):]
	i := strings.IndexAny(rest, "/?#")
	if i < 0 || rest[i] != '/' {
		return "/"
	}
	p := rest[i:]
	if j := strings.IndexAny(p, "?#"); j >= 0 {
		p = p[:j]
	}
	return p
}
