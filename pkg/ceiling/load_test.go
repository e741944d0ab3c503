package ceiling

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// asOwner makes the test's own uid the one Load requires, so the
// success paths run without root.
func asOwner(t *testing.T) {
	t.Helper()
	old := requiredOwner
	requiredOwner = os.Geteuid()
	t.Cleanup(func() { requiredOwner = old })
}

func writeCeiling(t *testing.T, dir, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, "ceiling.yaml")
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLocate(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if p, explicit := Locate("", getenv); p != DefaultPath || explicit {
		t.Errorf("default: %s %v", p, explicit)
	}
	env[EnvPath] = "/x/env.yaml"
	if p, explicit := Locate("", getenv); p != "/x/env.yaml" || !explicit {
		t.Errorf("env: %s %v", p, explicit)
	}
	if p, explicit := Locate("/x/flag.yaml", getenv); p != "/x/flag.yaml" || !explicit {
		t.Errorf("flag: %s %v", p, explicit)
	}
}

func TestLoad(t *testing.T) {
	asOwner(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "none.yaml")
	if c, err := Load(missing, false); c != nil || err != nil {
		t.Errorf("a missing default ceiling: %v %v", c, err)
	}
	if _, err := Load(missing, true); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing named ceiling: %v", err)
	}
	p := writeCeiling(t, dir, testCeiling, 0o600)
	c, err := Load(p, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != p || c.Checksum != mustParse(t, testCeiling).Checksum() {
		t.Errorf("loaded %+v", c)
	}
	if err := c.Check(mustParse(t, testCeiling)); err != nil {
		t.Errorf("the ceiling exceeds itself: %v", err)
	}
	err = c.Check(mustParse(t, entry("gh", "    endpoints: [{host: api.gitlab.com, port: 443}]\n    binaries: [{path: /usr/bin/git}]\n")))
	var ce *Error
	if !errors.As(err, &ce) || err.Error() != "policy exceeds the ceiling "+p+": network_policies.gh.endpoints[0]: host api.gitlab.com not within the ceiling" {
		t.Errorf("excess: %v", err)
	}
	if err := (*Ceiling)(nil).Check(mustParse(t, testCeiling)); err != nil {
		t.Errorf("no ceiling refused: %v", err)
	}

	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) string
		want  string
	}{
		{"group-writable", func(t *testing.T) string {
			return writeCeiling(t, t.TempDir(), testCeiling, 0o620)
		}, "writable by group or others (mode 0620)"},
		{"world-writable directory", func(t *testing.T) string {
			d := t.TempDir()
			os.Chmod(d, 0o777)
			return writeCeiling(t, d, testCeiling, 0o600)
		}, "writable by group or others (mode 0777)"},
		{"symlink", func(t *testing.T) string {
			d := t.TempDir()
			real := writeCeiling(t, d, testCeiling, 0o600)
			link := filepath.Join(d, "link.yaml")
			os.Symlink(real, link)
			return link
		}, "is a symlink"},
		{"directory", func(t *testing.T) string { return t.TempDir() }, "not a regular file"},
		{"invalid", func(t *testing.T) string {
			return writeCeiling(t, t.TempDir(), "version: 2\n", 0o600)
		}, "version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.setup(t), true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// A ceiling root does not own is refused: as root the test hands the
// file to nobody; as another user the file is its own, not root's.
func TestLoadRefusesOtherOwners(t *testing.T) {
	dir := t.TempDir()
	p := writeCeiling(t, dir, testCeiling, 0o600)
	if os.Geteuid() == 0 {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Load(p, true)
	if err == nil || !strings.Contains(err.Error(), "not root; fix with chown root:root") {
		t.Fatalf("got %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(p, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p, true); err == nil || !strings.Contains(err.Error(), dir+": owned by uid 65534") {
			t.Fatalf("a directory root does not own: %v", err)
		}
	}
}

func TestResolvePath(t *testing.T) {
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(d, "real"), 0o755)
	os.Symlink(filepath.Join(d, "real"), filepath.Join(d, "link"))
	for in, want := range map[string]string{
		filepath.Join(d, "link"):           filepath.Join(d, "real"),
		filepath.Join(d, "link", "a", "b"): filepath.Join(d, "real", "a", "b"),
		filepath.Join(d, "none", "x"):      filepath.Join(d, "none", "x"),
		"/":                                "/",
	} {
		if got := ResolvePath(in); got != want {
			t.Errorf("ResolvePath(%s) = %s, want %s", in, got, want)
		}
	}
}
