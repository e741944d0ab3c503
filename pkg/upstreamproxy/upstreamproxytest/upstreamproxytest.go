// Package upstreamproxytest holds the table of invalid --upstream-proxy
// flag combinations that both binaries that take the flags (egress-proxy
// and sandbox-supervisor) must refuse at start, each with its own
// message naming the flag. Imported only by tests.
package upstreamproxytest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Password is the credential's password in the table's files: no
// message may hold it.
const Password = "Tbl-s3cret-pw"

// Case is one invalid combination.
type Case struct {
	Name string
	Args []string
	// Want is a fragment of the message that names what is wrong.
	Want string
	// File is true when the fault is in a file the flags name (read at
	// start, exit 1 for egress-proxy, 125 for sandbox-supervisor run)
	// rather than in the flags themselves (exit 2).
	File bool
}

// Cases writes the files the table needs into dir and returns it.
func Cases(t testing.TB, dir string) []Case {
	t.Helper()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	auth := write("auth", "alice:"+Password+"\n", 0o600)
	empty := write("auth-empty", "\n", 0o600)
	control := write("auth-control", "alice:"+Password+"\r\nX-Injected: 1\n", 0o600)
	noColon := write("auth-no-colon", "alice-"+Password+"\n", 0o600)
	loose := write("auth-loose", "alice:"+Password+"\n", 0o644)
	noCert := write("no-cert.pem", "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n", 0o644)
	missing := filepath.Join(dir, "missing")
	const u = "--upstream-proxy=http://127.0.0.1:3128"
	const ack = "--upstream-proxy-allow-insecure"
	return []Case{
		{"empty URL", []string{"--upstream-proxy="}, "--upstream-proxy must not be empty", false},
		{"inline user:pass", []string{"--upstream-proxy=http://alice:" + Password + "@proxy.test:3128"}, "--upstream-proxy must not hold credentials (user:pass@)", false},
		{"missing scheme", []string{"--upstream-proxy=proxy.test:3128"}, "--upstream-proxy has no scheme", false},
		{"missing port", []string{"--upstream-proxy=http://proxy.test"}, "--upstream-proxy has no port", false},
		{"path", []string{"--upstream-proxy=http://proxy.test:3128/proxy"}, "--upstream-proxy must not have a path", false},
		{"query", []string{"--upstream-proxy=http://proxy.test:3128?x=1"}, "--upstream-proxy must not have a query", false},
		{"fragment", []string{"--upstream-proxy=http://proxy.test:3128#x"}, "--upstream-proxy must not have a fragment", false},
		{"unsupported scheme", []string{"--upstream-proxy=socks5://proxy.test:1080"}, `--upstream-proxy has the unsupported scheme "socks5"`, false},
		{"empty auth file", []string{u, ack, "--upstream-proxy-auth-file="}, "--upstream-proxy-auth-file must not be empty", false},
		{"empty CA bundle", []string{u, "--upstream-proxy-ca-bundle="}, "--upstream-proxy-ca-bundle must not be empty", false},
		{"empty NO_PROXY", []string{u, "--upstream-proxy-no-proxy="}, "--upstream-proxy-no-proxy must not be empty", false},
		{"malformed NO_PROXY", []string{u, "--upstream-proxy-no-proxy=corp.test,*"}, `--upstream-proxy-no-proxy: entry 2 "*"`, false},
		{"auth file without acknowledgement", []string{u, "--upstream-proxy-auth-file", auth}, "--upstream-proxy-auth-file sends the credential as cleartext", false},
		{"acknowledgement without auth file", []string{u, ack}, "--upstream-proxy-allow-insecure is given without --upstream-proxy-auth-file:", false},
		{"auth file without URL", []string{"--upstream-proxy-auth-file", auth}, "--upstream-proxy-auth-file is given but --upstream-proxy is not", false},
		{"NO_PROXY without URL", []string{"--upstream-proxy-no-proxy=corp.test"}, "--upstream-proxy-no-proxy is given but --upstream-proxy is not", false},
		{"CA bundle without URL", []string{"--upstream-proxy-ca-bundle", noCert}, "--upstream-proxy-ca-bundle is given but --upstream-proxy is not", false},
		{"connect-by-hostname without URL", []string{"--upstream-proxy-connect-by-hostname"}, "--upstream-proxy-connect-by-hostname is given but --upstream-proxy is not", false},
		{"unreadable CA bundle", []string{u, "--upstream-proxy-ca-bundle", missing}, "--upstream-proxy-ca-bundle: open " + missing, true},
		{"certificate-free CA bundle", []string{u, "--upstream-proxy-ca-bundle", noCert}, "--upstream-proxy-ca-bundle: " + noCert + " holds no PEM certificate", true},
		{"unreadable auth file", []string{u, ack, "--upstream-proxy-auth-file", missing}, "--upstream-proxy-auth-file: " + missing, true},
		{"auth file readable by others", []string{u, ack, "--upstream-proxy-auth-file", loose}, "mode 0644: want a root-only file", true},
		{"empty credential", []string{u, ack, "--upstream-proxy-auth-file", empty}, "the credential is empty", true},
		{"credential with control characters", []string{u, ack, "--upstream-proxy-auth-file", control}, "the credential contains control characters", true},
		{"credential not user:pass", []string{u, ack, "--upstream-proxy-auth-file", noColon}, "the credential is not of the form user:pass", true},
	}
}

// Check runs every case through run (the binary with the case's flags;
// it returns the exit code and what the binary wrote to stderr) and
// checks that a fault in the flags exits usage and one in a file exits
// file, that the last line of stderr names what is wrong, that the
// password is nowhere in stderr, and that no two cases share a message.
func Check(t *testing.T, cases []Case, usage, file int, run func(Case) (code int, stderr string)) {
	t.Helper()
	seen := map[string]string{}
	for _, c := range cases {
		code, stderr := run(c)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		msg := lines[len(lines)-1]
		want := usage
		if c.File {
			want = file
		}
		if code != want || !strings.Contains(msg, c.Want) {
			t.Errorf("%s: exit %d, %q; want exit %d and %q", c.Name, code, msg, want, c.Want)
		}
		if strings.Contains(stderr, Password) {
			t.Errorf("%s: the credential is in the output: %s", c.Name, stderr)
		}
		if other, ok := seen[msg]; ok {
			t.Errorf("%s and %s give the same message %q", c.Name, other, msg)
		}
		seen[msg] = c.Name
	}
}

// Exec runs bin with args (bounded to 30 s) and returns its exit code
// (-1 when it did not exit) and stderr.
func Exec(bin string, args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stderr.String()
	}
	if err != nil {
		return -1, stderr.String() + err.Error()
	}
	return 0, stderr.String()
}
