package l7

import (
	"errors"
	"net/http"
	"strings"
)

// ErrFieldSpelling is a request header field that spells, with "_" for
// "-", a field the proxy itself reads for framing, authority or
// connection handling.
var ErrFieldSpelling = errors.New("header field name spells a field the proxy reads with '_'")

// FoldedEqual reports whether two header field names are one field to a
// server that folds them: case aside, "_" and "-" alike. CGI and WSGI
// servers (Python's wsgiref, PHP's CGI and FPM front ends) map
// X-HTTP-Method-Override and X_HTTP_Method_Override to the same
// HTTP_X_HTTP_METHOD_OVERRIDE.
func FoldedEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if fold(a[i]) != fold(b[i]) {
			return false
		}
	}
	return true
}

func fold(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '_':
		return '-'
	}
	return c
}

// FieldValues is Request.Field over h: the values of every field whose
// name is the one asked for once folded (FoldedEqual). A header without
// "_" in its names (nearly all) is read through h.Values.
func FieldValues(h http.Header) func(string) []string {
	for k := range h {
		if strings.IndexByte(k, '_') >= 0 {
			return func(name string) []string {
				var out []string
				for k, vv := range h {
					if FoldedEqual(k, name) {
						out = append(out, vv...)
					}
				}
				return out
			}
		}
	}
	return h.Values
}

// proxyFields are the fields the proxy itself reads: an upstream that
// folds "_" into "-" would read a "Transfer_Encoding" as framing the
// proxy never saw.
var proxyFields = []string{
	"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
	"expect", "keep-alive", "proxy-connection", "proxy-authorization", "http2-settings",
}

// CheckFieldName refuses a field name that spells one of the fields the
// proxy reads with "_" (ErrFieldSpelling). Override fields and
// Content-Type are not refused: the checker reads them folded
// (FieldValues).
func CheckFieldName(name string) error {
	if strings.IndexByte(name, '_') < 0 {
		return nil
	}
	for _, f := range proxyFields {
		if FoldedEqual(name, f) {
			return ErrFieldSpelling
		}
	}
	return nil
}
