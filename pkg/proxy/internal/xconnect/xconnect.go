// Package xconnect turns on golang.org/x/net/http2's server support for
// extended CONNECT (RFC 8441: WebSockets over HTTP/2), which that
// package enables only when GODEBUG holds http2xconnect=1 as it
// initialises, and offers no other switch.
//
// Importing xconnect adds http2xconnect=1 to GODEBUG before http2
// initialises: Go initialises packages in import-path order among those
// whose imports are ready (the spec, since Go 1.21), this package
// needs only os, which http2 imports too, and "github.com/..." sorts
// before "golang.org/...". A package that imports http2 calls Restore
// from its init to put GODEBUG back, so no child process inherits it.
// pkg/proxy's TestWebSocketOverH2 fails if http2 ever initialises
// first (its server would refuse :protocol).
package xconnect

import "os"

var prev, had = os.LookupEnv("GODEBUG")

func init() {
	v := "http2xconnect=1"
	if prev != "" {
		v = prev + "," + v
	}
	os.Setenv("GODEBUG", v)
}

// Restore puts GODEBUG back as it was before this package's init.
func Restore() {
	if had {
		os.Setenv("GODEBUG", prev)
	} else {
		os.Unsetenv("GODEBUG")
	}
}
