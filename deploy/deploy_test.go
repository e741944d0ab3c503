package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/probe"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// binaries are the cmd/ binaries, built (or taken from PALISADE_BIN_DIR)
// into one directory; it is returned.
func binaries(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(moduleRoot(t), "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	dir := ""
	for _, e := range ents {
		p := testutil.Binary(t, e.Name())
		if dir == "" {
			dir = filepath.Dir(p)
		} else if filepath.Dir(p) != dir {
			t.Fatalf("%s is not beside the other binaries in %s", p, dir)
		}
	}
	return dir
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// unitsRoot is a root for systemd-analyze: systemd's own units, the
// binaries installed as make install would, /bin/kill, and our units.
func unitsRoot(t *testing.T) (string, []string) {
	t.Helper()
	root := t.TempDir()
	sysUnits := ""
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(d, "sysinit.target")); err == nil {
			sysUnits = d
			break
		}
	}
	if sysUnits == "" {
		t.Fatal("systemd's unit directory (sysinit.target) not found; .ci/run installs systemd")
	}
	filepath.WalkDir(sysUnits, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(sysUnits, p)
		dst := filepath.Join(root, "usr/lib/systemd/system", rel)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if d.Type()&fs.ModeSymlink != 0 {
			if target, err := os.Readlink(p); err == nil {
				os.Symlink(target, dst)
			}
			return nil
		}
		if b, err := os.ReadFile(p); err == nil {
			os.WriteFile(dst, b, 0o644)
		}
		return nil
	})
	bins := binaries(t)
	ents, _ := os.ReadDir(bins)
	for _, e := range ents {
		copyFile(t, filepath.Join(bins, e.Name()), filepath.Join(root, "usr/local/bin", e.Name()), 0o755)
	}
	kill, err := exec.LookPath("kill")
	if err != nil {
		t.Fatal("kill not found (egress-proxy@.service reloads with /bin/kill)")
	}
	copyFile(t, kill, filepath.Join(root, "bin/kill"), 0o755)
	units, err := filepath.Glob(filepath.Join(moduleRoot(t), "deploy/systemd/*"))
	if err != nil || len(units) == 0 {
		t.Fatalf("no units: %v", err)
	}
	var names []string
	for _, u := range units {
		copyFile(t, u, filepath.Join(root, "etc/systemd/system", filepath.Base(u)), 0o644)
		names = append(names, filepath.Base(u))
	}
	return root, names
}

// Every unit passes systemd-analyze verify with the binaries installed:
// no error and no warning (an unknown directive is only a warning, so any
// output fails the test).
func TestUnitsVerify(t *testing.T) {
	analyzer := testutil.RequireCommand(t, "systemd-analyze")
	root, names := unitsRoot(t)
	for _, name := range names {
		unit := name
		if strings.Contains(unit, "@.") {
			unit = strings.Replace(unit, "@.", "@test1.", 1) // an instance of the template
		}
		cmd := exec.Command(analyzer, "verify", "--root="+root, unit)
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
		}
	}
	// The check can fail: a unit whose binary is missing does not pass.
	os.Remove(filepath.Join(root, "usr/local/bin/ocsf-collector"))
	if out, err := exec.Command(analyzer, "verify", "--root="+root, "ocsf-collector.service").CombinedOutput(); err == nil {
		t.Errorf("verify passed without the binary: %s", out)
	}
}

// A unit per long-running binary and job, and every agent unit requires
// the probe.
func TestUnitSet(t *testing.T) {
	dir := filepath.Join(moduleRoot(t), "deploy/systemd")
	for _, name := range []string{
		"sandbox-supervisor@.service", "egress-proxy@.service", "ocsf-collector.service",
		"policy-sync.service", "policy-sync.timer", "policy-sync-once.service",
		"sandbox-supervisor-gc.service", "sandbox-supervisor-gc.timer", "confinement-probe.service",
	} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("unit %s: %v", name, err)
		}
	}
	sup, _ := os.ReadFile(filepath.Join(dir, "sandbox-supervisor@.service"))
	for _, want := range []string{"Requires=confinement-probe.service", "After=confinement-probe.service", "Alias=palisade-agent@.service"} {
		if !bytes.Contains(sup, []byte(want)) {
			t.Errorf("sandbox-supervisor@.service lacks %s", want)
		}
	}
	// Filters systemd would stack onto the sandbox's command break it
	// (the init sets the hostname; the fence writes sysctls).
	for _, bad := range []string{"ProtectHostname=", "ProtectKernelTunables=", "ProtectControlGroups=", "RestrictNamespaces=", "SystemCallFilter=", "MemoryDenyWriteExecute=", "PrivateTmp="} {
		for _, u := range []string{"sandbox-supervisor@.service", "confinement-probe.service"} {
			b, _ := os.ReadFile(filepath.Join(dir, u))
			if bytes.Contains(b, []byte("\n"+bad)) {
				t.Errorf("%s sets %s, which breaks sandbox creation", u, bad)
			}
		}
	}
}

