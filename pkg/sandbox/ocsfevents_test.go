package sandbox

import (
	"bytes"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
)

// Every lifecycle event, including the ones a run only sometimes emits,
// marshals and validates against OCSF 1.8.0.
func TestOCSFEventsValidate(t *testing.T) {
	var buf bytes.Buffer
	e := NewOCSFEvents(ocsf.NewWriter(&buf), "agent_7", "test", []string{"/bin/sh", "-c", "curl -H 'Authorization: Bearer s3cr3t'"})
	e.Failed("preflight", "landlock missing", ExitSandboxFailed)
	e.Created("sbx-0123456789ab", "task")
	e.PolicyLoaded(PolicyInfo{SHA256: strings.Repeat("a", 64), Source: "flag", Path: "/etc/mac/p.yaml", HardRequirement: true})
	e.Degraded("seccomp", "simulated", "--allow-degraded")
	e.Confined(Confinement{Seccomp: true, SeccompRules: 63, Namespaces: []string{"mount", "pid"}, UID: 10001, GID: 10001}, "sbx-0123456789ab")
	e.Launched(7, []string{"/bin/sh"}, 10001, 10001)
	e.Exited(7, 0, 9)
	e.Incident("Egress Proxy Down", "egress proxy died", "exit status 2")
	if e.Lost != 0 {
		t.Fatalf("%d events refused", e.Lost)
	}
	if n := ocsftest.ValidateLines(t, buf.Bytes()); n != 7 {
		t.Fatalf("%d events, want 7", n)
	}
	if strings.Contains(buf.String(), "s3cr3t") {
		t.Fatal("a command-line secret reached the events")
	}
	if !strings.Contains(buf.String(), `"exit_code":137`) {
		t.Fatal("signal death not reported as 128+9")
	}
}

// Issue 16 item 5: a launch that failed before the command existed is
// recorded under the real caller ($SUDO_UID under sudo), not uid 0.
func TestFailedLaunchRecordsTheCaller(t *testing.T) {
	t.Setenv("SUDO_UID", "4242")
	var buf bytes.Buffer
	e := NewOCSFEvents(ocsf.NewWriter(&buf), "", "test", []string{"/bin/true"})
	e.Failed("workdir", "cannot enter", ExitSandboxFailed)
	if !strings.Contains(buf.String(), `"user":{"uid":"4242"}`) {
		t.Fatalf("failed launch event does not name the caller 4242:\n%s", buf.String())
	}
}
