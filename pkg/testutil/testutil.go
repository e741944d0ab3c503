// Package testutil is the test support every Palisade package uses:
// privilege and kernel-feature gates that skip with a reason but fail under
// PALISADE_REQUIRE_PRIVILEGED=1, unique names for kernel objects, a
// throwaway network namespace on a locked OS thread, an fd-leak check, and
// the re-exec helper that applies irreversible confinement in a child copy
// of the test binary instead of the test process.
package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// RequirePrivilegedEnv is the environment variable that turns every
// privilege or feature skip into a failure. .ci/run sets it.
const RequirePrivilegedEnv = "PALISADE_REQUIRE_PRIVILEGED"

// Strict reports whether skips must become failures.
func Strict() bool {
	v := os.Getenv(RequirePrivilegedEnv)
	return v != "" && v != "0"
}

// skipOrFail skips the test with reason, or fails it under
// PALISADE_REQUIRE_PRIVILEGED=1.
func skipOrFail(t testing.TB, reason string) {
	t.Helper()
	if Strict() {
		t.Fatalf("%s (and %s=1 forbids skipping)", reason, RequirePrivilegedEnv)
	}
	t.Skip(reason)
}

// RequireRoot skips (or fails, under PALISADE_REQUIRE_PRIVILEGED=1) unless
// the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, fmt.Sprintf("requires root (euid is %d)", os.Geteuid()))
	}
}

// RequireFeature skips (or fails, under PALISADE_REQUIRE_PRIVILEGED=1)
// unless the named kernel feature probe in package feature passes. The
// skip message names the feature and the minimum kernel. A host-shape
// probe (feature.Probe.HostShape, e.g. "cgroup-layout:hybrid") skips in
// both modes: the test is for another supported layout, so a host of
// this one has nothing for it to check.
func RequireFeature(t testing.TB, name string) {
	t.Helper()
	err := feature.Check(name)
	if err == nil {
		return
	}
	if p, ok := feature.Lookup(name); ok && p.HostShape {
		t.Skip("written for another host layout: " + err.Error())
	}
	skipOrFail(t, "requires "+err.Error())
}

// RequireCommand skips (or fails in strict mode) unless the named program
// is on PATH. Used for test-only clients such as curl.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := lookPath(name)
	if err != nil {
		skipOrFail(t, fmt.Sprintf("requires the %s command on PATH", name))
	}
	return p
}

// UniqueName returns prefix followed by random hex, short enough for
// interface names (15 bytes) when prefix is at most 6 bytes.
func UniqueName(prefix string) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// CheckFDLeaks records the process's open fds now and fails the test at
// cleanup if new ones remain open. Call it first in a test whose code opens
// sockets, pipes or namespace handles.
func CheckFDLeaks(t testing.TB) {
	t.Helper()
	// The runtime's network poller (an epoll and an eventfd, for the
	// life of the process) starts with the first pollable fd; a pipe
	// starts it now, so it is in the baseline even when this test is
	// the first of the process to open a socket (go test -run TestX).
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	t.Cleanup(func() {
		after := openFDs()
		var leaked []string
		for fd, target := range after {
			if _, ok := before[fd]; !ok {
				leaked = append(leaked, fmt.Sprintf("%s -> %s", fd, target))
			}
		}
		if len(leaked) > 0 {
			t.Errorf("leaked %d fd(s): %s", len(leaked), strings.Join(leaked, ", "))
		}
	})
}

func openFDs() map[string]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(ents))
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the fd ReadDir itself used, already closed
		}
		out[e.Name()] = target
	}
	return out
}

// HostLock serialises tests, in every package and process, that change
// or depend on one host-wide setting (name, e.g. "audit"): it holds an
// exclusive flock on /run/palisade-test-<name>.lock until the test ends.
func HostLock(t testing.TB, name string) {
	t.Helper()
	f, err := os.OpenFile("/run/palisade-test-"+name+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("host lock %s: %v", name, err)
	}
	if err := flock(f); err != nil {
		f.Close()
		t.Fatalf("host lock %s: %v", name, err)
	}
	t.Cleanup(func() { f.Close() })
}
