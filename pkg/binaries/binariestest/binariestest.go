// Package binariestest lays out, in a directory, one listed binary of
// each kind package binaries notes, with a policy listing them and the
// phrase each note must contain, for the tests of the three binaries
// that report them (policy-sync check, sandbox-supervisor run,
// egress-proxy).
package binariestest

import (
	"os"
	"path/filepath"
	"testing"
)

// Fixture is the layout: Entries is the network_policies part of a
// policy (YAML, indented two spaces) listing every path, and Want the
// phrase each note must contain, by kind.
type Fixture struct {
	Dir     string
	Entries string
	Want    map[string]string // kind -> phrase
}

// New creates the layout in dir: a "#!/bin/sh" script, a symlink to it,
// a symlink to /bin/true, a missing path (entry "tools"), and the shell
// the script runs, a general interpreter (entry "shell": listed with the
// script's entry it would cover the script's note). dir must be readable
// where the binaries that load the policy run, and not under a path the
// policy makes writable.
func New(t *testing.T, dir string) Fixture {
	t.Helper()
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	trueBin, err := filepath.EvalSymlinks("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	j := func(n string) string { return filepath.Join(dir, n) }
	if err := os.WriteFile(j("tool.sh"), []byte("#!/bin/sh\necho tool\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"tool": "tool.sh", "prog": trueBin} {
		if err := os.Symlink(target, j(link)); err != nil {
			t.Fatal(err)
		}
	}
	return Fixture{
		Dir: dir,
		Entries: `  tools:
    endpoints:
      - host: tools.test
        port: 443
    binaries:
      - path: ` + j("tool.sh") + `
      - path: ` + j("tool") + `
      - path: ` + j("prog") + `
      - path: ` + j("missing") + `
  shell:
    endpoints:
      - host: shell.test
        port: 443
    binaries:
      - path: ` + sh + `
`,
		Want: map[string]string{
			"script":      j("tool.sh") + " is a script run by " + sh + " (#!/bin/sh): the proxy sees " + sh + " connect",
			"link-script": j("tool") + " is a symlink to " + j("tool.sh") + ", a script run by " + sh,
			"symlink":     j("prog") + " is a symlink to " + trueBin + ": the kernel names the file it runs, so the proxy sees " + trueBin + " connect",
			"missing":     j("missing") + " does not exist on this host",
			"interpreter": sh + " is a general interpreter: any code it runs",
		},
	}
}
