package binaries

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// fakeHost lays out, under a temporary directory, what the notes are
// about: an ELF-like program, an interpreter named node reached through
// PATH, an npm-like link to a script "#!/usr/bin/env node" runs, a
// script with an absolute interpreter, a link to a program, a dangling
// link and a directory.
func fakeHost(t *testing.T) (dir, bin string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "bin")
	lib := filepath.Join(dir, "lib", "npm")
	for _, d := range []string{bin, lib} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, text string) {
		if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(bin, "tool"), "\x7fELF...")
	write(filepath.Join(bin, "python3.12"), "\x7fELF...")
	write(filepath.Join(bin, "node"), "\x7fELF...")
	write(filepath.Join(lib, "npm-cli.js"), "#!/usr/bin/env node\nrequire('npm')\n")
	write(filepath.Join(bin, "runner"), "#!"+filepath.Join(bin, "python3")+" -u\nprint(1)\n")
	write(filepath.Join(bin, "nested"), "#!"+filepath.Join(bin, "runner")+"\n")
	write(filepath.Join(bin, "split"), "#!/usr/bin/env -S FOO=1 node --max-old-space-size=100\n")
	os.Symlink("../lib/npm/npm-cli.js", filepath.Join(bin, "npm"))
	os.Symlink("python3.12", filepath.Join(bin, "python3"))
	os.Symlink("gone", filepath.Join(bin, "dangling"))
	return dir, bin
}

func policyWith(t *testing.T, entries map[string][]string) *policy.Policy {
	t.Helper()
	var y strings.Builder
	y.WriteString("version: 1\nnetwork_policies:\n")
	for name, bins := range entries {
		fmt.Fprintf(&y, "  %s:\n    endpoints:\n      - host: %s.example.com\n        port: 443\n    binaries:\n", name, name)
		for _, b := range bins {
			fmt.Fprintf(&y, "      - path: %s\n", b)
		}
	}
	p, err := policy.Parse([]byte(y.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, y.String())
	}
	return p
}

func TestNotes(t *testing.T) {
	dir, bin := fakeHost(t)
	j := func(name string) string { return filepath.Join(bin, name) }
	node, py := j("node"), j("python3.12")
	opt := Options{Path: bin}
	for _, c := range []struct {
		name    string
		listed  []string
		kind    Kind
		runs    string
		message string // the whole message
	}{
		{"link to a script", []string{j("npm")}, Script, node,
			j("npm") + " is a symlink to " + filepath.Join(dir, "lib/npm/npm-cli.js") + ", a script run by " + node +
				" (#!/usr/bin/env node): the proxy sees " + node + " connect (or a program it starts), never " + j("npm") +
				", so this entry never matches it; list " + node + " instead; it is a general interpreter: " + interpreterRisk},
		{"script, absolute interpreter through a link", []string{j("runner")}, Script, py,
			j("runner") + " is a script run by " + py + " (#!" + j("python3") + " -u): the proxy sees " + py +
				" connect (or a program it starts), never " + j("runner") + ", so this entry never matches it; list " + py +
				" instead; it is a general interpreter: " + interpreterRisk},
		{"script run by a script", []string{j("nested")}, Script, py, ""},
		{"env -S with assignments and options", []string{j("split")}, Script, node, ""},
		{"link to a program", []string{j("python3")}, Symlink, py,
			j("python3") + " is a symlink to " + py + ": the kernel names the file it runs, so the proxy sees " + py +
				" connect, never " + j("python3") + ", and this entry never matches it; list " + py + " instead; it is a general interpreter: " + interpreterRisk},
		{"interpreter", []string{node}, Interpreter, "", node + " is a general interpreter: any code it runs, a script the agent writes included, and every program started under it get this entry's access"},
		{"glob matching an interpreter", []string{j("python3*")}, Interpreter, "", ""},
		{"missing", []string{j("nothere")}, Missing, "", j("nothere") + " does not exist on this host: this entry matches nothing through it until it does"},
		{"dangling link", []string{j("dangling")}, Missing, "", j("dangling") + " is a symlink to gone, which does not exist on this host: this entry matches nothing through it"},
		{"directory", []string{bin}, Missing, "", ""},
		{"glob matching nothing", []string{j("zz*")}, Missing, "", ""},
		{"plain program", []string{j("tool")}, "", "", ""},
		{"double-star glob", []string{dir + "/**/tool"}, "", "", ""},
		// The entry lists what really runs too: the link is redundant.
		{"covered link", []string{j("python3"), j("python3.*")}, Interpreter, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			notes := Notes(policyWith(t, map[string][]string{"e": c.listed}), opt)
			if c.kind == "" {
				if len(notes) != 0 {
					t.Fatalf("notes %v, want none", notes)
				}
				return
			}
			if len(notes) != 1 {
				t.Fatalf("notes %v, want one %s", notes, c.kind)
			}
			n := notes[0]
			if n.Kind != c.kind || n.Runs != c.runs {
				t.Errorf("kind %s runs %q, want %s %q (%s)", n.Kind, n.Runs, c.kind, c.runs, n.Message)
			}
			if c.message != "" && n.Message != c.message {
				t.Errorf("message\n got %s\nwant %s", n.Message, c.message)
			}
			if !strings.HasPrefix(n.String(), "network_policies.e.binaries: "+n.Path+" ") {
				t.Errorf("String() %q does not name the field", n.String())
			}
		})
	}
}

