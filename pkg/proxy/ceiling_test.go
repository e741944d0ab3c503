package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// admitWithin vets policies against c as egress-proxy's --ceiling does.
func admitWithin(t *testing.T, c string) envOpt {
	cp, err := policy.Parse([]byte(c))
	if err != nil {
		t.Fatal(err)
	}
	return func(cfg *Config) {
		cfg.Admit = func(p *policy.Policy) error {
			if xs := ceiling.Contains(cp, p, ceiling.Options{}); len(xs) > 0 {
				return &ceiling.Error{Ceiling: "test-ceiling.yaml", Excesses: xs}
			}
			return nil
		}
	}
}

// A reload beyond the ceiling is refused like an invalid one: the
// generation in force stays, and the rejection event names the excess.
// A reload within it goes through.
func TestReloadRefusedBeyondCeiling(t *testing.T) {
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""), admitWithin(t, policyYAML(echo.port, "")))
	g1 := env.p.Current()
	env.writePolicy(policyYAML(echo.port, "      - path: /usr/bin/wget\n"))
	_, err := env.p.Reload("test")
	want := "policy exceeds the ceiling test-ceiling.yaml: network_policies.web.binaries[1]: binary /usr/bin/wget may not reach *.wild.test on port " + fmt.Sprint(echo.port) + " within the ceiling"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("reload beyond the ceiling: %v", err)
	}
	if env.p.Current() != g1 {
		t.Fatal("the generation in force changed")
	}
	cfg := configEvents(env)
	last := cfg[len(cfg)-1]
	if get(last, "status") != "Failure" || !strings.Contains(get(last, "status_detail").(string), want) {
		t.Errorf("rejection event: %v", last)
	}
	env.writePolicy(tightPolicy(echo.port))
	if _, err := env.p.Reload("test"); err == nil {
		t.Fatal("a policy naming another host was admitted")
	}
	// Narrower: admitted.
	env.writePolicy(strings.Replace(policyYAML(echo.port, ""), "      - host: internal.test\n        port: "+fmt.Sprint(echo.port)+"\n", "", 1))
	if res, err := env.p.Reload("test"); err != nil || !res.Changed {
		t.Fatalf("a narrower policy: %+v %v", res, err)
	}
	if got := get(configEvents(env)[len(configEvents(env))-1], "activity_name"); got != ocsf.ActivityPolicyReload {
		t.Errorf("last config event %v", got)
	}
}

// A proxy whose starting policy exceeds the ceiling does not start.
func TestStartRefusedBeyondCeiling(t *testing.T) {
	env := newEnv(t, policyYAML(80, ""))
	cfg := env.cfg
	admitWithin(t, tightPolicy(80))(&cfg)
	if p, err := New(cfg); err == nil || !strings.Contains(err.Error(), "policy exceeds the ceiling test-ceiling.yaml") {
		if p != nil {
			p.Close()
		}
		t.Fatalf("started beyond the ceiling: %v", err)
	}
}
