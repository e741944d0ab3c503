package proxy

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// tightPolicy allows nothing on port but keeps a valid structure.
func tightPolicy(port int) string {
	return fmt.Sprintf(`version: 1
network_policies:
  web:
    name: web
    endpoints:
      - host: only.other.test
        port: %d
    binaries:
      - path: /usr/bin/curl
`, port)
}

func configEvents(env *testEnv) []map[string]any {
	return env.rec.ByClass(ocsf.ClassDeviceConfigStateChange)
}

func TestReloadTightensNewConnectionsButOpenTunnelKeepsWorking(t *testing.T) {
	checkSocketLeaks(t)
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""))
	target := fmt.Sprintf("allowed.test:%d", echo.port)
	c, resp, br := env.connect(target)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	g1 := env.p.Current()

	env.writePolicy(tightPolicy(echo.port))
	res, err := env.p.Reload("test")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || res.Generation != g1.Number+1 || env.p.Current().Number != res.Generation {
		t.Fatalf("reload result %+v (was generation %d)", res, g1.Number)
	}
	// New connections are decided by the new generation...
	c2, resp, _ := env.connect(target)
	if resp.StatusCode != 403 {
		t.Fatalf("after tightening: %d, want 403", resp.StatusCode)
	}
	c2.Close()
	// ...while the tunnel opened under generation 1 still relays.
	fmt.Fprintf(c, "still here\n")
	if l, err := br.ReadString('\n'); err != nil || l != "still here\n" {
		t.Fatalf("open tunnel after reload: %q %v", l, err)
	}
	c.Close()
	evs := env.waitEvents(ocsf.ClassNetworkActivity, 2)
	gens := map[string]float64{}
	for _, ev := range evs {
		gens[get(ev, "status_code").(string)] = get(ev, "unmapped", "egress_proxy", "generation").(float64)
	}
	if gens[OutcomeAllowed] != float64(g1.Number) || gens[OutcomePolicyDenied] != float64(res.Generation) {
		t.Errorf("generations in events: %v", gens)
	}
	cfg := configEvents(env)
	if len(cfg) != 2 || get(cfg[0], "activity_name") != ocsf.ActivityPolicyLoad || get(cfg[1], "activity_name") != ocsf.ActivityPolicyReload ||
		get(cfg[1], "status") != "Success" || get(cfg[1], "policy", "uid") != "sha256:"+res.SHA256 {
		t.Fatalf("config events: %v", cfg)
	}
	if c := env.p.Counters(); c.ReloadsOK != 1 || c.ReloadsRejected != 0 {
		t.Errorf("reload counters %+v", c)
	}
}

func TestInvalidReloadKeepsLastKnownGood(t *testing.T) {
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""))
	g1 := env.p.Current()
	for name, bad := range map[string]string{
		"yaml syntax":   "version: 1\nnetwork_policies: [\n",
		"unknown field": policyYAML(echo.port, "") + "surprise: true\n",
		"validation":    strings.Replace(policyYAML(echo.port, ""), "/usr/bin/curl", "relative/curl", 1),
	} {
		env.writePolicy(bad)
		res, err := env.p.Reload("test")
		if err == nil {
			t.Fatalf("%s: reload accepted", name)
		}
		if res.Generation != g1.Number || env.p.Current() != g1 {
			t.Fatalf("%s: generation changed to %d", name, env.p.Current().Number)
		}
	}
	// Still serving with the last-known-good.
	c, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	if resp.StatusCode != 200 {
		t.Fatalf("after rejected reloads: %d", resp.StatusCode)
	}
	c.Close()
	cfg := configEvents(env)
	if len(cfg) != 4 {
		t.Fatalf("config events %d, want load + 3 rejections", len(cfg))
	}
	for _, ev := range cfg[1:] {
		if get(ev, "status") != "Failure" || get(ev, "status_detail") == "" || get(ev, "policy", "uid") != "sha256:"+g1.SHA256 ||
			get(ev, "unmapped", "rejected_policy_sha256") == nil {
			t.Errorf("rejection event: %v", ev)
		}
	}
	st := env.p.Status()
	if st.LastReloadError == "" || st.Counters.ReloadsRejected != 3 {
		t.Errorf("status after rejections: %+v", st)
	}
	// A missing file is rejected the same way.
	os.Remove(env.policyPath)
	if _, err := env.p.Reload("test"); err == nil || env.p.Current() != g1 {
		t.Fatalf("missing file: %v", err)
	}
}

