package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// What a relayed (not inspected) tunnel's first bytes are checked for:
// a TLS ClientHello must name the tunnel's host (checkSNI).

// helloConn feeds crypto/tls the bytes of a ClientHello while recording
// them, and swallows whatever the TLS stack writes back.
type helloConn struct {
	net.Conn
	r   io.Reader
	got []byte
}

func (h *helloConn) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.got = append(h.got, p[:n]...)
	return n, err
}
func (h *helloConn) Write(p []byte) (int, error) { return len(p), nil }

var errHelloSeen = errors.New("client hello read")

// readClientHello reads a TLS ClientHello from r with crypto/tls's own
// parser and returns every byte it consumed (to be replayed upstream) and
// the server name the client asked for ("" when it sent none). ok is
// false when the bytes were not a ClientHello.
func readClientHello(c net.Conn, r io.Reader) (raw []byte, sni string, ok bool) {
	hc := &helloConn{Conn: c, r: r}
	srv := tls.Server(hc, &tls.Config{GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, ok = hi.ServerName, true
		return nil, errHelloSeen
	}})
	srv.Handshake()
	return hc.got, sni, ok
}

// sameHost compares a TLS server name with the tunnel's canonical host.
func sameHost(serverName, host string) bool {
	c, err := CanonicalHost(serverName)
	return err == nil && c == host
}

// checkSNI runs before a passthrough tunnel relays the client's first
// bytes: a ClientHello naming another host than the CONNECT target is
// domain fronting and ends the tunnel, and so does a TLS record other
// than a handshake before the ClientHello, or a handshake record that
// is not a readable ClientHello (crypto/tls's parser reads one spread
// over several records). Bytes that do not begin a TLS record are not
// TLS and go through (SSH, a server-first protocol). It returns the bytes read, to be
// sent upstream first. A PostgreSQL SSLRequest is sent upstream at once
// and the check applies to the ClientHello that follows the server's
// answer.
func (p *Proxy) checkSNI(c *net.TCPConn, br *bufio.Reader, up net.Conn, rec *Record) ([]byte, bool) {
	first, err := br.Peek(1) // no deadline: server-first protocols wait here
	if err == nil && first[0] == pgSSLRequest[0] {
		c.SetReadDeadline(time.Now().Add(p.cfg.Limits.HeadTimeout))
		b, perr := br.Peek(len(pgSSLRequest))
		c.SetReadDeadline(time.Time{})
		if perr == nil && bytes.Equal(b, pgSSLRequest) {
			up.SetWriteDeadline(time.Now().Add(p.cfg.Limits.IdleTimeout))
			_, werr := up.Write(b)
			up.SetWriteDeadline(time.Time{})
			if werr != nil {
				return nil, false
			}
			rec.BytesUp += int64(len(b))
			br.Discard(len(b))
		}
		first, err = br.Peek(1) // (after the server's answer) Peek(8) may have moved the buffer
	}
	if err == nil && first[0] != tlsRecordHandshake && tlsRecordType(first[0]) {
		// A TLS record that is not a handshake before the ClientHello (a
		// warning alert, change-cipher-spec, application data): a Go
		// crypto/tls server ignores a warning alert and completes the
		// handshake for the ClientHello after it, which this check would
		// never have read. Refused when the bytes are a record header,
		// or stop before saying (the tunnel began like one).
		c.SetReadDeadline(time.Now().Add(p.cfg.Limits.HeadTimeout))
		hdr, perr := br.Peek(3)
		c.SetReadDeadline(time.Time{})
		if perr != nil || hdr[1] == 3 {
			rec.Outcome, rec.Reason = OutcomePolicyDenied, ReasonClientHelloNotFirst
			rec.Cause = "TLS " + tlsRecordName(first[0]) + " record before the ClientHello"
			return nil, false
		}
	}
	if err != nil || first[0] != tlsRecordHandshake {
		n := br.Buffered()
		b, _ := br.Peek(n)
		return append([]byte(nil), b...), err == nil || n > 0
	}
	c.SetReadDeadline(time.Now().Add(p.cfg.Limits.HeadTimeout))
	raw, sni, ok := readClientHello(c, br)
	c.SetReadDeadline(time.Time{})
	if !ok {
		// A handshake record the proxy cannot read in time (a server
		// name list crypto/tls refuses but OpenSSL reads by its first
		// entry, a stall past the head timeout) is not let through
		// unchecked.
		rec.Outcome, rec.Reason = OutcomePolicyDenied, ReasonBadClientHello
		rec.Cause = "TLS handshake record is not a ClientHello the proxy could read"
		return nil, false
	}
	if sni != "" && !sameHost(sni, rec.Host) {
		rec.Outcome, rec.Reason = OutcomePolicyDenied, ReasonSNIMismatch
		rec.Cause = "ClientHello server name differs from the CONNECT host"
		return nil, false
	}
	rest, _ := br.Peek(br.Buffered())
	return append(raw, rest...), true
}

// TLS record content types (RFC 8446 §5.1; heartbeat RFC 6520).
const (
	tlsRecordCCS       = 0x14
	tlsRecordAlert     = 0x15
	tlsRecordHandshake = 0x16
	tlsRecordAppData   = 0x17
	tlsRecordHeartbeat = 0x18
)

func tlsRecordType(b byte) bool { return tlsRecordCCS <= b && b <= tlsRecordHeartbeat }

func tlsRecordName(b byte) string {
	switch b {
	case tlsRecordCCS:
		return "change-cipher-spec"
	case tlsRecordAlert:
		return "alert"
	case tlsRecordAppData:
		return "application-data"
	case tlsRecordHeartbeat:
		return "heartbeat"
	}
	return "handshake"
}

// pgSSLRequest is PostgreSQL's request to start TLS (length 8, code
// 80877103): the server answers one byte and the client's ClientHello
// follows.
var pgSSLRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}
