package sandboxnet

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNeedsAction(t *testing.T) {
	cases := []struct {
		line, level, msg string
		relay            bool
	}{
		{`time=2026-01-01T00:00:00Z level=INFO msg=connection outcome=policy_denied`, "INFO", "connection", false},
		{`time=2026-01-01T00:00:00Z level=DEBUG msg="egress-proxy ready"`, "DEBUG", "egress-proxy ready", false},
		{`time=2026-01-01T00:00:00Z level=WARN msg="policy reload: static sections changed" path=/p`, "WARN", "policy reload: static sections changed", true},
		{`time=2026-01-01T00:00:00Z level=ERROR msg="policy reload rejected; keeping the last-known-good policy" err=x`, "ERROR", "policy reload rejected; keeping the last-known-good policy", true},
		{`{"time":"2026-01-01T00:00:00Z","level":"WARN","msg":"eBPF attribution unavailable"}`, "WARN", "eBPF attribution unavailable", true},
		{`{"time":"2026-01-01T00:00:00Z","level":"INFO","msg":"connection","outcome":"policy_denied"}`, "INFO", "connection", false},
		{`egress-proxy: policy does not load: network_policies.x: bad`, "ERROR", "egress-proxy: policy does not load: network_policies.x: bad", true},
		{`SCHED 0ms: gomaxprocs=2 idleprocs=1`, "", "", false},
		// A host the agent named cannot fake a level: it is quoted.
		{`time=2026-01-01T00:00:00Z level=INFO msg=connection host="x level=ERROR "`, "INFO", "connection", false},
	}
	for _, c := range cases {
		level, msg, relay := needsAction(c.line)
		if level != c.level || msg != c.msg || relay != c.relay {
			t.Errorf("needsAction(%q) = %q, %q, %v; want %q, %q, %v", c.line, level, msg, relay, c.level, c.msg, c.relay)
		}
	}
}

func TestProxyLogRelaysRotatesAndKeepsTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ProxyLogName)
	var sup bytes.Buffer
	l, err := openProxyLog(path, "sbx-1", slog.New(slog.NewTextHandler(&sup, nil)))
	if err != nil {
		t.Fatal(err)
	}
	l.started()
	l.Write([]byte("time=2026-01-01T00:00:00Z level=WARN msg=\"before ready\"\n"))
	if sup.Len() != 0 {
		t.Fatalf("relayed before the proxy was ready: %s", sup.String())
	}
	l.started() // a failed start: what waited is dropped
	l.Write([]byte("time=2026-01-01T00:00:00Z level=WARN msg=\"eBPF attribution unavailable\"\n"))
	l.isReady()
	if !strings.Contains(sup.String(), "eBPF attribution unavailable") || strings.Contains(sup.String(), "before ready") {
		t.Fatalf("after the start that succeeded: %s", sup.String())
	}
	// A restarted proxy gets a fresh budget.
	l.started()
	l.isReady()
	sup.Reset()
	// Split writes are joined into lines.
	l.Write([]byte("time=2026-01-01T00:00:00Z level=INFO msg=connection outcome=policy_de"))
	l.Write([]byte("nied\ntime=2026-01-01T00:00:00Z level=WARN msg=\"capabilities not dropped\"\n"))
	for i := 0; i < relayLimit+5; i++ {
		l.Write([]byte("time=2026-01-01T00:00:00Z level=WARN msg=\"accept failed; backing off\"\n"))
	}
	got := sup.String()
	if strings.Contains(got, "policy_denied") || !strings.Contains(got, `msg="egress-proxy: capabilities not dropped" sandbox=sbx-1 see="sandbox-supervisor logs --proxy sbx-1"`) {
		t.Errorf("relayed:\n%s", got)
	}
	if n := strings.Count(got, "level=WARN"); n != relayLimit+1 || !strings.Contains(got, "further warnings only in its log") {
		t.Errorf("relayed %d warnings, want %d and a last one saying the rest are in the log:\n%s", n, relayLimit+1, got)
	}
	if tail := l.Tail(); strings.Count(tail, " | ") != tailLines-1 {
		t.Errorf("tail %q, want the last %d lines", tail, tailLines)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "\ntime=2026-01-01T00:00:00Z level=INFO msg=connection outcome=policy_denied\n") {
		t.Errorf("log file starts %q", b[:min(len(b), 100)])
	}
	// Past the cap the file moves to .1 and a new one starts.
	l.size = proxyLogMax - 10
	l.Write([]byte("time=2026-01-01T00:00:01Z level=INFO msg=after-rotation\n"))
	l.Close()
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if !bytes.Equal(old, b) || string(cur) != "time=2026-01-01T00:00:01Z level=INFO msg=after-rotation\n" {
		t.Errorf("after rotation: .1 %d bytes (want %d), current %q", len(old), len(b), cur)
	}
}