type bootstrapRun struct {
	out  string
	code int
}

func bootstrap(t *testing.T, root string, args ...string) bootstrapRun {
	t.Helper()
	cmd := exec.Command(filepath.Join(moduleRoot(t), "deploy/bootstrap.sh"), args...)
	cmd.Env = append(os.Environ(), "DESTDIR="+root)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return bootstrapRun{string(out), code}
}

// tree lists every path under root with its content (files) or target
// (links), to compare roots before and after.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			m[rel] = "-> " + target
		case d.IsDir():
			m[rel] = "dir"
		default:
			b, _ := os.ReadFile(p)
			fi, _ := d.Info()
			m[rel] = fi.Mode().String() + " " + string(b)
		}
		return nil
	})
	return m
}

func TestBootstrapUsage(t *testing.T) {
	if r := bootstrap(t, t.TempDir(), "--frobnicate"); r.code != 2 {
		t.Errorf("unknown flag: exit %d\n%s", r.code, r.out)
	}
	if r := bootstrap(t, t.TempDir(), "--help"); r.code != 0 || !strings.Contains(r.out, "Examples:") {
		t.Errorf("--help: exit %d\n%s", r.code, r.out)
	}
}

// --dry-run prints every step and changes nothing.
func TestBootstrapDryRun(t *testing.T) {
	testutil.RequireRoot(t)
	bins := binaries(t)
	root := t.TempDir()
	r := bootstrap(t, root, "--dry-run", "--enable", "--fail-closed", "--bin-dir", bins)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.out)
	}
	for _, want := range []string{"1/7 preflight", "2/7 install", "3/7 sandbox user", "4/7", "5/7 systemd units", "6/7 confinement-probe",
		"7/7 enable", "would run: install -D -m 0755", "would run: systemctl --root=" + root + " enable confinement-probe.service",
		"MAC_OPENSHELL_REQUIRED=1", "confinement-probe --log"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("dry run output lacks %q", want)
		}
	}
	if got := tree(t, root); len(got) != 0 {
		t.Errorf("dry run changed the root: %v", got)
	}
}

func requireSandbox(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	for _, f := range []string{"landlock", "seccomp", "nftables", "ns:net"} {
		testutil.RequireFeature(t, f)
	}
	testutil.RequireCommand(t, "systemctl")
}

