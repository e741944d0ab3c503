package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
	"github.com/palisade-sandbox/palisade/pkg/upstreamproxy/upstreamproxytest"
)

// TestUpstreamProxyFlagsFailClosed runs the real binary with each
// invalid --upstream-proxy combination: each stops the start with its
// own message naming the flag (exit 2 for the flags, 1 for a file they
// name), never with the credential in it, and never as a proxy that
// would have dialled directly.
func TestUpstreamProxyFlagsFailClosed(t *testing.T) {
	bin := testutil.Binary(t, "egress-proxy")
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nnetwork_policies: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	upstreamproxytest.Check(t, upstreamproxytest.Cases(t, dir), cli.ExitUsage, cli.ExitFailed, func(c upstreamproxytest.Case) (int, string) {
		return upstreamproxytest.Exec(bin, append([]string{"--policy", pol, "--listen", "127.0.0.1:0"}, c.Args...)...)
	})
}
