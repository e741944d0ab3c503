//go:build linux

package sandboxnet

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/binaries/binariestest"
)

// sandbox-supervisor run tells the truth about listed binaries (#23
// item 6) before the command starts: one warning per note on the
// operator's stderr, said once (the proxy it starts logs the first
// load's notes at info), a missing path at info, and the run goes on.
func TestRunWarnsAboutBinaries(t *testing.T) {
	l := newLab(t, "")
	// Not under /tmp: the lab policy makes /tmp writable, where no
	// binary may be listed.
	dir, err := os.MkdirTemp("/var/tmp", "palisade-bins-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fx := binariestest.New(t, dir)
	head := labPolicy[:strings.Index(labPolicy, "  web:")]
	l.write(head + fx.Entries)
	cmd := l.command("echo ran")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || string(out) != "ran\n" {
		t.Fatalf("run: %v %q\n%s", err, out, stderr.String())
	}
	var warns, infos []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "level=WARN") {
			warns = append(warns, line)
		}
		if strings.Contains(line, "level=INFO") {
			infos = append(infos, line)
		}
	}
	count := func(lines []string, phrase string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, phrase) {
				n++
			}
		}
		return n
	}
	for kind, phrase := range fx.Want {
		if kind == "missing" {
			// Often meant (a policy for several hosts): info, never a warning.
			if count(warns, phrase) != 0 || count(infos, phrase) == 0 {
				t.Errorf("missing (%q): %d warnings, %d info lines, want 0 and some:\n%s", phrase, count(warns, phrase), count(infos, phrase), stderr.String())
			}
			continue
		}
		if n := count(warns, phrase); n != 1 {
			t.Errorf("%s (%q): %d warnings, want 1:\n%s", kind, phrase, n, stderr.String())
		}
	}
	if len(warns) != len(fx.Want)-1 {
		t.Errorf("%d warnings, want %d:\n%s", len(warns), len(fx.Want)-1, strings.Join(warns, "\n"))
	}
}
