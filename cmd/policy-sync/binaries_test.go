package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/binaries/binariestest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// check tells the truth about listed binaries (#23 item 6): a script
// (listed or through a link) is run by its interpreter, a link is seen as
// its target, a path is missing, a general interpreter passes its access
// on. Each is one line on stderr naming the entry ("warning:", "note:"
// for the missing path); the policy stays valid (exit 0) and stdout is
// the normalised policy alone. --json carries them as "warnings".
func TestCheckWarnsAboutBinaries(t *testing.T) {
	bin := testutil.Binary(t, "policy-sync")
	fx := binariestest.New(t, t.TempDir())
	file := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(file, []byte("version: 1\nnetwork_policies:\n"+fx.Entries), 0o600)

	cmd := exec.Command(bin, "check", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, stderr.String())
	}
	if !strings.HasPrefix(string(out), "# "+file+": valid\n") || strings.Contains(string(out), "warning") {
		t.Errorf("stdout:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != len(fx.Want) {
		t.Errorf("%d warning lines, want %d:\n%s", len(lines), len(fx.Want), stderr.String())
	}
	for kind, phrase := range fx.Want {
		entry, level := "tools", "warning"
		if kind == "interpreter" {
			entry = "shell"
		}
		if kind == "missing" {
			level = "note" // often meant, in a policy for several hosts
		}
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, level+": network_policies."+entry+".binaries: ") && strings.Contains(l, phrase)
		}
		if !found {
			t.Errorf("no %s warning with %q:\n%s", kind, phrase, stderr.String())
		}
	}

	out, err = exec.Command(bin, "check", "--json", file).Output()
	var res checkResult
	if err != nil || json.Unmarshal(out, &res) != nil || !res.Valid || len(res.Warnings) != len(fx.Want) {
		t.Fatalf("--json: %v %s", err, out)
	}
	kinds := map[string]int{}
	for _, w := range res.Warnings {
		kinds[string(w.Kind)]++
	}
	if kinds["script"] != 2 || kinds["symlink"] != 1 || kinds["missing"] != 1 || kinds["interpreter"] != 1 {
		t.Errorf("warning kinds %v", kinds)
	}
}
