// Package upstreamproxy chains the egress proxy's TLS tunnels through an
// operator's corporate forward proxy (seed 004, "In proxy-required
// networks"): the --upstream-proxy family of flags shared by egress-proxy
// and sandbox-supervisor, their fail-closed validation, the root-only
// credential file and its Proxy-Authorization: Basic header, the
// port- and resolution-aware NO_PROXY list, and the CONNECT handshake
// (TLS to the proxy first for an https:// proxy).
//
// The configuration is operator-owned: it comes only from flags (argv the
// operator or the supervisor sets), never from HTTPS_PROXY, HTTP_PROXY or
// NO_PROXY, which the sandbox controls. A setting that is present but
// invalid is an error naming its flag; only omitting --upstream-proxy
// means "no upstream proxy". The credential never appears in an error, a
// log line, an event or argv: the flags carry the path of its file.
//
// The flow, once policy and the SSRF guard have passed a destination:
//
//	direct, entry := chain.Route(host, checked)   // NO_PROXY, loopback
//	if direct == nil {
//		raw := dial(chain.Host, chain.Port)        // TCP to the proxy
//		tunnel, err := chain.Connect(ctx, raw, chain.Target(host, checked[0]))
//	}
//
// The CONNECT target is the validated address, not the name, unless
// --upstream-proxy-connect-by-hostname: the proxy resolves nothing and
// the tunnel stays bound to the answer the SSRF guard checked.
//
// The package does not log.
package upstreamproxy
