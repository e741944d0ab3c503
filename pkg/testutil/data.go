package testutil

import "testing"

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
