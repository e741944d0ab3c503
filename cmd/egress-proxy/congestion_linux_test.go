//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
)

// A congestion control the kernel refuses stops start-up on Linux,
// naming the listener and the algorithm; it never silently falls back.
func TestUnknownClientCongestionControlFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(p, []byte("version: 1\nnetwork_policies: {}\n"), 0o600)
	_, errOut, code := invoke(t, "--policy", p, "--listen", "127.0.0.1:0", "--client-cc", "no-such-cc")
	if code != cli.ExitFailed || !strings.Contains(errOut, "--listen") || !strings.Contains(errOut, "no-such-cc") {
		t.Errorf("exit %d (%s), want 1 naming --listen and the algorithm", code, errOut)
	}
}
