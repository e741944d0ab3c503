package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// collectorCmd is the real binary with HOME pointed at an empty
// directory, so what it writes there can be seen.
func collectorCmd(t *testing.T, home string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t, "ocsf-collector"), args...)
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	return cmd
}

// Issue 16 item 7: with --once, an --input that matches nothing is an
// error naming it (it exited 0 without a word); without --once it is a
// warning and the collector waits for the file.
func TestInputMatchingNothing(t *testing.T) {
	home := t.TempDir()
	missing := filepath.Join(t.TempDir(), "evnets.log") // the typo
	cmd := collectorCmd(t, home, "--once", "--input", missing, "--stdout")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), missing) || !strings.Contains(string(out), "matches no file") {
		t.Fatalf("--once with a missing input: exit %d\n%s\nwant 1 naming %s", code, out, missing)
	}

	cmd = collectorCmd(t, home, "--input", missing, "--stdout")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "WARN") && strings.Contains(sc.Text(), "matches no file") {
				found <- true
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Fatal("no warning about the input that matches nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no warning within 10 s")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// Issue 16 item 7: --stdout alone needs no spool: nothing is written
// under ~/.mac (it created ~/.mac/ocsf-collector), for a file input and
// for stdin, and the records still come out.
func TestStdoutAloneKeepsNothing(t *testing.T) {
	home := t.TempDir()
	in := filepath.Join(t.TempDir(), "events.log")
	os.WriteFile(in, []byte(ocsfLine(1)+"\nnot an event\n"), 0o600)
	cmd := collectorCmd(t, home, "--once", "--input", in, "--stdout")
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `"schema":"mac.action_event.v1"`) {
		t.Fatalf("file to stdout: %v\n%s", err, out)
	}
	cmd = collectorCmd(t, home, "--input", "-", "--stdout")
	cmd.Stdin = strings.NewReader(ocsfLine(2) + "\n")
	if out, err = cmd.Output(); err != nil || !strings.Contains(string(out), `"schema":"mac.action_event.v1"`) {
		t.Fatalf("stdin to stdout: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(home); len(ents) != 0 {
		t.Fatalf("--stdout alone wrote to HOME: %v", ents)
	}
}

// Issue 29 item 7: a 5019 event's activity is the producer's own (99,
// Other, named Policy Load, Policy Reload, Confinement Applied); the
// record kept "Other" and lost what happened. The events are the ones
// docs/events.md shows, which pkg/ocsf's constructors generate.
func TestKeepsPolicyActivityNames(t *testing.T) {
	doc, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- ocsf-example: ([a-z0-9-]+) -->\n```json\n(.*?)```\n")
	var in bytes.Buffer
	want := map[string]bool{}
	for _, m := range block.FindAllSubmatch(doc, -1) {
		var ev struct {
			ClassUID     int    `json:"class_uid"`
			ActivityName string `json:"activity_name"`
		}
		if err := json.Unmarshal(m[2], &ev); err != nil {
			t.Fatalf("example %s: %v", m[1], err)
		}
		if ev.ClassUID != 5019 {
			continue
		}
		json.Compact(&in, m[2])
		in.WriteByte('\n')
		want[ev.ActivityName] = true
	}
	for _, n := range []string{"Policy Load", "Policy Reload", "Confinement Applied"} {
		if !want[n] {
			t.Fatalf("docs/events.md has no 5019 example named %q", n)
		}
	}
	cmd := collectorCmd(t, t.TempDir(), "--input", "-", "--stdout", "--agent-id", "agent-7")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ocsf-collector: %v\n%s", err, out)
	}
	got := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Category string `json:"category"`
			Source   struct {
				ActivityID   int    `json:"activity_id"`
				ActivityName string `json:"activity_name"`
			} `json:"source"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("record %q: %v", l, err)
		}
		if r.Category != "policy" || r.Source.ActivityID != 99 {
			t.Errorf("record %s: want category policy, activity 99", l)
		}
		got[r.Source.ActivityName] = true
	}
	for n := range want {
		if !got[n] {
			t.Errorf("no record keeps activity_name %q; got %v", n, got)
		}
	}
}