func lastLine(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

const probeLog = "root/.mac/openshell/live-confinement-probe.log"

// In a DESTDIR root: everything installed, the probe passes, units are
// enabled; a second run changes nothing; --rollback restores what was
// there before (an old palisade-agent@ unit, an old binary, an operator's
// env file) and removes the rest.
func TestBootstrapDestdirAndRollback(t *testing.T) {
	requireSandbox(t)
	bins := binaries(t)
	root := t.TempDir()
	old := map[string]string{
		"etc/systemd/system/palisade-agent@.service": "[Service]\nExecStart=/bin/true\n",
		"usr/local/bin/image-pin":                    "#!/bin/sh\necho old\n",
		"etc/palisade/palisade.env":                  "MAC_HUB_URL=https://hub.example.internal\nMAC_AGENT_ID=w1\nMAC_OPENSHELL_GC=0\n",
		"etc/passwd":                                 "root:x:0:0:root:/root:/bin/bash\n",
		"etc/group":                                  "root:x:0:\n",
	}
	for p, content := range old {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before := tree(t, root)

	r := bootstrap(t, root, "--enable", "--fail-closed", "--bin-dir", bins)
	if r.code != 0 {
		t.Fatalf("bootstrap: exit %d\n%s", r.code, r.out)
	}
	if got := lastLine(t, filepath.Join(root, probeLog)); got != probe.OKLine {
		t.Fatalf("probe log ends %q", got)
	}
	for _, p := range []string{"usr/local/bin/sandbox-supervisor", "usr/local/bin/confinement-probe", "usr/local/bin/egress-proxy",
		"etc/systemd/system/sandbox-supervisor@.service", "etc/systemd/system/confinement-probe.service",
		"usr/local/share/doc/palisade/confinement-probe.md"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/systemd/system/palisade-agent@.service")); err == nil {
		t.Error("the old palisade-agent@.service is still a regular file")
	}
	env, _ := os.ReadFile(filepath.Join(root, "etc/palisade/palisade.env"))
	for _, want := range []string{"MAC_HUB_URL=https://hub.example.internal", "MAC_OPENSHELL_GC=1", "MAC_OPENSHELL_REQUIRED=1", "MAC_OPENSHELL_EVENTS_FILE="} {
		if !bytes.Contains(env, []byte(want)) {
			t.Errorf("palisade.env lacks %s:\n%s", want, env)
		}
	}
	if fi, _ := os.Stat(filepath.Join(root, "etc/palisade/palisade.env")); fi.Mode().Perm() != 0o600 {
		t.Errorf("palisade.env mode %v", fi.Mode().Perm())
	}
	pw, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	gr, _ := os.ReadFile(filepath.Join(root, "etc/group"))
	if !bytes.Contains(pw, []byte("\nsandbox:x:10001:10001:")) || !bytes.Contains(gr, []byte("\nsandbox:x:10001:")) {
		t.Errorf("sandbox user/group missing:\n%s\n%s", pw, gr)
	}
	for _, link := range []string{"multi-user.target.wants/confinement-probe.service", "timers.target.wants/sandbox-supervisor-gc.timer",
		"multi-user.target.wants/ocsf-collector.service", "multi-user.target.wants/policy-sync.service"} {
		if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system", link)); err != nil {
			t.Errorf("not enabled: %v", err)
		}
	}

	// Idempotent: a second run replaces and enables nothing.
	after := tree(t, root)
	r = bootstrap(t, root, "--enable", "--fail-closed", "--bin-dir", bins)
	if r.code != 0 || strings.Contains(r.out, "bootstrap: replace ") || strings.Contains(r.out, "bootstrap: create ") || strings.Contains(r.out, "Created symlink") {
		t.Fatalf("second run: exit %d\n%s", r.code, r.out)
	}
	again := tree(t, root)
	for p, v := range after {
		if strings.HasPrefix(p, "root/.mac/openshell") {
			continue // the probe log grows by one run
		}
		if again[p] != v {
			t.Errorf("second run changed %s", p)
		}
	}
	backups, _ := filepath.Glob(filepath.Join(root, "var/backups/palisade/bootstrap-*"))
	if len(backups) != 1 {
		t.Fatalf("backups %v, want exactly the first run's", backups)
	}

	r = bootstrap(t, root, "--rollback")
	if r.code != 0 {
		t.Fatalf("rollback: exit %d\n%s", r.code, r.out)
	}
	restored := tree(t, root)
	for p, v := range before {
		if restored[p] != v {
			t.Errorf("rollback: %s is %.60q, want %.60q", p, restored[p], v)
		}
	}
	for p, v := range restored {
		if _, ok := before[p]; ok || v == "dir" || strings.HasPrefix(p, "var/backups/") || strings.HasPrefix(p, "root/.mac/openshell") {
			continue
		}
		t.Errorf("rollback left %s (%.40q)", p, v)
	}
}

// A probe that fails (a policy under which the probe cannot even run in
// the sandbox) stops bootstrap before anything is enabled.
func TestBootstrapRefusesOnFailingProbe(t *testing.T) {
	requireSandbox(t)
	bins := binaries(t)
	root := t.TempDir()
	pol := filepath.Join(root, "root/.mac/openshell-policy.yaml")
	os.MkdirAll(filepath.Dir(pol), 0o700)
	os.WriteFile(pol, []byte("version: 1\nfilesystem_policy:\n  include_workdir: false\n  read_only: [/etc]\n  read_write: [/tmp]\nlandlock:\n  compatibility: hard_requirement\nprocess:\n  run_as_user: sandbox\n  run_as_group: sandbox\nnetwork_policies: {}\n"), 0o600)
	r := bootstrap(t, root, "--enable", "--fail-closed", "--bin-dir", bins)
	if r.code != 1 || !strings.Contains(r.out, "nothing enabled") {
		t.Fatalf("exit %d\n%s", r.code, r.out)
	}
	if got := lastLine(t, filepath.Join(root, probeLog)); got != probe.FailedLine {
		t.Errorf("probe log ends %q", got)
	}
	for _, d := range []string{"multi-user.target.wants", "timers.target.wants"} {
		if ents, err := os.ReadDir(filepath.Join(root, "etc/systemd/system", d)); err == nil && len(ents) > 0 {
			t.Errorf("enabled despite the failed probe: %s %v", d, ents)
		}
	}
}
