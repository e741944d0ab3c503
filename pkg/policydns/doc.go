// Package policydns is a sandbox's policy DNS: the resolver the sandbox's
// /etc/resolv.conf points at, on the host side of its veth. It answers
// only names that are eligible through `protocol: tcp` endpoints of the
// policy in force, and answers them with synthetic IPv4 addresses from
// 198.18.0.0/15 (RFC 2544's benchmarking range, never routed) that the
// transparent TCP listener maps back to the validated real addresses.
// Every other name is refused locally and never forwarded: a denied
// lookup cannot carry data out in its labels, and the real addresses are
// resolved by the proxy (through the SSRF guard), never by the sandbox.
//
// A Table holds the mappings of one sandbox for one boot epoch. The range
// is cut into EpochRanges /21s and an epoch hands out addresses of its
// own one only (EpochRange): sandboxnet advances a persisted epoch before
// every start of the proxy (--dns-epoch), so an address a client cached
// before a restart is refused as another epoch's (ErrOtherEpoch) and is
// never mapped to another name; a proxy started without one draws a
// random epoch. At most MaxMappings are live; a mapping lives for its TTL (1 to 30
// seconds) and is then refused as expired, so a client must ask again
// (and the policy is applied again). A mapping is only good for the
// ports its name was eligible on.
//
// Limits (seed 004): an exchange is answered within ExchangeTimeout,
// messages are at most MaxMessage bytes, at most MaxAddrs real addresses
// are kept per name, CNAME chains are followed by the proxy's resolver
// (at most MaxCNAMEHops, enforced by Go's resolver's own bound of 10 and
// the hosts file having none), and at most MaxConcurrent queries are in
// flight; more are answered SERVFAIL at once. AAAA queries for an
// eligible name get NOERROR with no data (the synthetic range is IPv4
// only; IPv6 stays fenced), other types likewise.
//
// egress-proxy serves it (--dns-listen, with --transparent-listen) when
// sandboxnet starts a sandbox whose policy has a `protocol: tcp`
// endpoint; TCPNames gives the eligible names of a policy and ResolvConf
// the sandbox's /etc/resolv.conf.
//
// DNS messages are parsed by github.com/miekg/dns, never by hand.
package policydns
