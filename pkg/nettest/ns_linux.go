//go:build linux

package nettest

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"

	"github.com/palisade-sandbox/palisade/pkg/nsthread"
)

// Do runs fn on a locked OS thread that has entered ns and returns fn's
// error. Sockets fn opens stay in ns after Do returns, so the usual shape
// is: listen (or dial) inside Do, serve from any goroutine. The caller's
// goroutine and thread are never moved; if the helper thread cannot
// return to its namespace it stays locked and the runtime discards it.
func Do(ns netns.NsHandle, fn func() error) error { return nsthread.Run(ns, fn) }

// newNetns creates an anonymous network namespace and returns a handle
// to it; it lives while the handle or a socket in it is open.
func newNetns() (netns.NsHandle, error) {
	type res struct {
		h   netns.NsHandle
		err error
	}
	rc := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			rc <- res{err: err}
			return
		}
		defer orig.Close()
		h, err := netns.New()
		if err != nil {
			// unshare failed: the thread is where it was.
			runtime.UnlockOSThread()
			rc <- res{err: fmt.Errorf("nettest: new netns: %w", err)}
			return
		}
		if err := netns.Set(orig); err != nil {
			h.Close()
			rc <- res{err: fmt.Errorf("nettest: restore thread netns: %w", err)}
			return // thread stays locked and dies
		}
		runtime.UnlockOSThread()
		rc <- res{h: h}
	}()
	r := <-rc
	return r.h, r.err
}
