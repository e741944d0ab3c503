//go:build linux

package sandboxnet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The identity acceptance (issue 23), each from inside a real sandbox
// attacking as the agent would: uid 10001, the lab's policy plus an
// endpoint allowed.test:80 for one allowed helper binary only, eBPF
// attribution, and the fake internet's HTTP server recording every
// request that reaches it.

// identityNetwork is the extra entry: allowed.test:80 for the allowed
// helper (a copy of this test binary outside every writable path).
const identityNetwork = `  helper:
    endpoints:
      - host: allowed.test
        port: 80
    binaries:
      - path: %s
`

// identityLab is the lab with two copies of this test binary: allowed
// (outside the writable paths, listed in the policy) and unlisted (in
// the workdir, which the sandbox can write).
type identityLab struct {
	*lab
	allowed, unlisted string
}

func newIdentityLab(t *testing.T) *identityLab {
	t.Helper()
	l := &identityLab{lab: newLab(t, "")}
	d, err := os.MkdirTemp("/var/tmp", "palisade-ident-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	l.allowed = filepath.Join(d, "agent-helper")
	l.unlisted = filepath.Join(l.wd, "agent-helper")
	for _, p := range []string{l.allowed, l.unlisted} {
		if err := os.WriteFile(p, self, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chown(l.unlisted, 10001, 10001)
	head := labPolicy[:strings.Index(labPolicy, "%s")]
	head = strings.Replace(head, "/etc]", "/etc, "+d+"]", 1)
	l.write(head + fmt.Sprintf(identityNetwork, l.allowed))
	return l
}

// run runs script in the sandbox and returns its name=value results.
func (l *identityLab) run(script string) map[string]string {
	l.t.Helper()
	out, err := l.command(script).Output()
	if err != nil {
		l.t.Fatalf("sandbox: %v\n%s", err, out)
	}
	r := results(out)
	l.t.Logf("results: %v", r)
	return r
}

// noHit fails when any request for one of paths reached the internet.
func (l *identityLab) noHit(paths ...string) {
	l.t.Helper()
	for _, h := range l.inet.Hits() {
		for _, p := range paths {
			if h.Path == "/"+p {
				l.t.Errorf("the upstream received %s: %+v", p, h)
			}
		}
	}
}

// denied checks that result (a helper's "<status>|<body>") is a 403 with
// reason.
func denied(t *testing.T, what, result, reason string) {
	t.Helper()
	status, body, _ := strings.Cut(result, "|")
	if !strings.Contains(status, " 403 ") {
		t.Errorf("%s: %q, want 403 %s", what, result, reason)
		return
	}
	if d := denial(t, body); d["reason"] != reason {
		t.Errorf("%s: denial %v, want reason %s", what, d, reason)
	}
}

// A socket connected by an unlisted program and handed to the allowed
// one (SCM_RIGHTS) is refused because of its connector; after a flood
// that evicts its connect record from the kernel map it is still
// refused (attribution_incomplete), never decided on its holder alone,
// and nothing reaches the upstream. The event names the holder.
func TestIdentityRecordEvictionNeverWidens(t *testing.T) {
	l := newIdentityLab(t)
	script := fmt.Sprintf(`
%[1]s identity-helper recv /tmp/a.sock recorded & %[2]s identity-helper handoff /tmp/a.sock 0; wait
%[1]s identity-helper recv /tmp/b.sock flooded & %[2]s identity-helper handoff /tmp/b.sock 131072; wait
`, l.allowed, l.unlisted)
	r := l.run(script)
	denied(t, "hand-off with its record", r["recorded"], "connector_not_allowed")
	denied(t, "hand-off after the flood", r["flooded"], "attribution_incomplete")
	l.noHit("recorded", "flooded")
	var named bool
	for _, e := range l.eventLines() {
		um, _ := e["unmapped"].(map[string]any)
		ep, _ := um["egress_proxy"].(map[string]any)
		a, _ := e["actor"].(map[string]any)
		pr, _ := a["process"].(map[string]any)
		f, _ := pr["file"].(map[string]any)
		if ep["reason"] == "attribution_incomplete" && f["path"] == l.allowed {
			named = true
		}
	}
	if !named {
		t.Errorf("no attribution_incomplete event naming the holder %s", l.allowed)
	}
}
