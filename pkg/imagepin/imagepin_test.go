package imagepin

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/shellwords"
)

const (
	dA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	dB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

var (
	refA = "ghcr.io/mac/openshell-sandbox:2026.10@" + dA
	refB = "ghcr.io/mac/openshell-sandbox:2026.11@" + dB
)

func TestParseRefValid(t *testing.T) {
	cases := []struct {
		in                        string
		domain, path, tag, digest string
	}{
		{refA, "ghcr.io", "mac/openshell-sandbox", "2026.10", dA},
		{"ubuntu@" + dA, "", "ubuntu", "", dA},
		{"library/ubuntu:24.04", "", "library/ubuntu", "24.04", ""},
		{"localhost:5000/a/b__c-d.e:t_1@" + dB, "localhost:5000", "a/b__c-d.e", "t_1", dB},
		{"localhost/x@" + dA, "localhost", "x", "", dA},
		{"[::1]:5000/img@" + dA, "[::1]:5000", "img", "", dA},
		{"Registry.Example/img@" + dA, "Registry.Example", "img", "", dA},
	}
	for _, c := range cases {
		r, err := ParseRef(c.in)
		if err != nil {
			t.Errorf("ParseRef(%q): %v", c.in, err)
			continue
		}
		got := []string{r.Domain, r.Path, r.Tag, r.Digest}
		want := []string{c.domain, c.path, c.tag, c.digest}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ParseRef(%q) = %q, want %q", c.in, got, want)
		}
		if r.String() != c.in {
			t.Errorf("ParseRef(%q).String() = %q", c.in, r.String())
		}
	}
}

func TestParsePinnedRefMalformed(t *testing.T) {
	cases := []struct{ in, msg string }{
		{"", "empty"},
		{"ghcr.io/mac/img:tag", "must carry an @sha256"},
		{"ghcr.io/mac/img", "must carry an @sha256"},
		{" ghcr.io/mac/img@" + dA, "whitespace"},
		{"ghcr.io/mac/img@" + dA + "\n", "whitespace"},
		{"ghcr.io/mac/img@sha256:abc", "not sha256:<64"},
		{"ghcr.io/mac/img@sha256:" + strings.Repeat("A", 64), "not sha256:<64"},
		{"ghcr.io/mac/img@sha512:" + strings.Repeat("a", 128), "not sha256:<64"},
		{"ghcr.io/mac/img@" + dA + "@" + dB, "not sha256:<64"},
		{"ghcr.io/mac/img@", "not sha256:<64"},
		{"ghcr.io/Mac/img@" + dA, "path component \"Mac\""},
		{"ghcr.io/mac//img@" + dA, "path component \"\""},
		{"ghcr.io/-mac/img@" + dA, "path component \"-mac\""},
		{"ghcr.io/mac/img:.bad@" + dA, "tag \".bad\""},
		{"ghcr.io/mac/img:" + strings.Repeat("t", 129) + "@" + dA, "tag"},
		{"bad_host.io/img@" + dA, "registry host"},
		{"ghcr.io/@" + dA, "missing repository path"},
		{":tag@" + dA, "missing repository name"},
		{"ghcr.io/" + strings.Repeat("a", 260) + "@" + dA, "longer than 255"},
	}
	for _, c := range cases {
		_, err := ParsePinnedRef(c.in)
		if err == nil {
			t.Errorf("ParsePinnedRef(%q) accepted a malformed reference", c.in)
			continue
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParsePinnedRef(%q) = %v; want it to mention %q", c.in, err, c.msg)
		}
	}
}

func TestPinPath(t *testing.T) {
	cases := []struct {
		env     map[string]string
		want    string
		wantErr string
	}{
		{map[string]string{"HOME": "/home/w"}, "/home/w/.mac/openshell/runtime-image-ref", ""},
		{map[string]string{"HOME": "/home/w", EnvPinFile: ""}, "/home/w/.mac/openshell/runtime-image-ref", ""},
		{map[string]string{"HOME": "/home/w", EnvPinFile: "/etc/mac/pin"}, "/etc/mac/pin", ""},
		{map[string]string{"HOME": "/home/w", EnvPinFile: "~/pins/ref"}, "/home/w/pins/ref", ""},
		{map[string]string{EnvPinFile: "/a/../b/pin"}, "/b/pin", ""},
		{map[string]string{"HOME": "/home/w", EnvPinFile: "pins/ref"}, "", "must be an absolute path"},
		{map[string]string{EnvPinFile: "~/x"}, "", "HOME is unset"},
		{map[string]string{}, "", "HOME are both unset"},
	}
	for _, c := range cases {
		got, err := PinPath(MapEnv(c.env))
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("PinPath(%v) = %q, %v; want error %q", c.env, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("PinPath(%v) = %q, %v; want %q", c.env, got, err, c.want)
		}
	}
}

func TestWriteAndRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "home", ".mac", "openshell", "runtime-image-ref")
	sha := strings.Repeat("c", 64)
	now := time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC)
	if _, err := Write(path, refA, sha, now); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != refA+"\n" {
		t.Fatalf("pin file holds %q, want exactly the reference and a newline", data)
	}
	// A shell reader gets the bare reference.
	out, err := exec.Command("sh", "-c", `read -r ref < "$1" && printf %s "$ref"`, "sh", path).Output()
	if err != nil || string(out) != refA {
		t.Fatalf("sh read the pin as %q (%v)", out, err)
	}
	st, err := os.Stat(filepath.Dir(path))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("pin directory mode = %v (%v), want 0700", st.Mode().Perm(), err)
	}
	var sc sidecar
	raw, err := os.ReadFile(path + SidecarSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &sc); err != nil || sc.Ref != refA || sc.InputSHA256 != sha || sc.SetAt != "2026-10-02T12:00:00Z" {
		t.Fatalf("sidecar = %+v (%v)", sc, err)
	}
	p, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Ref != refA || p.Digest != dA || p.InputSHA256 != sha || p.SidecarProblem != "" {
		t.Fatalf("Read = %+v", p)
	}

	// Repin without an input sha: the old sha must not survive.
	if _, err := Write(path, refB, "", now); err != nil {
		t.Fatal(err)
	}
	p, err = Read(path)
	if err != nil || p.Ref != refB || p.InputSHA256 != "" {
		t.Fatalf("after repin Read = %+v, %v", p, err)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 2 {
		t.Fatalf("pin directory holds %d entries, want pin and sidecar only (no temp files)", len(ents))
	}
}

func TestWriteRejectsWithoutWriting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pin")
	for _, c := range []struct{ ref, sha, msg string }{
		{"ghcr.io/mac/img:latest", "", "must carry an @sha256"},
		{refA, "abc", "--input-sha256"},
		{refA, strings.Repeat("C", 64), "--input-sha256"},
	} {
		if _, err := Write(path, c.ref, c.sha, time.Now()); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Write(%q, %q) = %v, want error mentioning %q", c.ref, c.sha, err, c.msg)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a rejected Write left %d files behind", len(ents))
	}
}

func TestReadRejects(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, err := Read(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoPin) {
		t.Errorf("missing file: %v, want ErrNoPin", err)
	}
	cases := []struct{ path, msg string }{
		{write("empty", "\n", 0o644), "empty"},
		{write("two", refA+"\n"+refB+"\n", 0o644), "more than one line"},
		{write("tag", "ghcr.io/mac/img:latest\n", 0o644), "must carry an @sha256"},
		{write("bad", "ghcr.io/mac/img@sha256:1234\n", 0o644), "not sha256:<64"},
		{write("ww", refA+"\n", 0o666), "writable by group or others"},
		{dir, "not a regular file"},
	}
	for _, c := range cases {
		_, err := Read(c.path)
		if err == nil || !strings.Contains(err.Error(), c.msg) || errors.Is(err, ErrNoPin) {
			t.Errorf("Read(%s) = %v; want error mentioning %q", filepath.Base(c.path), err, c.msg)
		}
	}
	// Surrounding whitespace, as an editor might leave, is tolerated.
	p, err := Read(write("ws", "  "+refA+"  \n\n", 0o644))
	if err != nil || p.Ref != refA {
		t.Errorf("Read with surrounding whitespace = %+v, %v", p, err)
	}
}

