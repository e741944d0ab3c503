// Package runtimetune keeps the Go runtime's monitor thread (sysmon) out
// of its deep sleep in a daemon that answers one short exchange after
// another, as egress-proxy does.
//
// Whenever every P is idle, sysmon parks on a futex, and the next system
// call any goroutine makes wakes it again and resets it to polling every
// 20 µs. A proxy serving one connection at a time idles between the
// packets of every connection, so each connection paid a futex wake and
// the monitor's thread running on another CPU. On the 2-vCPU machine of
// docs/egress-proxy.md (scripts/bench/connrate.sh, proxy-cpu-us) that was
// 2.4 futex calls and 9-10 context switches per connection instead of
// none and 2-4, and 215-240 µs of proxy CPU per connection instead of
// 180-210. The runtime has no knob for this but one: while GODEBUG sets
// schedtrace, sysmon never deep-sleeps (it backs off to one poll per
// 10 ms instead). Apply sets it to its longest period, so the runtime
// prints its one-line scheduler summary ("SCHED …") to stderr only when
// the machine has been up more than 24.8 days (the runtime counts from
// boot), and then every 24.8 days.
//
// An operator who sets schedtrace in GODEBUG (schedtrace=0 restores the
// runtime's default) keeps their setting: Apply changes nothing then.
package runtimetune

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Setting is what Apply adds to GODEBUG: the longest schedtrace period
// (the runtime keeps it in an int32 of milliseconds, 24.8 days).
const Setting = "schedtrace=2147483647"

// Env returns env with Setting added to its GODEBUG (the first one, which
// is the one the runtime reads; its other settings kept, in order), and
// true; or env unchanged and false when that GODEBUG already sets
// schedtrace.
func Env(env []string) ([]string, bool) {
	out := append(make([]string, 0, len(env)+1), env...)
	for i, kv := range out {
		v, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			continue
		}
		for _, s := range strings.Split(v, ",") {
			if k, _, _ := strings.Cut(s, "="); k == "schedtrace" {
				return env, false
			}
		}
		if v == "" {
			out[i] = "GODEBUG=" + Setting
		} else {
			out[i] = "GODEBUG=" + v + "," + Setting
		}
		return out, true
	}
	return append(out, "GODEBUG="+Setting), true
}

// Apply re-executes the running binary (same arguments, same process)
// with Setting added to GODEBUG, unless GODEBUG already sets schedtrace.
// Call it first in main, before anything is opened or changed:
// descriptors, namespaces, credentials and the pid carry over an exec,
// and the new image runs main again, where Apply then does nothing. The
// binary is executed by its path, not as /proc/self/exe (whose name the
// kernel would make the process's name, "exe", for ps and pgrep), and
// only while that path still names the running file: a binary replaced
// since (an upgrade) is not executed in its place.
//
// It returns only when it did not exec: nil when there was nothing to do,
// else why not (the process carries on untuned; the caller reports it
// once its logger is up).
func Apply() error {
	env, want := Env(os.Environ())
	if !want {
		return nil
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("re-exec with GODEBUG=%s: %w", Setting, err)
	}
	if err := sameFile("/proc/self/exe", exe); err != nil {
		return fmt.Errorf("re-exec with GODEBUG=%s: %w", Setting, err)
	}
	err = unix.Exec(exe, os.Args, env)
	return fmt.Errorf("re-exec %s with GODEBUG=%s: %w", exe, Setting, err)
}

// sameFile checks that path is the running binary.
func sameFile(running, path string) error {
	var a, b unix.Stat_t
	if err := unix.Stat(running, &a); err != nil {
		return err
	}
	if err := unix.Stat(path, &b); err != nil {
		return err
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return fmt.Errorf("%s is no longer the running binary (replaced since start)", path)
	}
	return nil
}
