// Package decision is the egress proxy's policy decision engine. Compile
// turns one generation of a policy's network_policies into an immutable
// Engine; Decide answers, for a (host, port, calling binary and its
// ancestors) request, whether some entry allows it, which entry and
// endpoint matched, and otherwise the single most specific deny Reason.
//
// The engine decides before any DNS lookup: a name no endpoint selects is
// denied without being resolved. Exact hosts are map lookups, IP hosts a
// map keyed by address, wildcard hosts are indexed by their literal suffix
// and hostless allowed_ips endpoints by port, so a policy with 10,000
// endpoints decides in about a microsecond. Host and binary patterns are
// matched by package policy; the index only narrows the candidates.
//
// An Engine is safe for concurrent use; the proxy pins one per connection
// and swaps in a new one on reload.
package decision
