package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/actionevent"
	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
)

func ocsfLine(i int) string {
	return fmt.Sprintf(`{"class_uid":4001,"class_name":"Network Activity","activity_id":1,"time":%d,"severity_id":1,"action_id":%d,"disposition_id":%d,"metadata":{"version":"1.8.0","uid":"sbx-drill","product":{"name":"palisade egress-proxy"}},"actor":{"process":{"pid":%d,"name":"git-remote-https","file":{"path":"/usr/lib/git-core/git-remote-https"}}},"dst_endpoint":{"hostname":"github.com","ip":"140.82.112.3","port":443},"firewall_rule":{"name":"github"},"policy":{"name":"fleet","uid":"sha256:9b74c9897bac770ffc029102a200c5de9b74c9897bac770ffc029102a200c5de"},"message":"connection %d"}`,
		1767225600000+i, 1+i%2, 1+i%2, 1000+i%30000, i)
}

func TestHelpHasExamples(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, strings.NewReader(""), &out, &errb); err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"Usage: ocsf-collector", "Examples:", "--input", "--hub", "--otlp-endpoint", "--metrics-listen", "--once"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if out.Len() != 0 {
		t.Errorf("--help wrote to stdout: %q", out.String())
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "tok")
	os.WriteFile(tok, []byte("x\n"), 0o600)
	t.Setenv("MAC_OPENSHELL_EVENTS_FILE", "")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--stdout"}, "MAC_OPENSHELL_EVENTS_FILE"},
		{[]string{"--input", "x.log"}, "no destination"},
		{[]string{"--input", "a[", "--stdout"}, "bad glob"},
		{[]string{"--input", "x", "--hub", "http://h"}, "--agent-id"},
		{[]string{"--input", "x", "--hub", "http://h", "--agent-id", "a"}, "--token-file"},
		{[]string{"--input", "x", "--hub", "ftp://h", "--agent-id", "a", "--token-file", tok}, "scheme"},
		{[]string{"--input", "x", "--stdout", "--agent-id", "../a"}, "--agent-id"},
		{[]string{"--input", "x", "--stdout", "--batch-size", "0"}, "--batch-size"},
		{[]string{"--input", "x", "--stdout", "--flush-interval", "0s"}, "--flush-interval"},
		{[]string{"--input", "x", "--otlp-endpoint", "nope"}, "otlp-endpoint"},
		{[]string{"--input", "x", "--stdout", "--log-format", "xml"}, "--log-format"},
		{[]string{"--input", "x", "--stdout", "--token-file", tok}, "only used with --hub"},
		{[]string{"--input", "x", "--stdout", "extra"}, "unexpected argument"},
		{[]string{"--bogus"}, "bogus"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		err := run(context.Background(), c.args, strings.NewReader(""), &out, &errb)
		if cli.Code(err) != cli.ExitUsage || !strings.Contains(err.Error()+errb.String(), c.want) {
			t.Errorf("%v: exit %d err %v, want usage error mentioning %q", c.args, cli.Code(err), err, c.want)
		}
	}
}

func TestStdinToStdoutAndHub(t *testing.T) {
	srv := hubtest.Start(t)
	dir := t.TempDir()
	tf, _ := srv.TokenFile(dir, "agent-1")
	var in strings.Builder
	for i := 0; i < 300; i++ {
		in.WriteString(ocsfLine(i) + "\n")
	}
	in.WriteString("garbage\n")
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"--input", "-", "--stdout", "--hub", srv.URL, "--agent-id", "agent-1", "--token-file", tf,
		"--spool", filepath.Join(dir, "spool"), "--flush-interval", "20ms", "--log-format", "json"}, strings.NewReader(in.String()), &out, &errb)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	sc := bufio.NewScanner(&out)
	n := 0
	for sc.Scan() {
		r, err := actionevent.Parse(sc.Bytes())
		if err != nil || r.EventID != actionevent.ID("agent-1", []byte(ocsfLine(n))) {
			t.Fatalf("stdout line %d: %v %+v", n, err, r)
		}
		n++
	}
	if n != 300 || srv.Stats().Distinct != 300 {
		t.Errorf("stdout %d records, hub %d, want 300", n, srv.Stats().Distinct)
	}
	if !strings.Contains(errb.String(), `"dead_letters":1`) || !strings.Contains(errb.String(), `"level":"WARN"`) {
		t.Errorf("stderr lacks the dead-letter summary:\n%s", errb.String())
	}
	tok, _ := os.ReadFile(tf)
	if strings.Contains(errb.String()+out.String(), strings.TrimSpace(string(tok))) {
		t.Error("the token appears in the output")
	}
}

func TestMetricsEndpoint(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "events.log")
	os.WriteFile(in, []byte(ocsfLine(1)+"\nbad\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--input", in, "--stdout", "--spool", filepath.Join(dir, "spool"), "--metrics-listen", "127.0.0.1:0", "--poll-interval", "20ms"}, nil, io.Discard, &errb)
	}()
	var url string
	deadline := time.Now().Add(10 * time.Second)
	for url == "" && time.Now().Before(deadline) {
		for _, l := range strings.Split(errb.String(), "\n") {
			if i := strings.Index(l, "url=http://"); i >= 0 {
				url = strings.Fields(l[i+4:])[0]
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if url == "" {
		t.Fatalf("no metrics URL logged:\n%s", errb.String())
	}
	var body string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if strings.Contains(body, "ocsf_collector_dead_letters_total 1") {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"ocsf_collector_lines_read_total 2", "ocsf_collector_records_total 1", "ocsf_collector_dead_letters_total 1", "ocsf_collector_spool_bytes 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("SIGTERM-equivalent shutdown: %v", err)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