// A path listed by several entries gets one note naming every field.
func TestNotesSayOnce(t *testing.T) {
	_, bin := fakeHost(t)
	node := filepath.Join(bin, "node")
	notes := Notes(policyWith(t, map[string][]string{"a": {node}, "b": {filepath.Join(bin, "tool"), node}}), Options{Path: bin})
	if len(notes) != 1 || strings.Join(notes[0].Fields, " ") != "network_policies.a.binaries network_policies.b.binaries" {
		t.Fatalf("notes %+v", notes)
	}
}

func TestShebangProgram(t *testing.T) {
	_, bin := fakeHost(t)
	for line, want := range map[string]string{
		"#!/bin/sh":                              "/bin/sh",
		"#! /usr/bin/python3 -u":                 "/usr/bin/python3",
		"#!/usr/bin/env node":                    filepath.Join(bin, "node"),
		"#!/usr/bin/env -S node --flag":          filepath.Join(bin, "node"),
		"#!/usr/bin/env -Snode":                  filepath.Join(bin, "node"),
		"#!/usr/bin/env -i A=1 -u B node":        filepath.Join(bin, "node"),
		"#!/usr/bin/env /opt/x/bin/run":          "/opt/x/bin/run",
		"#!/usr/bin/env notinpath":               "",
		"#!/usr/bin/env":                         "",
		"#!":                                     "",
		"#!/usr/bin/env -- node":                 filepath.Join(bin, "node"),
		"#!/usr/bin/env --split-string=node -x":  "",
		"#!/usr/bin/env -C /tmp node":            filepath.Join(bin, "node"),
		"#!/usr/bin/envy node":                   "/usr/bin/envy",
		"#!/usr/bin/env FOO=/a/b node --inspect": filepath.Join(bin, "node"),
	} {
		if got := shebangProgram(line, bin); got != want {
			t.Errorf("%q: %q, want %q", line, got, want)
		}
	}
}

func TestIsInterpreter(t *testing.T) {
	for _, yes := range []string{"/usr/bin/python3", "/usr/bin/python3.11", "/usr/bin/node", "/bin/sh", "/bin/bash", "/usr/bin/perl", "/usr/bin/perl5.36.0", "/usr/bin/ruby3.1", "/usr/bin/env", "/usr/bin/pypy3", "/usr/bin/luajit", "/bin/busybox"} {
		if !IsInterpreter(yes) {
			t.Errorf("%s is not an interpreter", yes)
		}
	}
	for _, no := range []string{"/usr/bin/curl", "/usr/bin/git", "/usr/bin/npm", "/usr/bin/python-config", "/usr/bin/nodemon", "/usr/bin/shasum", "/usr/local/go/bin/go"} {
		if IsInterpreter(no) {
			t.Errorf("%s is an interpreter", no)
		}
	}
}
