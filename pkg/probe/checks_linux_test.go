//go:build linux

package probe

import (
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Every check of the catalogue has an implementation on Linux.
func TestEveryCheckImplemented(t *testing.T) {
	for _, s := range Catalog() {
		if checks[s.Name] == nil {
			t.Errorf("check %s has no implementation", s.Name)
		}
	}
}

// As root (never a sandbox's command) Run attempts nothing and fails
// every check.
func TestRunAsRootAttemptsNothing(t *testing.T) {
	testutil.RequireRoot(t)
	rs := Run(DefaultTargets())
	if len(rs) != len(Catalog()) {
		t.Fatalf("%d results for %d checks", len(rs), len(Catalog()))
	}
	for _, r := range rs {
		if r.OK {
			t.Errorf("%s passed as root", r.Check)
		}
	}
}

// Outside any sandbox these checks fail: they measure the sandbox, not
// something that holds everywhere. (Only checks that cannot touch the host
// are run here; the full set runs in sandboxes in
// cmd/sandbox-supervisor and cmd/confinement-probe.)
func TestChecksFailUnconfined(t *testing.T) {
	for _, name := range []string{"seccomp_filter_mode", "process_vm_readv_denied", "no_new_privs", "clone3_enosys", "keyctl_denied", "tiocsti_high_bits_denied"} {
		if obs, ok := checks[name](DefaultTargets()); ok {
			t.Errorf("%s passed in the unconfined test process: %s", name, obs)
		}
	}
}
