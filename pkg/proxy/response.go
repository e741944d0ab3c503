package proxy

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
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
	Detail string `json:"detail,omitempty"` // what to fix, for a malformed request
}

// responseWriteTimeout bounds writing an error response to a client.
const responseWriteTimeout = 5 * time.Second

// writeJSONResponse writes a complete HTTP/1.1 response with a one-line
// JSON body and Connection: close, in one write.
func writeJSONResponse(c net.Conn, status int, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	buf := make([]byte, 0, 160+len(b))
	buf = append(buf, "HTTP/1.1 "...)
	buf = strconv.AppendInt(buf, int64(status), 10)
	buf = append(buf, ' ')
	buf = append(buf, http.StatusText(status)...)
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
