// Package l7 is what the egress proxy's request inspection shares
// across protocols: the Inspector interface every protocol package
// implements (inspector.go: the proxy calls it once per inspected
// request, and an Upgrader's Messages once per message after an
// upgrade), and the readings of a request every protocol is decided
// under: the path parser (percent-decoding, dot segments, repeated
// slashes, and every reading an upstream may take of the spellings
// servers disagree on), the readings of query parameter names
// (QueryAlternates), header names read folded as CGI and WSGI servers
// fold them (FieldValues, CheckFieldName), and the authority check that
// keeps a request inside the tunnel it came through.
//
// The protocols live beside it, one package each: l7/rest (method, path
// and query rules) and l7/websocket (the framing of an upgraded
// connection). The parsers take untrusted input and have fuzz targets.
package l7

import (
	"errors"
	"strconv"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/decision"
)

// ErrAuthority is a request authority other than the tunnel's.
var ErrAuthority = errors.New("request authority does not match the tunnel's host")

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
