// Package ssrf keeps the egress proxy from being turned against the host,
// its network or the cloud around it: it recognises IP literals in every
// spelling a C library or URL parser accepts (decimal 2130706433, octal
// 0177.0.0.1, hex 0x7f.1, short 127.1, bracketed IPv6), classifies
// addresses (loopback, private, link-local, metadata, the IPv6 forms that
// embed an IPv4 address, ...), decides with a Guard which destinations a
// matched policy endpoint may reach, and dials through a Dialer that
// resolves once, checks every answer and connects to exactly the checked
// address — never re-resolving between check and dial. On Linux the
// Dialer starts each connect itself from the socket's Control hook, to
// the checked address only, so a handshake that completes inside
// connect(2) (a veth or loopback peer) does not wait for the runtime's
// poller.
//
// The flow is resolve → classify → dial:
//
//	d := &ssrf.Dialer{Resolver: ssrf.SystemResolver{}, Guard: &ssrf.Guard{Self: own}}
//	conn, dst, err := d.DialContext(ctx, "api.example.com", 443, true, nil)
//	var deny *ssrf.DenyError
//	if errors.As(err, &deny) { /* 403 ssrf_denied, deny.Reason.String() */ }
//
// The package does not log.
package ssrf