func TestReadStaleSidecar(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pin")
	if _, err := Write(path, refA, strings.Repeat("d", 64), time.Now()); err != nil {
		t.Fatal(err)
	}
	// Someone (bootstrap, an older tool) rewrote the pin alone.
	if err := os.WriteFile(path, []byte(refB+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Ref != refB || p.InputSHA256 != "" || !strings.Contains(p.SidecarProblem, "not the pinned reference") {
		t.Fatalf("stale sidecar: %+v", p)
	}
}

// pinEnv writes a pin (unless ref is "") and returns an environment naming it.
func pinEnv(t *testing.T, ref string, extra map[string]string) (Env, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runtime-image-ref")
	if ref != "" {
		if _, err := Write(path, ref, "", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	m := map[string]string{EnvPinFile: path, "HOME": "/nonexistent"}
	for k, v := range extra {
		m[k] = v
	}
	return MapEnv(m), path
}

func TestCheckRules(t *testing.T) {
	cases := []struct {
		name       string
		pin        string
		env        map[string]string
		ok         bool
		disagree   bool
		noPin      bool
		msg        string
		gate       string
		gateSource string
		warn       string
	}{
		{name: "pin and matching --from", pin: refA, env: map[string]string{EnvCreateArgs: "--from " + refA + " --upload /src:/src"}, ok: true, gate: refA, gateSource: "runtime-image-ref"},
		{name: "pin and matching --from= quoted", pin: refA, env: map[string]string{EnvCreateArgs: `--upload '/my src:/src' "--from=` + refA + `"`}, ok: true, gate: refA, gateSource: "runtime-image-ref"},
		{name: "pin and different --from", pin: refA, env: map[string]string{EnvCreateArgs: "--from " + refB}, disagree: true, msg: "has --from " + refB + " but the pin"},
		{name: "same digest different spelling", pin: refA, env: map[string]string{EnvCreateArgs: "--from ghcr.io/mac/openshell-sandbox@" + dA}, disagree: true, msg: "has --from"},
		{name: "pin and no --from", pin: refA, env: map[string]string{EnvCreateArgs: "--upload /src:/src"}, disagree: true, msg: "has no --from"},
		{name: "pin and no create args", pin: refA, env: nil, disagree: true, msg: "has no --from"},
		{name: "pin and two agreeing --from", pin: refA, env: map[string]string{EnvCreateArgs: "--from " + refA + " --from=" + refA}, disagree: true, msg: "2 --from arguments"},
		{name: "--from after -- is a command argument", pin: refA, env: map[string]string{EnvCreateArgs: "--from " + refA + " -- run --from " + refB}, ok: true, gate: refA, gateSource: "runtime-image-ref"},
		{name: "pin wins over verify image with warning", pin: refA, env: map[string]string{EnvCreateArgs: "--from " + refA, EnvVerifyImage: refB}, ok: true, gate: refA, gateSource: "runtime-image-ref", warn: EnvVerifyImage + " is ignored because the pin"},
		{name: "pin disagrees and verify image set", pin: refA, env: map[string]string{EnvCreateArgs: "--from " + refB, EnvVerifyImage: refB}, disagree: true, msg: "has --from " + refB, warn: EnvVerifyImage + " is ignored"},
		{name: "no pin, verify image only", env: map[string]string{EnvVerifyImage: refB}, ok: true, gate: refB, gateSource: EnvVerifyImage},
		{name: "no pin, verify image equals --from", env: map[string]string{EnvVerifyImage: refB, EnvCreateArgs: "--from=" + refB}, ok: true, gate: refB, gateSource: EnvVerifyImage},
		{name: "no pin, verify image differs from --from", env: map[string]string{EnvVerifyImage: refB, EnvCreateArgs: "--from " + refA}, disagree: true, msg: "but " + EnvVerifyImage},
		{name: "no pin, verify image, two --from", env: map[string]string{EnvVerifyImage: refB, EnvCreateArgs: "--from " + refB + " --from " + refB}, disagree: true, msg: "2 --from arguments"},
		{name: "no pin, malformed verify image", env: map[string]string{EnvVerifyImage: "Not A Ref"}, msg: EnvVerifyImage},
		{name: "no pin, no verify image", env: map[string]string{EnvCreateArgs: "--from " + refA}, noPin: true, msg: "the test gate has no image"},
		{name: "unterminated quote", pin: refA, env: map[string]string{EnvCreateArgs: `--from "` + refA}, msg: "unterminated double quote"},
		{name: "--from without value", pin: refA, env: map[string]string{EnvCreateArgs: "--upload /a:/a --from"}, msg: "--from has no value"},
		{name: "empty --from=", pin: refA, env: map[string]string{EnvCreateArgs: "--from="}, msg: "empty value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, _ := pinEnv(t, c.pin, c.env)
			rep, err := Check(env)
			if rep == nil {
				t.Fatal("Check returned no report")
			}
			if c.ok {
				if err != nil || !rep.OK {
					t.Fatalf("Check = %v (report %+v), want ok", err, rep)
				}
				if rep.GateImage != c.gate || rep.GateSource != c.gateSource {
					t.Errorf("gate = %s from %s, want %s from %s", rep.GateImage, rep.GateSource, c.gate, c.gateSource)
				}
			} else {
				if err == nil || rep.OK || rep.Error != err.Error() {
					t.Fatalf("Check = %v, report ok=%v error=%q; want failure", err, rep.OK, rep.Error)
				}
				var de *DisagreeError
				if got := errors.As(err, &de); got != c.disagree {
					t.Errorf("disagreement = %v, want %v (%v)", got, c.disagree, err)
				}
				if c.disagree {
					if !strings.HasPrefix(err.Error(), "OpenShell runtime image pins disagree: ") || !strings.Contains(err.Error(), "image-pin set") {
						t.Errorf("disagreement message %q lacks the seed's wording or the image-pin set fix", err)
					}
				}
				if got := errors.Is(err, ErrNoPin); got != c.noPin {
					t.Errorf("ErrNoPin = %v, want %v", got, c.noPin)
				}
				if !strings.Contains(err.Error(), c.msg) {
					t.Errorf("error %q does not mention %q", err, c.msg)
				}
			}
			warned := strings.Join(rep.Warnings, "\n")
			if c.warn == "" && warned != "" {
				t.Errorf("unexpected warnings: %s", warned)
			}
			if c.warn != "" && !strings.Contains(warned, c.warn) {
				t.Errorf("warnings %q lack %q", warned, c.warn)
			}
		})
	}
}

func TestCheckMalformedPinFailsClosed(t *testing.T) {
	env, path := pinEnv(t, "", map[string]string{EnvCreateArgs: "--from " + refA, EnvVerifyImage: refA})
	if err := os.WriteFile(path, []byte("ghcr.io/mac/img:latest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A broken pin is not "no pin": MAC_HUB_VERIFY_IMAGE must not take over.
	rep, err := Check(env)
	if err == nil || rep.OK || errors.Is(err, ErrNoPin) || !strings.Contains(err.Error(), "must carry an @sha256") {
		t.Fatalf("Check with a tag-only pin = %v, ok=%v", err, rep.OK)
	}
}

// shellEnvArgs sources line in sh, then shell-splits the variable with sh
// itself, returning the arguments sh sees.
func shellEnvArgs(t *testing.T, line string) []string {
	t.Helper()
	script := line + "\n" + `eval "set -- $` + EnvCreateArgs + `"; printf '%s\0' "$@"`
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("sh could not use %q: %v", line, err)
	}
	s := strings.TrimSuffix(string(out), "\x00")
	return strings.Split(s, "\x00")
}

func TestEnvLines(t *testing.T) {
	pin := &Pin{Ref: refA}
	cases := []struct {
		existing string
		want     []string
	}{
		{"", []string{"--from", refA}},
		{"--from " + refB + " --upload '/my src:/src'", []string{"--from", refA, "--upload", "/my src:/src"}},
		{"--upload /a:/a --from=" + refB + ` --label "it's"`, []string{"--from", refA, "--upload", "/a:/a", "--label", "it's"}},
		{"--from " + refB + " --from " + refA + " --keep", []string{"--from", refA, "--keep"}},
	}
	for _, c := range cases {
		lines, err := EnvLines(pin, c.existing)
		if err != nil {
			t.Fatalf("EnvLines(%q): %v", c.existing, err)
		}
		if len(lines) != 1 || !strings.HasPrefix(lines[0], EnvCreateArgs+"=") {
			t.Fatalf("EnvLines = %q", lines)
		}
		if got := shellEnvArgs(t, lines[0]); !reflect.DeepEqual(got, c.want) {
			t.Errorf("from %q: sh sees %q, want %q", c.existing, got, c.want)
		}
		// The derived value passes Check against the pin.
		val := strings.TrimPrefix(lines[0], EnvCreateArgs+"=")
		words, err := shellwords.Split(val)
		if err != nil || len(words) != 1 {
			t.Fatalf("value %q is not one shell word: %q %v", val, words, err)
		}
		env, _ := pinEnv(t, refA, map[string]string{EnvCreateArgs: words[0]})
		if _, err := Check(env); err != nil {
			t.Errorf("derived create args fail Check: %v", err)
		}
	}
	if _, err := EnvLines(pin, `--upload "/a`); err == nil || !strings.Contains(err.Error(), EnvCreateArgs) {
		t.Errorf("EnvLines with unsplittable args = %v", err)
	}
}

// FuzzParseRef: ParseRef never panics, and what it accepts reassembles to
// the same string and parses again to the same Ref.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{refA, "ubuntu", "localhost:5000/a:b", "[::1]/x@" + dA, "a@b@c", "A/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			return
		}
		if r.String() != s {
			t.Fatalf("ParseRef(%q).String() = %q", s, r.String())
		}
		again, err := ParseRef(r.String())
		if err != nil || again != r {
			t.Fatalf("reparse of %q = %+v, %v", s, again, err)
		}
	})
}
