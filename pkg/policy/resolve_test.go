package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// env returns a Getenv over a fixed map.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

const (
	flagPolicy = "version: 1\nprocess:\n  run_as_user: \"1001\"\n"
	envPolicy  = "version: 1\nprocess:\n  run_as_user: \"1002\"\n"
	homePolicy = "version: 1\nprocess:\n  run_as_user: \"1003\"\n"
)

// setup makes a HOME with ~/.mac/openshell-policy.yaml (when withHome) and
// flag/env policy files.
func setup(t *testing.T, withHome bool) (home, flagFile, envFile string) {
	t.Helper()
	dir := t.TempDir()
	home = filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".mac"), 0o700); err != nil {
		t.Fatal(err)
	}
	if withHome {
		writeFile(t, filepath.Join(home, HomePolicyPath), homePolicy)
	}
	flagFile = filepath.Join(dir, "flag.yaml")
	writeFile(t, flagFile, flagPolicy)
	envFile = filepath.Join(dir, "env.yaml")
	writeFile(t, envFile, envPolicy)
	return home, flagFile, envFile
}

func TestResolveOrder(t *testing.T) {
	home, flagFile, envFile := setup(t, true)
	emptyHome, _, _ := setup(t, false)
	tests := []struct {
		name     string
		opts     ResolveOptions
		source   Source
		path     string
		user     string
		inReason string
	}{
		{"flag beats everything", ResolveOptions{Flag: flagFile, Getenv: env(map[string]string{EnvPolicy: envFile}), Home: home},
			SourceFlag, flagFile, "1001", "takes precedence over " + EnvPolicy},
		{"env beats home", ResolveOptions{Getenv: env(map[string]string{EnvPolicy: envFile}), Home: home},
			SourceEnv, envFile, "1002", EnvPolicy + " is set"},
		{"home beats bundled", ResolveOptions{Getenv: env(nil), Home: home},
			SourceHome, filepath.Join(home, HomePolicyPath), "1003", "fleet policy"},
		{"home from HOME", ResolveOptions{Getenv: env(map[string]string{"HOME": home})},
			SourceHome, filepath.Join(home, HomePolicyPath), "1003", "fleet policy"},
		{"bundled when nothing else", ResolveOptions{Getenv: env(nil), Home: emptyHome},
			SourceBundled, "bundled:default-policy.yaml", SandboxIdentity, "does not exist"},
		{"bundled without HOME", ResolveOptions{Getenv: env(nil)},
			SourceBundled, "bundled:default-policy.yaml", SandboxIdentity, "HOME is unset"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Resolve(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.Source != tc.source || r.Path != tc.path || r.Policy.Process.RunAsUser != tc.user {
				t.Errorf("got source=%s path=%s user=%s", r.Source, r.Path, r.Policy.Process.RunAsUser)
			}
			if !strings.Contains(r.Reason, tc.inReason) {
				t.Errorf("reason %q lacks %q", r.Reason, tc.inReason)
			}
			if len(r.Raw) == 0 {
				t.Error("no raw bytes")
			}
			if p, err := Parse(r.Raw); err != nil || p.Checksum() != r.Policy.Checksum() {
				t.Errorf("Raw does not parse to Policy: %v", err)
			}
			if tc.source == SourceBundled && r.Policy.Checksum() != Default().Checksum() {
				t.Error("bundled source is not Default()")
			}
		})
	}
}

func TestResolveFailsClosed(t *testing.T) {
	home, _, envFile := setup(t, true)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	invalid := filepath.Join(dir, "invalid.yaml")
	writeFile(t, invalid, "version: 1\nprocess:\n  run_as_user: root\n")

	// Missing explicit files are errors naming their origin and path.
	_, err := Resolve(ResolveOptions{Flag: missing, Getenv: env(map[string]string{EnvPolicy: envFile}), Home: home})
	if err == nil || !strings.Contains(err.Error(), "--policy") || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing flag file: %v", err)
	}
	_, err = Resolve(ResolveOptions{Getenv: env(map[string]string{EnvPolicy: missing}), Home: home})
	if err == nil || !strings.Contains(err.Error(), EnvPolicy) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing env file: %v", err)
	}

	// An invalid policy at the chosen source never falls through.
	for name, opts := range map[string]ResolveOptions{
		"flag": {Flag: invalid, Getenv: env(nil), Home: home},
		"env":  {Getenv: env(map[string]string{EnvPolicy: invalid}), Home: home},
	} {
		_, err := Resolve(opts)
		if errs, ok := AsErrors(err); !ok || !errs.Has("process.run_as_user") {
			t.Errorf("%s: invalid policy not reported: %v", name, err)
		}
	}
	badHome := t.TempDir()
	if err := os.MkdirAll(filepath.Join(badHome, ".mac"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(badHome, HomePolicyPath), "version: 1\nunknown: 1\n")
	if _, err := Resolve(ResolveOptions{Getenv: env(nil), Home: badHome}); err == nil {
		t.Error("invalid home policy fell through to the bundled default")
	}
	// A home policy that exists but cannot be read (here: a directory, or a
	// dangling symlink) is an error too.
	dirHome := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dirHome, HomePolicyPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(ResolveOptions{Getenv: env(nil), Home: dirHome}); err == nil {
		t.Error("directory at the home policy path fell through")
	}
	linkHome := t.TempDir()
	if err := os.MkdirAll(filepath.Join(linkHome, ".mac"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(missing, filepath.Join(linkHome, HomePolicyPath)); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(ResolveOptions{Getenv: env(nil), Home: linkHome}); err == nil {
		t.Error("dangling home symlink fell through")
	}
}
