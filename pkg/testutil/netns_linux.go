//go:build linux

package testutil

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// InNetns runs fn in a fresh, anonymous network namespace on a locked OS
// thread and returns its error. The calling goroutine's namespace is never
// touched: fn runs on its own goroutine. If the thread cannot be moved back
// to its original namespace it stays locked, so the Go runtime discards it
// when the goroutine exits instead of reusing a thread in the wrong
// namespace. The namespace disappears when fn returns and nothing else
// holds it.
func InNetns(t testing.TB, fn func(ns netns.NsHandle) error) error {
	t.Helper()
	RequireRoot(t)
	RequireFeature(t, "ns:net")
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		ns, err := netns.New() // unshare(CLONE_NEWNET) on this thread
		if err != nil {
			orig.Close()
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("new netns: %w", err)
			return
		}
		ferr := fn(ns)
		ns.Close()
		err = netns.Set(orig)
		// Every handle is closed before the caller hears back, so an
		// fd-leak check right after InNetns sees none of them.
		orig.Close()
		if err != nil {
			// Leave the thread locked: it dies with this goroutine.
			errc <- fmt.Errorf("restore netns: %w (fn: %v)", err, ferr)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// NamedNetns creates a network namespace bound at /run/netns/<name> (like
// `ip netns add`) with a unique name, and deletes it at test cleanup. It
// returns the name and an open handle; the creating thread is restored.
func NamedNetns(t testing.TB, prefix string) (string, netns.NsHandle) {
	t.Helper()
	RequireRoot(t)
	RequireFeature(t, "ns:net")
	name := UniqueName(prefix)
	type res struct {
		h   netns.NsHandle
		err error
	}
	rc := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			rc <- res{err: err}
			return
		}
		h, err := netns.NewNamed(name)
		if err != nil {
			orig.Close()
			runtime.UnlockOSThread()
			rc <- res{err: err}
			return
		}
		err = netns.Set(orig)
		orig.Close()
		if err != nil {
			rc <- res{err: fmt.Errorf("restore netns: %w", err)}
			return // thread stays locked and dies
		}
		runtime.UnlockOSThread()
		rc <- res{h: h}
	}()
	r := <-rc
	if r.err != nil {
		t.Fatalf("create netns %s: %v", name, r.err)
	}
	t.Cleanup(func() {
		r.h.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	return name, r.h
}
