package ssrf

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const sampleHosts = `# static names for the fake internet
198.51.100.10   api.example.test  API-Alias.example.test.
2001:db8::10    api.example.test
198.51.100.11   other.example.test   # trailing comment
127.0.0.1       evil.example.test
198.51.100.10   api.example.test

   # indented comment
`

func TestHostsResolver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(sampleHosts), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewHostsResolver(path)
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 4 {
		t.Errorf("Len = %d; want 4", r.Len())
	}
	ctx := context.Background()
	for _, tc := range []struct {
		host string
		want []string
	}{
		{"api.example.test", []string{"198.51.100.10", "2001:db8::10"}},
		{"API.Example.Test.", []string{"198.51.100.10", "2001:db8::10"}},
		{"api-alias.example.test", []string{"198.51.100.10"}},
		{"other.example.test", []string{"198.51.100.11"}},
		{"evil.example.test", []string{"127.0.0.1"}},
	} {
		got, err := r.LookupNetIP(ctx, tc.host)
		if err != nil {
			t.Errorf("LookupNetIP(%s): %v", tc.host, err)
			continue
		}
		var gs []string
		for _, a := range got {
			gs = append(gs, a.String())
		}
		if !slices.Equal(gs, tc.want) {
			t.Errorf("LookupNetIP(%s) = %v; want %v", tc.host, gs, tc.want)
		}
	}
	// Callers may modify the result without changing the table.
	got, _ := r.LookupNetIP(ctx, "other.example.test")
	got[0] = netip.MustParseAddr("127.0.0.1")
	if again, _ := r.LookupNetIP(ctx, "other.example.test"); again[0].String() != "198.51.100.11" {
		t.Errorf("table modified through a result: %v", again)
	}
	// Not in the file: not found, no fallback to DNS.
	for _, h := range []string{"localhost", "example.com", "198.51.100.10"} {
		_, err := r.LookupNetIP(ctx, h)
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("LookupNetIP(%s) = %v; want not-found DNSError", h, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.LookupNetIP(cctx, "api.example.test"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

func TestHostsResolverErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"198.51.100.300 x.test\n", `line 1: "198.51.100.300" is not an IP address`},
		{"# ok\n0x7f.1 x.test\n", `line 2: "0x7f.1" is not an IP address`},
		{"198.51.100.1\n", "line 1: address 198.51.100.1 has no host names"},
		{"fe80::1%eth0 x.test\n", "line 1: \"fe80::1%eth0\": IPv6 zones are not supported"},
		{"198.51.100.1 .\n", `line 1: "." is not a host name`},
		{"198.51.100.1 " + strings.Repeat("a", 70000) + "\n", "line 1: bufio.Scanner: token too long"},
	} {
		_, err := ParseHosts(strings.NewReader(tc.text))
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseHosts(%.40q) = %v; want %q", tc.text, err, tc.want)
		}
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := NewHostsResolver(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(bad, []byte("x y\n"), 0o600)
	if _, err := NewHostsResolver(bad); err == nil || !strings.Contains(err.Error(), bad+": line 1") {
		t.Errorf("bad file error does not name file and line: %v", err)
	}
}
