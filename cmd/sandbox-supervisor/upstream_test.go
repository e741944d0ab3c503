package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
	"github.com/palisade-sandbox/palisade/pkg/upstreamproxy/upstreamproxytest"
)

// TestUpstreamProxyFlagsFailClosed runs the real binary with each
// invalid --upstream-proxy combination: a fault in the flags is a usage
// error (exit 2), a fault in a file they name stops the run (exit 125),
// both before the sandbox's state exists, even though this policy
// starts no proxy; each with its own message naming the flag, never
// with the credential.
func TestUpstreamProxyFlagsFailClosed(t *testing.T) {
	testutil.RequireRoot(t) // run reads the files as root, and only as root
	bin := testutil.Binary(t, "sandbox-supervisor")
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nnetwork_policies: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	upstreamproxytest.Check(t, upstreamproxytest.Cases(t, dir), cli.ExitUsage, sandbox.ExitSandboxFailed, func(c upstreamproxytest.Case) (int, string) {
		st := filepath.Join(t.TempDir(), "state")
		code, stderr := upstreamproxytest.Exec(bin, append(append([]string{"run", "--policy", pol, "--state-dir", st}, c.Args...), "--", "/bin/true")...)
		if _, err := os.Stat(st); !os.IsNotExist(err) {
			t.Errorf("%s: the state root exists after the refusal (%v)", c.Name, err)
		}
		return code, stderr
	})
}