func TestReloadUnchangedAndStaticChanges(t *testing.T) {
	env := newEnv(t, policyYAML(9, ""))
	g1 := env.p.Current()
	// Same meaning, different bytes: no new generation, no event.
	env.writePolicy("# a comment\n" + policyYAML(9, ""))
	res, err := env.p.Reload("test")
	if err != nil || res.Changed || env.p.Current() != g1 {
		t.Fatalf("unchanged policy: %+v %v", res, err)
	}
	if n := len(configEvents(env)); n != 1 {
		t.Fatalf("config events %d, want only the initial load", n)
	}
	// A static section changes: the network part still applies, the
	// static part is reported as ignored.
	env.writePolicy("filesystem_policy:\n  read_only: [/srv]\n" + tightPolicy(9))
	res, err = env.p.Reload("test")
	if err != nil || !res.Changed || !res.StaticIgnored {
		t.Fatalf("static change: %+v %v", res, err)
	}
	cfg := configEvents(env)
	last := cfg[len(cfg)-1]
	if d, _ := get(last, "status_detail").(string); !strings.Contains(d, "static sections") || get(last, "severity_id") != float64(ocsf.SeverityLow) {
		t.Errorf("static warning: %v", last)
	}
	if env.p.Current().StaticSHA256 == g1.StaticSHA256 {
		t.Errorf("static checksum did not change")
	}
	// Only the network part changes: no warning.
	env.writePolicy("filesystem_policy:\n  read_only: [/srv]\n" + policyYAML(9, ""))
	if res, err = env.p.Reload("test"); err != nil || !res.StaticIgnored {
		// still differs from the sandbox's original static sections
		t.Fatalf("%+v %v", res, err)
	}
	env.writePolicy(policyYAML(9, ""))
	if res, err = env.p.Reload("test"); err != nil || res.StaticIgnored {
		t.Fatalf("back to the original static sections: %+v %v", res, err)
	}
}

func TestStaticChecksumIgnoresNetworkPolicies(t *testing.T) {
	a, err := policy.Parse([]byte(policyYAML(1, "")))
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.Parse([]byte(tightPolicy(2)))
	if err != nil {
		t.Fatal(err)
	}
	if staticChecksum(a) != staticChecksum(b) || a.Checksum() == b.Checksum() {
		t.Fatalf("static %s vs %s", staticChecksum(a), staticChecksum(b))
	}
	c, _ := policy.Parse([]byte("process:\n  run_as_user: \"1234\"\n" + tightPolicy(2)))
	if staticChecksum(c) == staticChecksum(b) {
		t.Fatal("process change not seen")
	}
}

// watch runs the proxy's policy watch until the test ends.
func (e *testEnv) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Watch(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Watch: %v", err)
		}
	})
}

// A policy replaced after the proxy loaded it but before its watch was
// in place (the egress-proxy binary starts the watch beside serving, and
// reports ready meanwhile) is still picked up: no later write comes to
// make an event.
func TestWatchSeesAChangeMadeBeforeItStarted(t *testing.T) {
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""))
	g1 := env.p.Current().Number
	env.writePolicy(tightPolicy(echo.port))
	env.watch()
	waitFor(t, "reload of the policy written before the watch", func() bool { return env.p.Current().Number == g1+1 })
	if c := env.p.Counters(); c.ReloadsOK != 1 {
		t.Errorf("reloads ok %d, want 1", c.ReloadsOK)
	}
}

func TestWatchReloadsOnAtomicRenameAndInPlaceWrite(t *testing.T) {
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""))
	env.watch()
	// No wait for the watch to start: a write before it is seen too
	// (TestWatchSeesAChangeMadeBeforeItStarted).
	g1 := env.p.Current().Number

	// Write-then-rename (fsutil.WriteFileAtomic).
	env.writePolicy(tightPolicy(echo.port))
	waitFor(t, "reload after rename", func() bool { return env.p.Current().Number == g1+1 })

	// An unrelated file in the same directory changes nothing.
	os.WriteFile(env.dir+"/other.yaml", []byte("x"), 0o600)
	time.Sleep(300 * time.Millisecond)
	if n := env.p.Current().Number; n != g1+1 {
		t.Fatalf("unrelated file caused a reload: generation %d", n)
	}

	// An in-place rewrite (truncate + write + close).
	f, err := os.OpenFile(env.policyPath, os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, policyYAML(echo.port, ""))
	f.Close()
	waitFor(t, "reload after in-place write", func() bool { return env.p.Current().Number == g1+2 })

	// An invalid file keeps the generation and emits a rejection.
	env.writePolicy("not: [valid")
	waitFor(t, "rejection", func() bool { return env.p.Counters().ReloadsRejected == 1 })
	if n := env.p.Current().Number; n != g1+2 {
		t.Fatalf("invalid file changed the generation to %d", n)
	}
	// The burst of events one write makes yields one reload, not several.
	if c := env.p.Counters(); c.ReloadsOK != 2 {
		t.Errorf("reloads ok %d, want 2", c.ReloadsOK)
	}
}
