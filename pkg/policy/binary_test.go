package policy

import "testing"

func TestMatchBinary(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		noMatch []string
	}{
		{"/usr/bin/git", []string{"/usr/bin/git", "/usr//bin/git"}, []string{"/usr/bin/git2", "/usr/local/bin/git", "usr/bin/git"}},
		{"/usr/bin/python3*", []string{"/usr/bin/python3", "/usr/bin/python3.11"}, []string{"/usr/bin/python", "/usr/bin/x/python3"}},
		{"/usr/lib/*/bin/opencode", []string{"/usr/lib/a/bin/opencode"}, []string{"/usr/lib/a/b/bin/opencode", "/usr/lib/bin/opencode"}},
		{"/opt/**/bin/tool", []string{"/opt/bin/tool", "/opt/a/bin/tool", "/opt/a/b/c/bin/tool"}, []string{"/opt/a/bin/tool2", "/optx/bin/tool"}},
		{"/sandbox/.vscode-server/**", []string{"/sandbox/.vscode-server/bin/node", "/sandbox/.vscode-server/x"}, []string{"/sandbox/other/x"}},
		{"/usr/bin/[gh]it", []string{"/usr/bin/git", "/usr/bin/hit"}, []string{"/usr/bin/bit"}},
	}
	for _, tc := range tests {
		for _, p := range tc.match {
			if !MatchBinary(tc.pattern, p) {
				t.Errorf("%s does not match %s", tc.pattern, p)
			}
		}
		for _, p := range tc.noMatch {
			if MatchBinary(tc.pattern, p) {
				t.Errorf("%s matches %s", tc.pattern, p)
			}
		}
	}
}

func TestBinaryMayLieUnder(t *testing.T) {
	tests := []struct {
		pattern, dir string
		want         bool
	}{
		{"/tmp/x", "/tmp", true},
		{"/tmp", "/tmp", true},
		{"/usr/bin/git", "/tmp", false},
		{"/tmpx/git", "/tmp", false},
		{"/*/git", "/tmp", true},
		{"/*/git", "/home/agent", false}, // /home/agent/git has three components
		{"/**/git", "/home/agent/work", true},
		{"/home/*/work/bin/x", "/home/agent", true},
		{"/home/*/work/bin/x", "/home/agent/work/bin/x/y", false},
		{"/usr/bin/python3*", "/usr/bin/python3.11-venv", true},
		{"/usr/bin/python3*", "/usr/bin/pip", false},
		{"/opt/**", "/opt/tools", true},
		{"/usr/bin/[gh]it", "/usr/bin/git", true},
		{"/usr/bin/[gh]it", "/usr/bin/bit", false},
	}
	for _, tc := range tests {
		if got := binaryMayLieUnder(tc.pattern, tc.dir); got != tc.want {
			t.Errorf("binaryMayLieUnder(%s, %s) = %v, want %v", tc.pattern, tc.dir, got, tc.want)
		}
	}
}

func TestCheckWorkdir(t *testing.T) {
	p := mustParse(t, withBinaries("include_workdir: true", "/usr/bin/git", "/home/*/work/bin/tool"))
	err := p.CheckWorkdir("/home/agent/work")
	errs, ok := AsErrors(err)
	if !ok || len(errs) != 1 || errs[0].Path != "network_policies.b.binaries[0].path" {
		t.Fatalf("CheckWorkdir = %v", err)
	}
	if err := p.CheckWorkdir("/srv/repo"); err != nil {
		t.Errorf("unrelated workdir rejected: %v", err)
	}
	for _, bad := range []string{"/", "relative/dir", ""} {
		if err := p.CheckWorkdir(bad); err == nil {
			t.Errorf("workdir %q accepted", bad)
		}
	}
	// Without include_workdir the workdir is not writable, so nothing to check.
	q := mustParse(t, withBinaries("include_workdir: false", "/home/*/work/bin/tool"))
	if err := q.CheckWorkdir("/home/agent/work"); err != nil {
		t.Errorf("include_workdir false: %v", err)
	}
}
