package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
)

func invoke(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, args, strings.NewReader(""), &out, &errb)
	if err != nil {
		errb.WriteString("error: " + err.Error() + "\n")
	}
	return out.String(), errb.String(), cli.Code(err)
}

func TestHelpHasExamplesForBothModes(t *testing.T) {
	out, _, code := invoke(t, "--help")
	for _, want := range []string{"Examples:", "--cgroup task-42 --init-pid", "Standalone on a host", "--ready-fd"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("--help (code %d) lacks %q", code, want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--policy"},
		{"--policy", "p.yaml", "extra"},
		{"--policy", "p.yaml", "--cgroup", "x"},
		{"--policy", "p.yaml", "--init-pid", "7"},
		{"--policy", "p.yaml", "--ready-fd", "1"},
		{"--policy", "p.yaml", "--max-conns", "0"},
		{"--policy", "p.yaml", "--procs", "-2"},
		{"--policy", "p.yaml", "--max-head-bytes", "10"},
		{"--policy", "p.yaml", "--head-timeout", "0s"},
		{"--policy", "p.yaml", "--idle-timeout", "-1s"},
		{"--policy", "p.yaml", "--log-format", "xml"},
		{"--policy", "p.yaml", "--no-such-flag"},
		{"--policy", "p.yaml", "--attribution", "ebpf"},
		{"--policy", "p.yaml", "--attribution", "bpf"}, // standalone: no cgroup to attach to
		{"--policy", "p.yaml", "--dns-epoch", "3"},     // no policy DNS to number
		{"--policy", "p.yaml", "--dns-listen", "127.0.0.1:0", "--transparent-listen", "127.0.0.1:0", "--dns-epoch", "-1"},
		{"--policy", "p.yaml", "--dns-listen", "127.0.0.1:0", "--transparent-listen", "127.0.0.1:3139-3132"},
		{"--policy", "p.yaml", "--dns-listen", "127.0.0.1:0", "--transparent-listen", "127.0.0.1:3100-3200"},
		{"--policy", "p.yaml", "--dns-listen", "127.0.0.1:0", "--transparent-listen", "127.0.0.1:0-7"},
		{"--policy", "p.yaml", "--credentials-env-fd", "5"},                            // without --credentials
		{"--policy", "p.yaml", "--credentials", "c.yaml", "--credentials-env-fd", "2"}, // stdio
		{"--policy", "p.yaml", "--credentials", "c.yaml", "--credentials-env-fd", "3", "--ready-fd", "3"},
	} {
		if _, errOut, code := invoke(t, args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errOut)
		}
	}
}

func TestBadPolicyFailsClosed(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "policy.yaml")
	os.WriteFile(bad, []byte("version: 1\nnetwork_policies: [\n"), 0o600)
	for _, p := range []string{bad, filepath.Join(dir, "missing.yaml")} {
		_, errOut, code := invoke(t, "--policy", p, "--listen", "127.0.0.1:0")
		if code != cli.ExitFailed || !strings.Contains(errOut, "policy") {
			t.Errorf("%s: exit %d (%s), want 1 naming the policy", p, code, errOut)
		}
	}
}

// syncBuffer collects a child's stderr while the test reads it.
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

func TestSchedulerProcs(t *testing.T) {
	for _, c := range []struct {
		flag         int
		sandbox, env bool
		want         int
	}{
		{-1, true, false, 1},   // sandbox mode: one P
		{-1, true, true, -1},   // GOMAXPROCS in the environment wins over the default
		{-1, false, false, -1}, // standalone: the runtime's choice
		{4, true, true, 4},     // the flag wins over everything
		{0, true, false, 0},    // 0: the runtime's default, every CPU
	} {
		if got := schedulerProcs(c.flag, c.sandbox, c.env); got != c.want {
			t.Errorf("schedulerProcs(%d, sandbox %v, env %v) = %d, want %d", c.flag, c.sandbox, c.env, got, c.want)
		}
	}
}
