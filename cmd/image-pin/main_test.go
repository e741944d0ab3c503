package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/imagepin"
)

const (
	refA = "ghcr.io/mac/openshell-sandbox:2026.10@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	refB = "ghcr.io/mac/openshell-sandbox:2026.11@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// setup points HOME at a temp dir, clears the knobs, and returns the
// default pin path below that HOME.
func setup(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, k := range []string{imagepin.EnvPinFile, imagepin.EnvCreateArgs, imagepin.EnvVerifyImage} {
		t.Setenv(k, "")
	}
	return filepath.Join(home, ".mac", "openshell", "runtime-image-ref")
}

func invoke(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	if err != nil {
		errb.WriteString("error: " + err.Error() + "\n")
	}
	return out.String(), errb.String(), cli.Code(err)
}

func TestHelpHasExamples(t *testing.T) {
	setup(t)
	for _, args := range [][]string{{"--help"}, {"check", "--help"}} {
		out, _, code := invoke(t, args...)
		if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "image-pin set") {
			t.Errorf("%v: code %d, help %q", args, code, out)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	setup(t)
	cases := [][]string{
		{},
		{"frobnicate"},
		{"set"},
		{"set", refA, refB},
		{"set", "ghcr.io/mac/img:latest"},
		{"set", refA, "--input-sha256", "xyz"},
		{"show", "extra"},
		{"check", "--bogus"},
		{"show", "--log-format", "yaml"},
	}
	for _, args := range cases {
		_, errOut, code := invoke(t, args...)
		if code != cli.ExitUsage {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(os.Getenv("HOME"), ".mac")); !os.IsNotExist(err) {
		t.Errorf("a rejected invocation created the pin directory (%v)", err)
	}
}

func TestSetShowCheckEnv(t *testing.T) {
	path := setup(t)
	sha := strings.Repeat("e", 64)

	if _, errOut, code := invoke(t, "show"); code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("show without pin: exit %d, %q", code, errOut)
	}
	if _, errOut, code := invoke(t, "env"); code != 1 || !strings.Contains(errOut, "nothing to derive from") {
		t.Fatalf("env without pin: exit %d, %q", code, errOut)
	}
	if _, errOut, code := invoke(t, "set", "--input-sha256", sha, refA); code != 0 {
		t.Fatalf("set: exit %d, %s", code, errOut)
	}
	if data, _ := os.ReadFile(path); string(data) != refA+"\n" {
		t.Fatalf("pin file = %q", data)
	}
	out, _, code := invoke(t, "show")
	if code != 0 || out != refA+"\n" {
		t.Fatalf("show: exit %d, %q", code, out)
	}
	out, _, code = invoke(t, "show", "--json")
	var pin imagepin.Pin
	if code != 0 || json.Unmarshal([]byte(out), &pin) != nil || pin.Ref != refA || pin.InputSHA256 != sha || pin.Path != path {
		t.Fatalf("show --json: exit %d, %q", code, out)
	}

	// With no --from the coding sandboxes would not run the pin.
	_, errOut, code := invoke(t, "check")
	if code != 1 || !strings.Contains(errOut, "OpenShell runtime image pins disagree: ") || !strings.Contains(errOut, "image-pin set") {
		t.Fatalf("check without --from: exit %d, %q", code, errOut)
	}

	// env derives the create args; feeding them back makes check pass.
	t.Setenv(imagepin.EnvCreateArgs, "--from "+refB+" --upload '/s rc:/src'")
	out, _, code = invoke(t, "env")
	if code != 0 {
		t.Fatalf("env: exit %d", code)
	}
	script := out + `eval "set -- $MAC_OPENSHELL_CREATE_ARGS"; printf '%s|' "$@"`
	got, err := exec.Command("sh", "-c", script).Output()
	if err != nil || string(got) != "--from|"+refA+"|--upload|/s rc:/src|" {
		t.Fatalf("sh sees derived args as %q (%v) from %q", got, err, out)
	}
	_, errOut, code = invoke(t, "check")
	if code != 1 || !strings.Contains(errOut, "pins disagree: MAC_OPENSHELL_CREATE_ARGS has --from "+refB) {
		t.Fatalf("check with old --from: exit %d, %q", code, errOut)
	}
	derived, err := exec.Command("sh", "-c", out+`printf %s "$MAC_OPENSHELL_CREATE_ARGS"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(imagepin.EnvCreateArgs, string(derived))
	out, errOut, code = invoke(t, "check", "--json")
	var rep imagepin.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || !rep.OK || rep.GateImage != refA || rep.GateSource != "runtime-image-ref" {
		t.Fatalf("check with derived args: exit %d, %q, %q", code, out, errOut)
	}

	// Both set: the pin wins and MAC_HUB_VERIFY_IMAGE draws a warning.
	t.Setenv(imagepin.EnvVerifyImage, refB)
	_, errOut, code = invoke(t, "check")
	if code != 0 || !strings.Contains(errOut, "level=WARN") || !strings.Contains(errOut, "MAC_HUB_VERIFY_IMAGE is ignored because the pin") {
		t.Fatalf("check with both set: exit %d, %q", code, errOut)
	}
	_, errOut, code = invoke(t, "env")
	if code != 0 || !strings.Contains(errOut, "MAC_HUB_VERIFY_IMAGE is ignored") {
		t.Fatalf("env with both set: exit %d, %q", code, errOut)
	}
}

func TestCheckNoPin(t *testing.T) {
	setup(t)
	pin := filepath.Join(t.TempDir(), "pin")
	t.Setenv(imagepin.EnvPinFile, pin)
	t.Setenv(imagepin.EnvCreateArgs, "--from "+refA)
	_, errOut, code := invoke(t, "check")
	if code != 1 || !strings.Contains(errOut, "the test gate has no image") {
		t.Fatalf("no pin, no verify image: exit %d, %q", code, errOut)
	}
	t.Setenv(imagepin.EnvVerifyImage, refA)
	out, errOut, code := invoke(t, "check", "--json", "--log-format", "json")
	var rep imagepin.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.GateSource != imagepin.EnvVerifyImage {
		t.Fatalf("no pin, verify image: exit %d, %q, %q", code, out, errOut)
	}
	if !strings.HasPrefix(errOut, "{") {
		t.Errorf("--log-format json wrote non-JSON logs: %q", errOut)
	}
	t.Setenv(imagepin.EnvCreateArgs, "--from '"+refA)
	_, errOut, code = invoke(t, "check")
	if code != 1 || !strings.Contains(errOut, "unterminated single quote") {
		t.Fatalf("unterminated quote: exit %d, %q", code, errOut)
	}
}
