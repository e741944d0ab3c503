package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tinyTemplate = `# hub at __HUB_HOST__
version: 1
process:
  run_as_user: "__UID__"
network_policies:
  hub:
    endpoints:
      - host: __HUB_HOST__
        port: __HUB_PORT__
    binaries:
      - path: /usr/bin/__TOOL__
`

func tinyValues() map[string]string {
	return map[string]string{"HUB_HOST": "hub.example.com", "HUB_PORT": "8443", "UID": "1500", "__TOOL__": "curl"}
}

func TestRenderSuccess(t *testing.T) {
	out, err := Render([]byte(tinyTemplate), tinyValues())
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer("__HUB_HOST__", "hub.example.com", "__HUB_PORT__", "8443", "__UID__", "1500", "__TOOL__", "curl").Replace(tinyTemplate)
	if string(out) != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", out, want)
	}
	p := mustParse(t, string(out))
	e := p.NetworkPolicies["hub"].Endpoints[0]
	if e.Host != "hub.example.com" || e.Ports[0] != 8443 || p.Process.RunAsUser != "1500" {
		t.Errorf("policy = %+v %+v", p.Process, e)
	}
}

func TestRenderRefuses(t *testing.T) {
	with := func(k, v string) map[string]string {
		m := tinyValues()
		if v == "\x00delete" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name   string
		tmpl   string
		values map[string]string
		msg    string
	}{
		{"leftover placeholder", tinyTemplate, with("HUB_PORT", "\x00delete"), "no value for __HUB_PORT__"},
		{"unknown key", tinyTemplate, with("MODEL_GATEWAY_HOST", "m.example.com"), "MODEL_GATEWAY_HOST not in the template"},
		{"bad key", tinyTemplate, with("hub-host", "x"), "must be upper-case"},
		{"key twice", tinyTemplate, with("__HUB_HOST__", "other.example.com"), "given twice"},
		{"empty value", tinyTemplate, with("HUB_HOST", ""), "must not be empty"},
		{"newline injection", tinyTemplate, with("HUB_HOST", "x.example.com\n        port: 22"), "newlines"},
		{"colon-space injection", tinyTemplate, with("HUB_HOST", "x: y"), "YAML syntax"},
		{"flow injection", tinyTemplate, with("HUB_HOST", "[a, b]"), "YAML syntax"},
		{"quote breakout", tinyTemplate, with("UID", `1500", "x`), "YAML syntax"},
		{"comment injection", tinyTemplate, with("HUB_HOST", "a.example.com#"), "YAML syntax"},
		{"anchor", tinyTemplate, with("HUB_HOST", "&a"), "YAML syntax"},
		{"leading dash", tinyTemplate, with("HUB_HOST", "-x"), "must not start with"},
		{"placeholder in value", tinyTemplate, with("HUB_HOST", "__UID__"), "placeholder"},
		{"too long", tinyTemplate, with("HUB_HOST", strings.Repeat("a", 300)), "at most"},
		{"rendered policy invalid", tinyTemplate, with("HUB_PORT", "70000"), "1-65535"},
		{"rendered type confusion", tinyTemplate, with("HUB_HOST", "true"), "must be a string"},
		{"value makes binary writable", tinyTemplate + "filesystem_policy:\n  read_write: [/usr/bin/curl]\n", tinyValues(), "under read_write"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Render([]byte(tc.tmpl), tc.values)
			if err == nil {
				t.Fatalf("rendered:\n%s", out)
			}
			if out != nil {
				t.Error("output returned with an error")
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q lacks %q", err, tc.msg)
			}
		})
	}
}

// Even a value the character check would allow cannot change the YAML
// structure; sameShape is the second line of defence.
func TestSameShapeCatchesStructureChange(t *testing.T) {
	tmpl := []byte("a: __X__\nb: 1\n")
	if err := sameShape(tmpl, []byte("a: v\nb: 1\n"), map[string]string{"X": "v"}); err != nil {
		t.Errorf("plain substitution rejected: %v", err)
	}
	if err := sameShape(tmpl, []byte("a: v\nc: 2\nb: 1\n"), map[string]string{"X": "v"}); err == nil {
		t.Error("added key not detected")
	}
	if err := sameShape(tmpl, []byte("a: w\nb: 1\n"), map[string]string{"X": "v"}); err == nil {
		t.Error("changed value not detected")
	}
}

func TestParseSetFlags(t *testing.T) {
	m, err := ParseSetFlags([]string{"A=1", "B=x=y"})
	if err != nil || m["A"] != "1" || m["B"] != "x=y" {
		t.Errorf("m=%v err=%v", m, err)
	}
	for _, bad := range [][]string{{"A"}, {"=1"}, {"A=1", "A=2"}} {
		if _, err := ParseSetFlags(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// A policy that does not parse and still holds placeholders outside its
// comments is reported as an unrendered template with the render command
// (issue 16 item 5); one that mentions a token only in a comment keeps
// its plain field error.
func TestUnrenderedTemplateError(t *testing.T) {
	dir := t.TempDir()
	tmpl, err := os.ReadFile("../../policies/mac-hermes-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "p.yaml")
	os.WriteFile(p, tmpl, 0o600)
	_, err = LoadFile(p)
	var te *TemplateError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "policy-sync render --template "+p) || !strings.Contains(err.Error(), "__MAC_HUB_PORT__") {
		t.Fatalf("LoadFile(template) = %v", err)
	}
	if _, ok := AsErrors(err); !ok {
		t.Error("the field problems are no longer reachable through AsErrors")
	}
	os.WriteFile(p, []byte("# fill __HOST__ in below\nversion: 1\nsurprise: true\n"), 0o600)
	if _, err = LoadFile(p); errors.As(err, &te) || !strings.Contains(err.Error(), "surprise") {
		t.Fatalf("a comment's token made a template error: %v", err)
	}
}
