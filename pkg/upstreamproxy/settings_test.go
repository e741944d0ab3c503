package upstreamproxy

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// secret is the test credential's password: no error may contain it.
const secret = "hunter2-Secret"

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in, want string
		secure   bool
	}{
		{"http://proxy.corp.example:3128", "http://proxy.corp.example:3128", false},
		{"  https://Proxy.Corp.Example:443/ ", "https://Proxy.Corp.Example:443", true},
		{"HTTP://10.0.0.1:80", "http://10.0.0.1:80", false},
		{"http://[2001:db8::1]:3128", "http://[2001:db8::1]:3128", false},
	} {
		a, err := ParseURL(c.in)
		if err != nil || a.String() != c.want || a.Secure != c.secure {
			t.Errorf("ParseURL(%q) = %v %v %v; want %s", c.in, a, a.Secure, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "must not be empty"},
		{"   ", "must not be empty"},
		{"proxy.corp.example:3128", "has no scheme"},
		{"alice:" + secret + "@proxy:3128", "has no scheme"},
		{"http://alice:" + secret + "@proxy:3128", "must not hold credentials"},
		{"http://alice@proxy:3128", "must not hold credentials"},
		{"https://alice:" + secret + "@proxy:3128/path", "must not hold credentials"},
		{"socks5://proxy:1080", `unsupported scheme "socks5"`},
		{"ftp://proxy:21", `unsupported scheme "ftp"`},
		{"h t://proxy:21", "malformed scheme"},
		{"http://proxy", "has no port"},
		{"http://proxy:", "has no port"},
		{"http://[2001:db8::1]", "has no port"},
		{"http://proxy:0", "want 1-65535"},
		{"http://proxy:70000", "want 1-65535"},
		{"http://proxy:3128/corp", "must not have a path"},
		{"http://proxy:3128?x=1", "must not have a query"},
		{"http://proxy:3128/?", "must not have a query"},
		{"http://proxy:3128#frag", "must not have a fragment"},
		{"http://:3128", "has no host"},
		{"http://[fe80::1%25eth0]:3128", "IPv6 zone"},
	} {
		_, err := ParseURL(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseURL(%q) = %v; want an error containing %q", c.in, err, c.want)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("ParseURL(%q): the error repeats the credential: %v", c.in, err)
		}
	}
}

