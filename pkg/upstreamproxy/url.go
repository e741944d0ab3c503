package upstreamproxy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Addr is a validated upstream proxy address.
type Addr struct {
	// Secure is true for an https:// proxy: the connection to it is
	// TLS before the CONNECT handshake.
	Secure bool
	// Host is a host name or an IP literal (IPv6 without brackets).
	Host string
	Port int
}

// String is the proxy's URL, scheme://host:port, which events and logs
// name (it never holds a credential: ParseURL refuses one).
func (a Addr) String() string {
	scheme := "http"
	if a.Secure {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(a.Host, strconv.Itoa(a.Port))
}

// ParseURL validates an upstream proxy URL: exactly http://host:port or
// https://host:port (a bare trailing "/" is tolerated). The scheme and
// the port must both be explicit; user:pass@, a path, a query or a
// fragment are refused. Errors never repeat the value: a refused URL may
// hold a credential.
func ParseURL(raw string) (Addr, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return Addr{}, errors.New("must not be empty (omit the flag for no upstream proxy)")
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Addr{}, errors.New("has no scheme: want http://host:port or https://host:port")
	}
	// The authority ends at the first '/', '?' or '#'; a '@' in it is
	// userinfo, refused before url.Parse can echo it in an error.
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if strings.Contains(authority, "@") {
		return Addr{}, errors.New("must not hold credentials (user:pass@): give them in --upstream-proxy-auth-file")
	}
	var a Addr
	switch strings.ToLower(scheme) {
	case "http":
	case "https":
		a.Secure = true
	default:
		if !validScheme(scheme) {
			return Addr{}, errors.New("has a malformed scheme: want http:// or https://")
		}
		return Addr{}, fmt.Errorf("has the unsupported scheme %q: only http:// and https:// forward proxies are supported", scheme)
	}
	u, err := url.Parse(s)
	if err != nil {
		return Addr{}, errors.New("is not a valid URL: want http://host:port or https://host:port")
	}
	switch {
	case u.User != nil:
		return Addr{}, errors.New("must not hold credentials (user:pass@): give them in --upstream-proxy-auth-file")
	case u.Path != "" && u.Path != "/":
		return Addr{}, errors.New("must not have a path: want scheme://host:port only")
	case u.RawQuery != "" || u.ForceQuery:
		return Addr{}, errors.New("must not have a query: want scheme://host:port only")
	case u.Fragment != "" || strings.Contains(rest, "#"):
		return Addr{}, errors.New("must not have a fragment: want scheme://host:port only")
	}
	a.Host = u.Hostname()
	if a.Host == "" {
		return Addr{}, errors.New("has no host: want scheme://host:port")
	}
	if strings.Contains(a.Host, "%") {
		return Addr{}, errors.New("has an IPv6 zone: give a routable address or a host name")
	}
	p := u.Port()
	if p == "" {
		return Addr{}, errors.New("has no port: want scheme://host:port (corporate proxies rarely listen on 80 or 443)")
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return Addr{}, fmt.Errorf("has port %q: want 1-65535", p)
	}
	a.Port = n
	return a, nil
}

// validScheme reports whether s has the form of a URL scheme (RFC 3986:
// a letter, then letters, digits, '+', '-', '.'), so that an error may
// quote it.
func validScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}
