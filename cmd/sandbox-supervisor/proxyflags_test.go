package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// --dns-ttl and --proxy-procs are checked against egress-proxy's own
// bounds when the flags are parsed: a bad value is a usage error naming
// the flag, before any state, cgroup or init exists (the state root is
// never created).
func TestProxyFlagBounds(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dns-ttl", "0s"}, "--dns-ttl 0s: want 1s to 30s"},
		{[]string{"--dns-ttl", "999ms"}, "--dns-ttl 999ms: want 1s to 30s"},
		{[]string{"--dns-ttl", "31s"}, "--dns-ttl 31s: want 1s to 30s"},
		{[]string{"--dns-ttl", "-5s"}, "--dns-ttl -5s: want 1s to 30s"},
		{[]string{"--proxy-procs", "-1"}, "--proxy-procs -1: want 0 (all CPUs) or more"},
	} {
		for _, sub := range []string{"run", "spec"} {
			st := filepath.Join(t.TempDir(), "state")
			args := append(append([]string{sub, "--state-dir", st}, c.args...), "--", "/bin/true")
			err := run(context.Background(), args, strings.NewReader(""), io.Discard, io.Discard)
			if cli.Code(err) != cli.ExitUsage || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v: exit %d (%v), want 2 with %q", args, cli.Code(err), err, c.want)
			}
			if _, err := os.Stat(st); !os.IsNotExist(err) {
				t.Errorf("%v: the state root exists after the usage error (%v)", args, err)
			}
		}
	}
}

// Given, the flags become the proxy's --dns-ttl and --procs (0, all
// CPUs, included); not given, the proxy keeps its defaults.
func TestProxyConfigFromFlags(t *testing.T) {
	for _, c := range []struct {
		args      []string
		wantTTL   time.Duration
		wantProcs int // -1: not passed
	}{
		{nil, 0, -1},
		{[]string{"--dns-ttl", "1s"}, time.Second, -1},
		{[]string{"--dns-ttl", "30s", "--proxy-procs", "0"}, 30 * time.Second, 0},
		{[]string{"--proxy-procs", "3"}, 0, 3},
	} {
		f, _, err := parseRunFlags(append(c.args, "--", "/bin/true"), io.Discard, false)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		cfg := proxyConfig(f)
		procs := -1
		if cfg.Procs != nil {
			procs = *cfg.Procs
		}
		if cfg.DNSTTL != c.wantTTL || procs != c.wantProcs {
			t.Errorf("%v: proxy gets --dns-ttl %v, --procs %d; want %v, %d", c.args, cfg.DNSTTL, procs, c.wantTTL, c.wantProcs)
		}
	}
}

// With a policy that allows no egress no proxy runs: the proxy's flags
// are ignored with one warning naming each, and the command runs.
func TestProxyFlagsIgnoredWithoutEgress(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	noEgress := strings.Split(egressBase, "network_policies:")[0] + "network_policies: {}\n"
	if err := os.WriteFile(pol, []byte(noEgress), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--policy", pol, "--state-dir", st, "--workdir", wd,
		"--dns-ttl", "7s", "--proxy-procs", "2", "--", "/bin/sh", "-c", "echo ran")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ran") {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--dns-ttl, --proxy-procs ignored: the policy allows no egress") {
		t.Errorf("no warning naming the ignored flags:\n%s", out)
	}
}
