package probe

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/policies"
)

func TestCatalogGroups(t *testing.T) {
	n := map[string]int{}
	seen := map[string]bool{}
	for _, s := range Catalog() {
		if seen[s.Name] {
			t.Errorf("check %s listed twice", s.Name)
		}
		seen[s.Name] = true
		if !slices.Contains(Groups, s.Group) {
			t.Errorf("check %s: unknown group %q", s.Name, s.Group)
		}
		if s.Expected == "" {
			t.Errorf("check %s: no expectation", s.Name)
		}
		n[s.Group]++
	}
	for _, g := range Groups {
		if n[g] < MinChecksPerGroup {
			t.Errorf("group %s has %d checks, want >= %d", g, n[g], MinChecksPerGroup)
		}
	}
	// Report order follows Groups.
	cat := Catalog()
	for i := 1; i < len(cat); i++ {
		if slices.Index(Groups, cat[i].Group) < slices.Index(Groups, cat[i-1].Group) {
			t.Fatalf("catalogue out of group order at %s", cat[i].Name)
		}
	}
}

func passing() []Result {
	var rs []Result
	for _, s := range Catalog() {
		rs = append(rs, Result{Check: s.Name, Group: s.Group, Expected: s.Expected, Observed: "as expected", OK: true})
	}
	return rs
}

func TestEvaluate(t *testing.T) {
	if v := Evaluate(Catalog(), passing(), ""); !v.OK || v.Result != OKLine || len(v.Failed) != 0 {
		t.Fatalf("all passing: %+v", v)
	}
	cases := map[string]func([]Result) []Result{
		"one failed": func(rs []Result) []Result { rs[3].OK = false; return rs },
		"one missing": func(rs []Result) []Result {
			return append(rs[:2], rs[3:]...)
		},
		"reported twice":  func(rs []Result) []Result { return append(rs, rs[0]) },
		"unknown check":   func(rs []Result) []Result { return append(rs, Result{Check: "made_up", Group: GroupSeccomp, OK: true}) },
		"wrong group":     func(rs []Result) []Result { rs[0].Group = GroupEgress; return rs },
		"nothing at all":  func([]Result) []Result { return nil },
		"last one failed": func(rs []Result) []Result { rs[len(rs)-1].OK = false; return rs },
	}
	for name, mutate := range cases {
		v := Evaluate(Catalog(), mutate(passing()), "sandbox-supervisor exited 125")
		if v.OK || v.Result != FailedLine || len(v.Failed) == 0 {
			t.Errorf("%s: %+v, want failed", name, v.Result)
		}
	}
	v := Evaluate(Catalog(), nil, "sandbox-supervisor exited 125")
	if len(v.Missing) != len(Catalog()) || !strings.Contains(v.Checks[0].Observed, "exited 125") {
		t.Errorf("nothing reported: missing %d of %d, observed %q", len(v.Missing), len(Catalog()), v.Checks[0].Observed)
	}
	if v := Evaluate(nil, nil, ""); v.OK {
		t.Error("an empty catalogue must not pass")
	}
}

func TestVerdictRoundTrip(t *testing.T) {
	v := Evaluate(Catalog(), passing(), "")
	var b bytes.Buffer
	if err := v.Write(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if lines[len(lines)-1] != OKLine || len(lines) != len(Catalog())+1 {
		t.Fatalf("output ends %q with %d lines", lines[len(lines)-1], len(lines))
	}
	back, err := ParseResults(&b)
	if err != nil || len(back) != len(Catalog()) {
		t.Fatalf("parse back: %d results, %v", len(back), err)
	}
	for _, want := range []string{`"check":`, `"group":`, `"expected":`, `"observed":`, `"ok":true`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("check line %s lacks %s", lines[0], want)
		}
	}
}

func TestProbePolicy(t *testing.T) {
	def, err := policy.Parse(policies.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	text, canary, err := ProbePolicy(def)
	if err != nil || !canary {
		t.Fatalf("default: canary=%v err=%v", canary, err)
	}
	p, err := policy.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.NetworkPolicies) != 1 || p.NetworkPolicies[CanaryName] == nil {
		t.Fatalf("probe policy network entries: %v", p.NetworkPolicies)
	}
	ep := p.NetworkPolicies[CanaryName].Endpoints[0]
	if !strings.HasSuffix(ep.Host, ".invalid") {
		t.Errorf("canary host %q is not a reserved name", ep.Host)
	}
	if !slices.Equal(p.Filesystem.ReadOnly, def.Filesystem.ReadOnly) || !slices.Equal(p.Filesystem.ReadWrite, def.Filesystem.ReadWrite) ||
		p.Landlock != def.Landlock || p.Process != def.Process || p.Filesystem.IncludeWorkdir != def.Filesystem.IncludeWorkdir {
		t.Errorf("static sections changed:\n%s", text)
	}
	// A policy with network entries is used as it is.
	p.NetworkPolicies[CanaryName].Name = "operator_entry"
	text2, canary2, err := ProbePolicy(p)
	if err != nil || canary2 {
		t.Fatalf("with entries: canary=%v err=%v", canary2, err)
	}
	p2, _ := policy.Parse(text2)
	if p2.Checksum() != p.Checksum() {
		t.Error("a policy with network entries was changed")
	}
}

func TestTargetsFor(t *testing.T) {
	tg := TargetsFor(PolicyPaths{ReadOnly: []string{"/usr", "/etc", "/var/lib"}, ReadWrite: []string{"/tmp"}, IncludeWorkdir: true, Workdir: "/srv/work"})
	for _, p := range tg.Protected {
		if p == "/usr" || p == "/etc" || strings.HasPrefix(p, "/var/lib") || p == "/srv" && false {
			t.Errorf("protected %s is granted by the policy", p)
		}
	}
	if tg.ReadOnly != "/usr" || tg.Writable != "/srv/work" {
		t.Errorf("targets %+v", tg)
	}
	// Everything granted: nothing protected remains.
	if tg := TargetsFor(PolicyPaths{ReadOnly: []string{"/"}}); len(tg.Protected) != 0 || tg.WritableOutside != "" {
		t.Errorf("read_only [/]: %+v", tg)
	}
	args := strings.Join(DefaultTargets().Args(), " ")
	if !strings.Contains(args, "--protected /root,/var") || !strings.Contains(args, "--read-only-path /usr") {
		t.Errorf("args %s", args)
	}
}