func TestParseCredential(t *testing.T) {
	for in, want := range map[string]string{
		"alice:" + secret + "\n": "alice:" + secret,
		"  alice:a:b:c \r\n":     "alice:a:b:c",
		"alice:":                 "alice:",
		"dom\\user:p@ss w0rd é":  "dom\\user:p@ss w0rd é",
	} {
		got, err := ParseCredential(in)
		if err != nil || got != want {
			t.Errorf("ParseCredential(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                                  "is empty",
		" \n\t":                             "is empty",
		"alice:" + secret + "\nbob:x":       "control characters",
		"alice:" + secret + "\r\nX-Evil: 1": "control characters",
		"alice:\x00" + secret:               "control characters",
		"alice\t:" + secret:                 "control characters",
		"alice" + secret:                    "no ':'",
		":" + secret:                        "the user is empty",
	} {
		_, err := ParseCredential(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCredential(%q) = %v; want an error containing %q", in, err, want)
		} else if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "alice") {
			t.Errorf("ParseCredential(%q): the error repeats the credential: %v", in, err)
		}
	}
}

// writeSecret writes a credential file of the given mode.
func writeSecret(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "proxy-auth")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadCredentialFile(t *testing.T) {
	p := writeSecret(t, "alice:"+secret+"\n", 0o600)
	h, err := ReadCredentialFile(p)
	if err != nil || h != "Basic YWxpY2U6aHVudGVyMi1TZWNyZXQ=" {
		t.Fatalf("ReadCredentialFile = %q, %v", h, err)
	}
	if h, err := ReadCredentialFile(writeSecret(t, "alice:"+secret, 0o400)); err != nil || h == "" {
		t.Errorf("mode 0400 refused: %v", err)
	}
	cases := map[string]struct {
		path string
		want string
	}{
		"group-readable": {writeSecret(t, "alice:"+secret, 0o640), "mode 0640: want a root-only file"},
		"world-readable": {writeSecret(t, "alice:"+secret, 0o604), "mode 0604"},
		"empty":          {writeSecret(t, "\n", 0o600), "is empty"},
		"two lines":      {writeSecret(t, "alice:"+secret+"\nbob:x\n", 0o600), "control characters"},
		"no colon":       {writeSecret(t, secret, 0o600), "not of the form user:pass"},
		"too long":       {writeSecret(t, "alice:"+strings.Repeat("x", MaxCredentialBytes), 0o600), "bytes"},
		"missing":        {filepath.Join(t.TempDir(), "nope"), "no such file"},
		"directory":      {t.TempDir(), "not a regular file"},
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(p, link)
	if h, err := ReadCredentialFile(link); err != nil || h == "" {
		t.Errorf("a link of this process's own user: %v", err)
	}
	for name, c := range cases {
		_, err := ReadCredentialFile(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", name, err, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: the error does not name the file: %v", name, err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error repeats the credential: %v", name, err)
		}
	}
}

// settings parses args as a binary's flags would.
func settings(t *testing.T, args ...string) *Settings {
	t.Helper()
	var s Settings
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	s.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &s
}

// TestLoadFailsClosed: every setting that is present but invalid is an
// error naming its flag, each with its own message; a usage error (the
// flags themselves) matches ErrUsage and a file error does not.
func TestLoadFailsClosed(t *testing.T) {
	dir := t.TempDir()
	auth := writeSecret(t, "alice:"+secret+"\n", 0o600)
	loose := writeSecret(t, "alice:"+secret+"\n", 0o644)
	noCert := filepath.Join(dir, "no-cert.pem")
	os.WriteFile(noCert, []byte("not a certificate\n"), 0o644)
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, testCAPEM(t), 0o644)
	const u = "--upstream-proxy=http://127.0.0.1:3128"
	cases := []struct {
		name  string
		args  []string
		want  string
		usage bool
	}{
		{"empty URL", []string{"--upstream-proxy="}, "--upstream-proxy must not be empty", true},
		{"inline credential", []string{"--upstream-proxy=http://alice:" + secret + "@proxy:3128"}, "--upstream-proxy must not hold credentials", true},
		{"no scheme", []string{"--upstream-proxy=proxy:3128"}, "--upstream-proxy has no scheme", true},
		{"no port", []string{"--upstream-proxy=http://proxy"}, "--upstream-proxy has no port", true},
		{"path", []string{"--upstream-proxy=http://proxy:3128/x"}, "--upstream-proxy must not have a path", true},
		{"query", []string{"--upstream-proxy=http://proxy:3128?a=b"}, "--upstream-proxy must not have a query", true},
		{"fragment", []string{"--upstream-proxy=http://proxy:3128#f"}, "--upstream-proxy must not have a fragment", true},
		{"scheme", []string{"--upstream-proxy=socks5://proxy:1080"}, "--upstream-proxy has the unsupported scheme", true},
		{"empty auth file", []string{u, "--upstream-proxy-auth-file="}, "--upstream-proxy-auth-file must not be empty", true},
		{"empty CA bundle", []string{u, "--upstream-proxy-ca-bundle="}, "--upstream-proxy-ca-bundle must not be empty", true},
		{"empty NO_PROXY", []string{u, "--upstream-proxy-no-proxy="}, "--upstream-proxy-no-proxy must not be empty", true},
		{"bad NO_PROXY", []string{u, "--upstream-proxy-no-proxy=a.test,,b.test"}, "--upstream-proxy-no-proxy: entry 2", true},
		{"insecure credential", []string{u, "--upstream-proxy-auth-file", auth}, "sends the credential as cleartext", true},
		{"insecure credential, false", []string{u, "--upstream-proxy-auth-file", auth, "--upstream-proxy-allow-insecure=false"}, "sends the credential as cleartext", true},
		{"acknowledgement alone", []string{u, "--upstream-proxy-allow-insecure"}, "--upstream-proxy-allow-insecure is given without --upstream-proxy-auth-file", true},
		{"auth file without URL", []string{"--upstream-proxy-auth-file", auth}, "--upstream-proxy-auth-file is given but --upstream-proxy is not", true},
		{"NO_PROXY without URL", []string{"--upstream-proxy-no-proxy=a.test"}, "--upstream-proxy-no-proxy is given but --upstream-proxy is not", true},
		{"CA without URL", []string{"--upstream-proxy-ca-bundle", ca}, "--upstream-proxy-ca-bundle is given but --upstream-proxy is not", true},
		{"by hostname without URL", []string{"--upstream-proxy-connect-by-hostname"}, "--upstream-proxy-connect-by-hostname is given but --upstream-proxy is not", true},
		{"acknowledgement without URL", []string{"--upstream-proxy-allow-insecure"}, "--upstream-proxy-allow-insecure is given without --upstream-proxy-auth-file (and without --upstream-proxy)", true},
		{"unreadable CA", []string{u, "--upstream-proxy-ca-bundle", filepath.Join(dir, "nope.pem")}, "--upstream-proxy-ca-bundle: open", false},
		{"certificate-free CA", []string{u, "--upstream-proxy-ca-bundle", noCert}, "holds no PEM certificate", false},
		{"unreadable auth file", []string{u, "--upstream-proxy-allow-insecure", "--upstream-proxy-auth-file", filepath.Join(dir, "nope")}, "--upstream-proxy-auth-file: ", false},
		{"loose auth file", []string{u, "--upstream-proxy-allow-insecure", "--upstream-proxy-auth-file", loose}, "want a root-only file", false},
	}
	seen := map[string]string{}
	for _, c := range cases {
		s := settings(t, c.args...)
		ch, err := s.Load()
		if err == nil || ch != nil {
			t.Errorf("%s: Load = %v, %v; want an error", c.name, ch, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q; want it to contain %q", c.name, msg, c.want)
		}
		if errors.Is(err, ErrUsage) != c.usage {
			t.Errorf("%s: errors.Is(ErrUsage) = %v; want %v", c.name, !c.usage, c.usage)
		}
		if cerr := s.Check(); c.usage != (cerr != nil) {
			t.Errorf("%s: Check = %v; want an error only for a usage error", c.name, cerr)
		}
		if strings.Contains(msg, secret) {
			t.Errorf("%s: the error repeats the credential: %s", c.name, msg)
		}
		if other, dup := seen[msg]; dup && c.name != "insecure credential, false" {
			t.Errorf("%s and %s share the message %q", c.name, other, msg)
		}
		seen[msg] = c.name
	}
	if ch, err := settings(t).Load(); ch != nil || err != nil {
		t.Errorf("no flag: %v, %v; want no chain", ch, err)
	}
	ch, err := settings(t, "--upstream-proxy=https://proxy.test:3129", "--upstream-proxy-auth-file", auth,
		"--upstream-proxy-ca-bundle", ca, "--upstream-proxy-no-proxy", "a.test, 10.0.0.0/8").Load()
	if err != nil || !ch.Secure || !ch.HasCredential() || len(ch.CAPEM()) == 0 || !slices.Equal(ch.NoProxy.Entries(), []string{"a.test", "10.0.0.0/8"}) {
		t.Fatalf("https proxy with a credential (no acknowledgement needed): %+v, %v", ch, err)
	}
	// Printing the chain, even with every field, never shows the
	// credential.
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, ch); strings.Contains(out, "YWxpY2U6aHVudGVyMi1TZWNyZXQ") || strings.Contains(out, secret) {
			t.Errorf("fmt %s of the chain shows the credential: %s", f, out)
		}
	}
}

func TestArgsRoundTrip(t *testing.T) {
	s := settings(t, "--upstream-proxy", "http://p.test:3128", "--upstream-proxy-auth-file", "/etc/a", "--upstream-proxy-allow-insecure",
		"--upstream-proxy-no-proxy", "a.test", "--upstream-proxy-ca-bundle", "/etc/ca.pem", "--upstream-proxy-connect-by-hostname=false")
	args := s.Args()
	want := []string{"--upstream-proxy", "http://p.test:3128", "--upstream-proxy-auth-file", "/etc/a", "--upstream-proxy-ca-bundle", "/etc/ca.pem",
		"--upstream-proxy-no-proxy", "a.test", "--upstream-proxy-allow-insecure=true", "--upstream-proxy-connect-by-hostname=false"}
	if !slices.Equal(args, want) {
		t.Fatalf("Args = %q; want %q", args, want)
	}
	if again := settings(t, args...); *again != *s {
		t.Errorf("the arguments parse to %+v; want %+v", *again, *s)
	}
	if a := settings(t).Args(); len(a) != 0 {
		t.Errorf("no flags: %q", a)
	}
}
