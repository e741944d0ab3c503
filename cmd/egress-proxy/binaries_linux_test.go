//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/binaries/binariestest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The proxy's load tells the truth about listed binaries (#23 item 6):
// standalone, every note is logged at start (a warning, a missing path
// at info); a reload that lists a new one logs that one alone, once.
func TestLoadWarnsAboutBinaries(t *testing.T) {
	testutil.RequireRoot(t)
	fx := binariestest.New(t, t.TempDir())
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, nil, 0o600)
	os.WriteFile(pol, []byte("version: 1\nnetwork_policies:\n"+fx.Entries), 0o600)
	p := startProxy(t, pol, hosts)

	// notes are the proxy's log lines about binaries, "LEVEL msg".
	notes := func() []string {
		var out []string
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && strings.HasPrefix(fmt.Sprint(m["msg"]), "network_policies.") {
				out = append(out, fmt.Sprint(m["level"], " ", m["msg"]))
			}
		}
		return out
	}
	// The ready pipe can overtake stderr (copied by a goroutine of
	// exec): wait for the notes, then for any extra one to follow.
	for deadline := time.Now().Add(5 * time.Second); len(notes()) < len(fx.Want) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n := notes(); len(n) != len(fx.Want) {
		t.Fatalf("%d binary notes at load, want %d:\n%s", len(n), len(fx.Want), p.stderr)
	}
	for kind, phrase := range fx.Want {
		level := "WARN "
		if kind == "missing" {
			level = "INFO " // often meant, in a policy for several hosts
		}
		found := false
		for _, n := range notes() {
			found = found || strings.HasPrefix(n, level) && strings.Contains(n, phrase)
		}
		if !found {
			t.Errorf("no %s note at %s with %q:\n%s", kind, level, phrase, p.stderr)
		}
	}

	// Reload listing one more script: one new warning, the old notes are
	// not repeated.
	extra := filepath.Join(fx.Dir, "also.sh")
	os.WriteFile(extra, []byte("#!/bin/sh\n"), 0o755)
	more := "  more:\n    endpoints:\n      - host: more.test\n        port: 443\n    binaries:\n      - path: " + extra + "\n"
	os.WriteFile(pol, []byte("version: 1\nnetwork_policies:\n"+fx.Entries+more), 0o600)
	p.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for len(notes()) == len(fx.Want) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // any repeat would follow at once
	n := notes()
	if len(n) != len(fx.Want)+1 || !strings.HasPrefix(n[len(n)-1], "WARN ") || !strings.Contains(n[len(n)-1], extra+" is a script run by") {
		t.Errorf("after the reload: %d notes, last %q:\n%s", len(n), n[len(n)-1], p.stderr)
	}
}
