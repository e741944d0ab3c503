package testutil

import (
	"net"
	"testing"
	"time"
)

// RequireData skips (or fails, under PALISADE_REQUIRE_PRIVILEGED=1) when a
// test's data dependency is unavailable: err is what went wrong finding
// it, what names the data (e.g. "the OCSF 1.8.0 definitions"). A nil err
// does nothing.
func RequireData(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		skipOrFail(t, "requires "+what+": "+err.Error())
	}
}

// reachTimeout bounds RequireReachable's connection attempt.
const reachTimeout = 10 * time.Second

// RequireReachable skips (or fails, under PALISADE_REQUIRE_PRIVILEGED=1)
// unless a TCP connection to every host:port in addrs opens within 10 s.
// It is for the few tests whose issue names a real public service (the
// package-manager matrix and its registries); what names the need, e.g.
// "the npm registry".
func RequireReachable(t testing.TB, what string, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, reachTimeout)
		if err != nil {
			RequireData(t, what+" ("+a+" reachable from this host)", err)
			return
		}
		c.Close()
	}
}
