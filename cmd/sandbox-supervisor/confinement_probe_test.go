package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/feature"
	confprobe "github.com/palisade-sandbox/palisade/pkg/probe"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
	"github.com/palisade-sandbox/palisade/policies"
)

// confinementProbeIn runs confinement-probe --inside in a sandbox made by
// this supervisor (in-process, so the preflight seam applies) and returns
// the verdict over what it reported.
func confinementProbeIn(t *testing.T, extra ...string) confprobe.Verdict {
	t.Helper()
	wd, state := sandboxDirs(t)
	bin := filepath.Join(wd, "confinement-probe")
	data, err := os.ReadFile(testutil.Binary(t, "confinement-probe"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// The bundled default, made best_effort: seccomp is degradable only
	// outside hard_requirement.
	pol := filepath.Join(t.TempDir(), "best-effort.yaml")
	text := strings.Replace(string(policies.DefaultPolicy), "compatibility: hard_requirement", "compatibility: best_effort", 1)
	if err := os.WriteFile(pol, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--policy", pol, "--state-dir", state, "--workdir", wd}, extra...)
	args = append(args, "--", bin, "--inside")
	out, errs, err := runCLI(t, args...)
	results, perr := confprobe.ParseResults(bytes.NewReader([]byte(out)))
	if perr != nil {
		t.Fatal(perr)
	}
	v := confprobe.Evaluate(confprobe.Catalog(), results, "")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; last != v.Result {
		t.Errorf("in-sandbox verdict line %q, launcher verdict %q", last, v.Result)
	}
	if (cli.Code(err) == 0) != v.OK {
		t.Errorf("exit %d (%v) but verdict ok=%v\n%s", cli.Code(err), err, v.OK, errs)
	}
	return v
}

// The acceptance for confinement-probe against a deliberately weakened
// sandbox: seccomp made unavailable through the preflight seam and the
// run allowed to degrade. The probe must fail, naming the seccomp checks;
// the same sandbox without the seam passes, so the failure is the
// missing filter and nothing else.
func TestConfinementProbeFailsWithoutSeccomp(t *testing.T) {
	testutil.RequireRoot(t)
	for _, f := range []string{"landlock", "seccomp", "ns:net"} {
		testutil.RequireFeature(t, f)
	}
	if v := confinementProbeIn(t); !v.OK {
		t.Fatalf("full sandbox: %s, failed %v", v.Result, v.Failed)
	}
	probe = func(n string) error {
		if n == "seccomp" {
			return &feature.MissingError{Feature: n, MinKernel: "3.17", Reason: "simulated"}
		}
		return feature.Check(n)
	}
	defer func() { probe = nil }()
	v := confinementProbeIn(t, "--allow-degraded")
	if v.OK || v.Result != confprobe.FailedLine {
		t.Fatalf("weakened sandbox: %s", v.Result)
	}
	for _, name := range []string{"seccomp_filter_mode", "process_vm_readv_denied", "keyctl_denied", "io_uring_denied", "unshare_user", "clone3_enosys", "mptcp", "af_alg"} {
		if !slices.Contains(v.Failed, name) {
			t.Errorf("weakened sandbox: check %s passed, want it failed (failed: %v)", name, v.Failed)
		}
	}
	hasForeign := slices.ContainsFunc(confprobe.Catalog(), func(s confprobe.Spec) bool { return s.Name == "foreign_arch_killed" })
	if hasForeign && !slices.Contains(v.Failed, "foreign_arch_killed") {
		t.Errorf("weakened sandbox: foreign_arch_killed passed (failed: %v)", v.Failed)
	}
	// Layers that do not depend on seccomp still hold.
	for _, name := range []string{"write_outside_allowlist", "read_protected_path", "capabilities_empty", "no_new_privs", "uid_not_root", "af_packet"} {
		if slices.Contains(v.Failed, name) {
			t.Errorf("weakened sandbox: %s failed, but only seccomp is missing", name)
		}
	}
	for _, r := range v.Checks {
		if !r.OK {
			t.Logf("failed: %s (%s): %s", r.Check, r.Group, r.Observed)
		}
	}
}
