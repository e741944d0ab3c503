package proxy

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DenialBody is the JSON body of a 403: the structured denial that coding
// CLIs and the seeds' failure classifier read ("error" is policy_denied or
// ssrf_denied). Field order is fixed.
type DenialBody struct {
	Error  string `json:"error"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Binary string `json:"binary"`
	// PID is the caller's pid in its own (the sandbox's) pid namespace,
	// 0 when unknown; never the host pid, which only events carry.
	PID    int    `json:"pid"`
	Policy string `json:"policy"`
	Reason string `json:"reason"`
	// Method and Path (normalised, never the query) name the refused
	// request of an inspected connection.
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
}

// errorBody is the JSON body of the proxy's other error responses (400,
// 408, 431, 502, 503, 504).
type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"` // what to fix, for a malformed request; what the upstream proxy did, for its failures
}

// ProxyStatusName is the proxy's name in the Proxy-Status field (RFC 9209)
// of its denials.
const ProxyStatusName = "palisade-egress-proxy"

// ProxyStatus is the Proxy-Status field value (RFC 9209) that goes with
// the denial body on every 403: the proxy's name, the registered error
// type (destination_ip_prohibited for an SSRF refusal,
// http_request_denied for a policy refusal) and, as details, the body's
// error followed by its fields as name=value, the same names as in the
// JSON (reason, policy: the entry, host, port, binary, and method and
// path for an inspected request), empty ones left out. Clients that drop
// a refused CONNECT's body (curl, git, Python, Node) still show their
// user the response's fields in verbose modes, and proxies in between
// pass the field on.
func (d *DenialBody) ProxyStatus() string {
	errType := "http_request_denied"
	if d.Error == OutcomeSSRFDenied {
		errType = "destination_ip_prohibited"
	}
	var b strings.Builder
	b.WriteString(ProxyStatusName)
	b.WriteString("; error=")
	b.WriteString(errType)
	b.WriteString(`; details="`)
	b.WriteString(statusValue(d.Error))
	for _, f := range [...]struct{ k, v string }{
		{"reason", d.Reason}, {"policy", d.Policy}, {"host", d.Host}, {"port", portString(d.Port)},
		{"binary", d.Binary}, {"method", d.Method}, {"path", d.Path},
	} {
		if f.v == "" {
			continue
		}
		b.WriteString(" " + f.k + "=")
		b.WriteString(statusValue(f.v))
	}
	b.WriteByte('"')
	return b.String()
}

// reasonPhrase is the status line's text for a denial: "Forbidden" and
// the error and reason, which is all that Python's http.client ("Tunnel
// connection failed: 403 Forbidden (...)") and Go's net/http show of a
// refused CONNECT.
func (d *DenialBody) reasonPhrase() string {
	return "Forbidden (" + statusValue(d.Error) + ": " + statusValue(d.Reason) + ")"
}

func portString(p int) string {
	if p == 0 {
		return ""
	}
	return strconv.Itoa(p)
}

// statusValue makes v safe inside a Structured Fields string (RFC 8941:
// printable ASCII, '"' and '\' escaped) and a status line, and keeps the
// details' name=value pairs apart: a space, '%', '"', '\', a control
// character and every byte outside ASCII are percent-encoded (a binary
// path or an entry name may hold any of them).
func statusValue(v string) string {
	i := strings.IndexFunc(v, func(r rune) bool { return r > 0x7e || r < 0x80 && escapeInStatus(byte(r)) })
	if i < 0 {
		return v
	}
	const hex = "0123456789ABCDEF"
	b := append(make([]byte, 0, len(v)+8), v[:i]...)
	for ; i < len(v); i++ {
		if c := v[i]; c > 0x7e || escapeInStatus(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func escapeInStatus(c byte) bool { return c <= ' ' || c == 0x7f || c == '%' || c == '"' || c == '\\' }

// responseWriteTimeout bounds writing an error response to a client.
const responseWriteTimeout = 5 * time.Second

// writeJSONResponse writes a complete HTTP/1.1 response with a one-line
// JSON body and Connection: close, in one write.
func writeJSONResponse(c net.Conn, status int, body any) error {
	return writeResponse(c, status, http.StatusText(status), "", body)
}

// writeDenial writes a 403 with the denial body and its Proxy-Status.
func writeDenial(c net.Conn, d *DenialBody) error {
	return writeResponse(c, http.StatusForbidden, d.reasonPhrase(), d.ProxyStatus(), d)
}

// writeResponse writes a complete HTTP/1.1 response: the status line
// with phrase, Proxy-Status when given, a one-line JSON body and
// Connection: close, in one write.
func writeResponse(c net.Conn, status int, phrase, proxyStatus string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	buf := make([]byte, 0, 160+len(proxyStatus)+len(b))
	buf = append(buf, "HTTP/1.1 "...)
	buf = strconv.AppendInt(buf, int64(status), 10)
	buf = append(buf, ' ')
	buf = append(buf, phrase...)
	if proxyStatus != "" {
		buf = append(buf, "\r\nProxy-Status: "...)
		buf = append(buf, proxyStatus...)
	}
	buf = append(buf, "\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: "...)
	buf = strconv.AppendInt(buf, int64(len(b)), 10)
	buf = append(buf, "\r\n\r\n"...)
	buf = append(buf, b...)
	c.SetWriteDeadline(time.Now().Add(responseWriteTimeout))
	_, err = c.Write(buf)
	c.SetWriteDeadline(time.Time{})
	return err
}

// connectEstablished is the reply to an allowed CONNECT.
var connectEstablished = []byte("HTTP/1.1 200 Connection established\r\n\r\n")
