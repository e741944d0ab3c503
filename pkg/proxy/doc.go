// Package proxy is the core of egress-proxy, the only way out of a
// Palisade sandbox: an explicit HTTP proxy (CONNECT tunnels and
// absolute-form http:// forwarding), a fence listener for connections the
// host-side nftables redirected because they tried to bypass the proxy, and
// a root-only Unix control socket (status, Prometheus metrics, reload).
//
// Every request follows one order: bounded head parse, host
// canonicalisation, caller attribution, trust-on-first-use binary pin,
// policy decision (before any DNS lookup, so a denied name is never
// resolved), then an SSRF-checked dial of exactly the address that was
// checked. A denial is an HTTP 403 with a one-line JSON body whose error is
// "policy_denied" or "ssrf_denied", sent before any tunnel byte, with the
// same facts in a Proxy-Status field (RFC 9209) and in the status line's
// text, which is what clients that drop a refused CONNECT's body show.
//
// The request path is one function per transport, each reading top to
// bottom: serveConnect (a CONNECT tunnel) and serveForward (a forwarded
// http:// request) in handle.go; handleTransparent (a connection to a
// policy DNS synthetic address) in transparent.go; inspect and serveTLS
// (an inspected tunnel: the client's TLS terminated, the upstream's
// handshake) in inspect.go, then serveH1 (h1.go) or serveH2 (inspect.go)
// for the tunnel's HTTP/1.x or HTTP/2, each handing every request to
// inspector.serve, and upgrade (websocket.go) for a WebSocket after it.
// The steps they share are admit (attribution, binary pin, decision:
// decide.go), dialUpstream (direct, chained through an upstream proxy,
// or to a mapping's pinned addresses), tunnel (what an allowed tunnel
// becomes, CONNECT or transparent), credential preparation after
// admission (outgoing.go) and the endpoint's protocol rules: an
// l7.Inspector chosen by the endpoint's protocol (newInspector in
// protocols.go; the rules themselves live in pkg/l7/<protocol>). Every
// finished record updates its endpoint's status (endpoints.go). This
// package stays transport, TLS and decisions.
//
// Policy generations are compiled off the hot path and swapped atomically;
// each connection pins the generation it started with. Reloads come from
// an inotify watch on the policy file's directory, SIGHUP (wired by the
// binary) or POST /reload; any error keeps the last-known-good generation.
//
// Each connection yields exactly one summary Record, and the OCSF events
// are built from it; repeated denials of the same (host, port, binary) are
// rate-limited with counts, the first of each distinct (method, path,
// reason, call) still reported in full (ratelimit.go). The policy engine, SSRF dialer and attribution
// backend are reached through the small interfaces Decider, Dialer,
// Attributor and Pinner, so tests use fakes and egress-proxy wires the real
// packages.
package proxy
