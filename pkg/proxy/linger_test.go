package proxy

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A client still sending a large body when the proxy answers and closes
// (a 413 before the body is read) gets to finish sending and reads the
// answer: lingerClose drains instead of closing with unread data, which
// the kernel turns into a reset (EPIPE or ECONNRESET on the client's
// write). Over plain TCP and over a terminated TLS connection (the
// inspected HTTP/1.1 tunnel), where the half-close is TLS's
// close_notify.
func TestLingerCloseLetsClientFinishBody(t *testing.T) {
	const answer = "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS()
	serverTLS := srv.TLS.Clone()
	clientTLS := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	clientTLS.ServerName = "example.com" // httptest's certificate
	srv.Close()
	for _, withTLS := range []bool{false, true} {
		name := "tcp"
		if withTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if withTLS {
					tc := tls.Server(c, serverTLS)
					if tc.Handshake() != nil {
						c.Close()
						return
					}
					c = tc
				}
				c.Write([]byte(answer))
				lingerClose(c, 2*time.Second)
			}()
			var c net.Conn
			if c, err = net.Dial("tcp", ln.Addr().String()); err != nil {
				t.Fatal(err)
			}
			if withTLS {
				c = tls.Client(c, clientTLS)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			// 4 MiB in 64 KiB writes, well past any socket buffer, so
			// that a close with unread data would reset the connection
			// mid-body.
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			for i := range 64 {
				if _, err := c.Write(chunk); err != nil {
					t.Fatalf("write %d of the body: %v", i, err)
				}
			}
			got, err := io.ReadAll(c)
			if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 413") {
				t.Fatalf("answer after the body: %q, %v", got, err)
			}
		})
	}
}
