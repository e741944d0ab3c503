package nettest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFormatHosts(t *testing.T) {
	b, err := FormatHosts(map[string]string{
		"b.test":        "2001:db8::10",
		"A.test":        "198.51.100.10",
		"loopback.ssrf": "127.0.0.1",
		"mapped.test":   "::ffff:198.51.100.11",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "# written by palisade nettest\n" +
		"198.51.100.10\ta.test\n" +
		"2001:db8::10\tb.test\n" +
		"127.0.0.1\tloopback.ssrf\n" +
		"198.51.100.11\tmapped.test\n"
	if string(b) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b, want)
	}
	for name, addr := range map[string]string{"": "1.2.3.4", "a b": "1.2.3.4", "x#y": "1.2.3.4", "ok.test": "example.com", "ok2.test": ""} {
		_, err := FormatHosts(map[string]string{name: addr})
		if err == nil {
			t.Errorf("FormatHosts(%q: %q) accepted", name, addr)
		} else if !strings.Contains(err.Error(), "nettest: hosts") {
			t.Errorf("error does not say what failed: %v", err)
		}
	}
}

func TestWriteHostsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hosts")
	if err := WriteHostsFile(p, map[string]string{"allowed.test": "198.51.100.10"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !strings.HasSuffix(string(b), "198.51.100.10\tallowed.test\n") {
		t.Fatalf("%q %v", b, err)
	}
	if err := WriteHostsFile(p, map[string]string{"bad name": "198.51.100.10"}); err == nil {
		t.Fatal("bad name accepted")
	}
	if b2, _ := os.ReadFile(p); string(b2) != string(b) {
		t.Fatal("a failed write changed the file")
	}
}
