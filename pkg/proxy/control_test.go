package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func controlClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

func TestControlSocket(t *testing.T) {
	checkSocketLeaks(t)
	echo := newEchoServer(t)
	env := newEnv(t, policyYAML(echo.port, ""))
	sock := filepath.Join(env.dir, "proxy.sock")
	// A stale socket from an earlier run is replaced.
	if old, err := net.Listen("unix", sock); err == nil {
		old.(*net.UnixListener).SetUnlinkOnClose(false)
		old.Close()
	}
	ln, err := ListenControl(sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- env.p.ServeControl(ln) }()
	defer func() {
		env.p.Close()
		if err := <-served; err != nil {
			t.Errorf("ServeControl: %v", err)
		}
	}()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket mode %v, want socket 0600", fi.Mode())
	}
	cl := controlClient(sock)
	defer cl.CloseIdleConnections()

	// Some traffic for the counters: one allowed, one denied.
	c, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	c.Close()
	c, resp, _ = env.connect(fmt.Sprintf("nope.test:%d", echo.port))
	if resp.StatusCode != 403 {
		t.Fatal(resp.Status)
	}
	c.Close()
	waitFor(t, "connections to finish", func() bool { return env.p.Counters().ActiveConnections == 0 })

	resp, err = cl.Get("http://control/status")
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	g := env.p.Current()
	if st.Policy.SHA256 != g.SHA256 || st.Policy.Generation != g.Number || st.Policy.Path != env.policyPath || st.Sandbox != "proxytest" {
		t.Errorf("status policy: %+v", st.Policy)
	}
	if st.Counters.Allowed != 1 || st.Counters.Denied != 1 || st.Counters.DeniedByReason["policy_denied/no_matching_endpoint"] != 1 {
		t.Errorf("status counters: %+v", st.Counters)
	}

	resp, err = cl.Get("http://control/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("metrics content type %q", ct)
	}
	for _, want := range []string{
		"# TYPE palisade_proxy_connections_total counter",
		`palisade_proxy_connections_total{listener="proxy"} 2`,
		"palisade_proxy_allowed_total 1",
		`palisade_proxy_denied_total{error="policy_denied",reason="no_matching_endpoint"} 1`,
		"palisade_proxy_bypass_attempts_total 0",
		fmt.Sprintf("palisade_proxy_policy_generation %d", g.Number),
		"# TYPE palisade_proxy_active_tunnels gauge",
		`palisade_proxy_reloads_total{result="ok"} 0`,
		`palisade_proxy_bytes_total{direction="up"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	checkExposition(t, string(body))

	// POST /reload: a change is picked up; GET is refused.
	env.writePolicy(tightPolicy(echo.port))
	resp, err = cl.Post("http://control/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rr ReloadResult
	json.NewDecoder(resp.Body).Decode(&rr)
	resp.Body.Close()
	if resp.StatusCode != 200 || !rr.Changed || rr.Generation != g.Number+1 {
		t.Fatalf("reload: %d %+v", resp.StatusCode, rr)
	}
	env.writePolicy("version: [")
	resp, err = cl.Post("http://control/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), `"error"`) || env.p.Current().Number != g.Number+1 {
		t.Fatalf("rejected reload: %d %s", resp.StatusCode, body)
	}
	resp, err = cl.Get("http://control/reload")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /reload: %d", resp.StatusCode)
	}
}

func TestListenControlRefusesToReplaceAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "not-a-socket")
	os.WriteFile(p, []byte("keep me"), 0o600)
	if ln, err := ListenControl(p); err == nil {
		ln.Close()
		t.Fatal("ListenControl replaced a regular file")
	}
	if b, _ := os.ReadFile(p); string(b) != "keep me" {
		t.Fatal("file was touched")
	}
}

// checkExposition checks every line of a Prometheus text exposition:
// comments are HELP/TYPE, samples are name{labels} value.
func checkExposition(t *testing.T, text string) {
	t.Helper()
	typed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasPrefix(line, "# ") {
			f := strings.Fields(line)
			if len(f) < 4 || (f[1] != "HELP" && f[1] != "TYPE") {
				t.Errorf("bad comment line %q", line)
			}
			if f[1] == "TYPE" {
				typed[f[2]] = true
			}
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			if !strings.HasSuffix(name, "}") {
				// label values may contain spaces; take everything to the last }
				j := strings.LastIndexByte(line, '}')
				name, rest = line[:j+1], strings.TrimSpace(line[j+1:])
			}
			name = name[:strings.IndexByte(name, '{')]
		}
		if !typed[name] {
			t.Errorf("sample %q has no TYPE line before it", line)
		}
		if _, err := fmt.Sscanf(rest, "%f", new(float64)); err != nil {
			t.Errorf("sample %q: value: %v", line, err)
		}
	}
}
