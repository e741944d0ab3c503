// Package l7 holds the request checks the egress proxy applies to every
// inspected HTTP request before its policy rules are matched: the path
// normaliser (percent-decoding, dot segments, repeated slashes, and
// refusal of the spellings servers read differently from the matcher)
// and the authority check that keeps a request inside the tunnel it came
// through. Both take untrusted input and have fuzz targets.
package l7

import (
	"errors"
	"strconv"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/decision"
)

// Errors. ErrAmbiguousPath is a path whose meaning depends on the server
// reading it (an encoded separator, a path parameter, a dot segment above
// the root, double encoding); ErrInvalidPath a path that is not a valid
// origin-form path at all.
var (
	ErrAmbiguousPath = errors.New("ambiguous request path")
	ErrInvalidPath   = errors.New("invalid request path")
	ErrAuthority     = errors.New("request authority does not match the tunnel's host")
)

// MaxPathLen bounds a request path.
const MaxPathLen = 8192

// NormalizePath turns the path of a request target as sent (escaped,
// without the query) into the one form rules are matched against and the
// upstream receives: every percent-escape decoded, "." and ".." segments
// resolved, repeated slashes collapsed, a trailing slash kept.
//
// Refused as ambiguous (servers disagree on them, so a rule written for
// one reading could be bypassed with another): an encoded "/", "\", "."
// or NUL; a literal "\"; ";" (path parameters: "/..;/" and
// "/admin;x/secret" mean other paths to some servers); a "%" left after
// decoding (double encoding such as "%252F"); and ".." above the root.
// Refused as invalid: no leading "/", a malformed escape, control
// characters, space, or bytes outside ASCII, and paths over MaxPathLen.
func NormalizePath(escaped string) (string, error) {
	if escaped == "" || escaped[0] != '/' || len(escaped) > MaxPathLen {
		return "", ErrInvalidPath
	}
	dec := make([]byte, 0, len(escaped))
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		switch {
		case c == '%':
			if i+2 >= len(escaped) || !isHex(escaped[i+1]) || !isHex(escaped[i+2]) {
				return "", ErrInvalidPath
			}
			b := unhex(escaped[i+1])<<4 | unhex(escaped[i+2])
			i += 2
			switch {
			case b == '/' || b == '\\' || b == '.' || b == 0 || b == '%' || b == ';':
				return "", ErrAmbiguousPath
			case b < 0x20 || b == 0x7f:
				return "", ErrInvalidPath
			}
			dec = append(dec, b)
		case c == '\\' || c == ';':
			return "", ErrAmbiguousPath
		case c <= ' ' || c >= 0x7f || c == '#' || c == '?':
			return "", ErrInvalidPath
		default:
			dec = append(dec, c)
		}
	}
	trailing := len(dec) > 1 && dec[len(dec)-1] == '/'
	segs := strings.Split(string(dec[1:]), "/")
	out := make([]string, 0, len(segs))
	for _, s := range segs {
		switch s {
		case "", ".":
			continue
		case "..":
			if len(out) == 0 {
				return "", ErrAmbiguousPath
			}
			out = out[:len(out)-1]
		default:
			out = append(out, s)
		}
	}
	p := "/" + strings.Join(out, "/")
	if trailing && p != "/" {
		p += "/"
	}
	return p, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// CheckAuthority checks that a request's authority (its Host header,
// absolute-URI authority or HTTP/2 :authority) names the host and port
// the tunnel was allowed for. host is the tunnel's canonical host; a
// missing port means defaultPort (80 for http, 443 for https). IP
// literals and names compare in canonical form (decision.CanonicalHost),
// so "EXAMPLE.test." matches "example.test" but "0x7f.1" never matches
// a name.
func CheckAuthority(authority, host string, port, defaultPort int) error {
	if authority == "" || strings.ContainsAny(authority, "@/?# \t\r\n\\") {
		return ErrAuthority
	}
	h, ps := authority, ""
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return ErrAuthority
		}
		h, ps = h[1:end], h[end+1:]
		if ps != "" && ps[0] != ':' {
			return ErrAuthority
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		h, ps = h[:i], h[i:]
		if strings.IndexByte(h, ':') >= 0 {
			return ErrAuthority // unbracketed IPv6
		}
	}
	p := defaultPort
	if ps != "" {
		ps = ps[1:]
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 || ps[0] == '+' || ps[0] == '-' {
			return ErrAuthority
		}
		p = n
	}
	canon, err := decision.CanonicalHost(h)
	if err != nil || canon != host || p != port {
		return ErrAuthority
	}
	return nil
}
