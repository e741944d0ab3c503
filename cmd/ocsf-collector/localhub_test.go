package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// #29 item 8: the local hub's documented flow, run as written (as root,
// from the repository) with the binaries under test, a port, a directory
// and a working directory of its own: the hub hands out the assigned
// policy, policy-sync installs it and reports convergence, a sandbox runs
// under it, and the collector's events land in the hub's ledger, each
// step on the hub's journal.
func TestLocalHubFlowAsDocumented(t *testing.T) {
	testutil.RequireRoot(t)
	for _, f := range []string{"landlock", "seccomp", "nftables", "ns:net"} {
		testutil.RequireFeature(t, f)
	}
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Dir(testutil.Binary(t, "ocsf-collector"))
	for _, b := range []string{"policy-sync", "sandbox-supervisor", "egress-proxy"} {
		testutil.Binary(t, b)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := filepath.Join(t.TempDir(), "palisade-hub")
	wd := t.TempDir()
	os.Chown(wd, 10001, 10001)
	script := testutil.DocShBlocks(t, "docs/hub-api.md", "Try the fleet flow locally")[0]
	for _, r := range [][2]string{{"/tmp/palisade-hub", dir}, {"127.0.0.1:8088", addr}, {"/var/tmp/palisade-work", wd}, {"./bin/", binDir + "/"}} {
		if !strings.Contains(script, r[0]) {
			t.Fatalf("the documented flow no longer mentions %s:\n%s", r[0], script)
		}
		script = strings.ReplaceAll(script, r[0], r[1])
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = root
	// Its own process group: a hub the script started and did not get to
	// kill (a failed step) goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Start()
	if err == nil {
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		err = cmd.Wait()
	}
	if err != nil || out.String() != "hello from the sandbox\n" {
		t.Fatalf("flow: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}

	want, err := policy.LoadFile(filepath.Join(root, "policies", "examples", "npm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	journal, err := os.ReadFile(filepath.Join(dir, "hub.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var gotPolicy, converged bool
	reasons := map[string]bool{}
	for i, line := range strings.Split(strings.TrimSpace(string(journal)), "\n") {
		if i == 0 {
			if line != fmt.Sprintf(`{"url":"http://%s"}`, addr) {
				t.Errorf("first line %q", line)
			}
			continue
		}
		var e hubtest.JournalEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Agent != "worker-1" || e.Status != 200 {
			t.Errorf("journal line %q (%v)", line, err)
			continue
		}
		switch e.Route {
		case hubtest.RoutePolicy:
			gotPolicy = e.Version == 1
		case hubtest.RouteConvergence:
			converged = e.Convergence.Converged && e.Convergence.InstalledChecksum == want.Checksum() && e.Convergence.Source == hub.SourceHub
		case hubtest.RouteActionEvents:
			for _, r := range e.Stored {
				reasons[r.Reason] = true
			}
		}
	}
	if !gotPolicy || !converged {
		t.Errorf("policy handed out %v, convergence reported %v:\n%s", gotPolicy, converged, journal)
	}
	var launched, exited, loaded bool
	for r := range reasons {
		launched = launched || strings.HasPrefix(r, "launched sh")
		exited = exited || strings.Contains(r, "exited with status 0")
		loaded = loaded || strings.Contains(r, "loaded (sha256 "+want.Checksum()[:12]+")")
	}
	if !launched || !exited || !loaded {
		t.Errorf("stored events lack the launch, exit or the assigned policy's load: %v", reasons)
	}
}
