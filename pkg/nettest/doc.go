// Package nettest is the "fake internet" for Palisade's network tests: a
// network namespace holding TEST-NET addresses (a /28 of 198.51.100.0/24
// and a /64 of 2001:db8::/32) joined to the host namespace by a veth, with
// real servers inside it — HTTP on :80, HTTPS on :443 (certificates signed
// on the fly by a throwaway CA the test can read) and a TCP echo server on
// :7 — plus a hosts-file writer so a proxy's --hosts-file can map names
// such as allowed.test to those addresses. A proxy running in the host
// namespace reaches the servers through routes that exist only while the
// test runs.
//
// The package is imported only by tests. It touches nothing outside what
// it creates: one veth whose name starts with "nti", one /28 route and
// one /64 route on it (claimed exclusively, so concurrent tests, even in
// other processes, get different blocks), one /32 and one /128 address on
// it, and the namespace itself; all of it goes away at test cleanup, and
// all of it goes away with the process if the test crashes.
package nettest
