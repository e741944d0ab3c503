package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// readmePipeline returns the README's --events /dev/fd/3 pipeline (its
// second block of first commands).
func readmePipeline(t *testing.T) string {
	t.Helper()
	blocks := readmeBlocks(t, "First commands")
	if len(blocks) < 2 || !strings.Contains(blocks[1], "--events /dev/fd/3") {
		t.Fatalf("README's second block of first commands is not the --events /dev/fd/3 pipeline: %q", blocks)
	}
	return strings.TrimSpace(blocks[1])
}

// Issue 16 item 8: the README's pipeline runs. The command's own stdout
// goes to build.log untouched, the events reach ocsf-collector through
// the inherited fd 3 (before the fix: "open /dev/fd/3: too many levels
// of symbolic links", exit 2), and come out as mac.action_event.v1
// records, launch and exit among them.
func TestReadmeEventsPipeline(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	sup := testutil.Binary(t, "sandbox-supervisor")
	col := testutil.Binary(t, "ocsf-collector")
	wd, st := sandboxDirs(t)
	line := readmePipeline(t)
	line = strings.ReplaceAll(line, "/var/tmp/palisade-work", wd)
	line = strings.Replace(line, "./bin/sandbox-supervisor run ", sup+" run --state-dir "+st+" ", 1)
	line = strings.Replace(line, "./bin/ocsf-collector ", col+" ", 1)
	dir := t.TempDir()
	// bash for pipefail: the supervisor's status counts too.
	cmd := exec.Command(testutil.RequireCommand(t, "bash"), "-o", "pipefail", "-c", line)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("pipeline: %v\nstderr: %s", err, errb.String())
	}
	log, _ := os.ReadFile(filepath.Join(dir, "build.log"))
	if string(log) != "built\n" {
		t.Errorf("build.log = %q, want only the command's output", log)
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rec struct {
			Schema, Category, Reason string
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Schema != "mac.action_event.v1" {
			t.Fatalf("collector output line %q is not a mac.action_event.v1 record (%v)", l, err)
		}
		for _, w := range []string{"launched sh", "exited with status 0", "confinement applied"} {
			if strings.Contains(rec.Reason, w) {
				seen[w] = true
			}
		}
	}
	if len(seen) != 3 {
		t.Errorf("records seen %v, want launch, exit and confinement; output:\n%s\nstderr: %s", seen, out.String(), errb.String())
	}
}
