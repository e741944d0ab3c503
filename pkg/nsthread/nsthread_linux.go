//go:build linux

// Package nsthread runs a function on an OS thread that has entered a
// network namespace, without moving the caller. setns is per-thread: the
// function runs on a dedicated goroutine locked to its thread; afterwards
// the thread returns to its namespace, or, if it cannot, stays locked so
// the Go runtime discards it instead of reusing a thread in the wrong
// namespace. Sockets the function opens stay in the namespace.
package nsthread

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Run runs fn in ns and returns fn's error (joined with any failure to
// enter or leave). Every handle Run opens is closed before it returns.
func Run(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("nsthread: get thread netns: %w", err)
			return
		}
		if err := netns.Set(ns); err != nil {
			orig.Close()
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("nsthread: enter netns: %w", err)
			return
		}
		ferr := fn()
		err = netns.Set(orig)
		orig.Close()
		if err != nil {
			// The thread stays locked: it dies with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("nsthread: restore thread netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
