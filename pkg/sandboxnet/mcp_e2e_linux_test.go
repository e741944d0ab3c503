//go:build linux

package sandboxnet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Issue 27's acceptance for protocol mcp and protocol graphql: real
// clients and servers from their own packages, the clients inside a real
// sandbox. The MCP TypeScript SDK (@modelcontextprotocol/sdk, from the
// npm registry, which the issue names) is the client in the sandbox and
// the server behind the test internet; graphql-js is the GraphQL server
// and curl its client. testdata/mcp holds the scripts and the pinned
// package versions.

// mcpNetwork is the network part of the policy: the MCP server as
// allowed.test:8443 for node, the GraphQL server as echo.test:8443 for
// curl (both names reach the test's TLS front).
const mcpNetwork = `  mcp:
    endpoints:
      - host: allowed.test
        port: 8443
        protocol: mcp
        rules:
          - allow: {method: initialize}
          - allow: {method: notifications/initialized}
          - allow: {method: tools/list}
          - allow: {method: tools/call, tool: "read_*"}
        deny_rules:
          - {method: tools/call, tool: read_secrets}
    binaries:
      - path: /usr/bin/node
  gql:
    endpoints:
      - host: echo.test
        port: 8443
        protocol: graphql
        access: read-only
    binaries:
      - path: /usr/bin/curl
`

const mcpScript = `
MCP_URL=https://allowed.test:8443/mcp node @DIR@/client.mjs 2>/tmp/node.err
printf 'node_err=%s\n' "$(tail -3 /tmp/node.err | tr '\n' ' ')"
G=https://echo.test:8443/graphql
q() { n=$1; shift; printf '%s=' "$n"; curl -s -o /tmp/b -w '%{http_code} %{http_version}' --max-time 20 "$@"; printf ' %s\n' "$(tr -d '\n' < /tmp/b)"; }
J='Content-Type: application/json'
q gql_query_h1 --http1.1 -H "$J" -d '{"query":"query Viewer { viewer }"}' $G
q gql_query_h2 --http2 -H "$J" -d '{"query":"{ viewer }"}' $G
q gql_get_h2 --http2 -G --data-urlencode 'query={ viewer }' $G
q gql_mutation_h1 --http1.1 -H "$J" -d '{"query":"mutation Del { deleteRepo(name: \"a\") }"}' $G
q gql_mutation_h2 --http2 -H "$J" -d '{"query":"mutation { deleteRepo(name: \"b\") }"}' $G
q gql_get_mutation --http2 -G --data-urlencode 'query=mutation { deleteRepo(name: "c") }' $G
`

// TestMCPAndGraphQLClientsInSandbox: inside a real sandbox, the MCP SDK
// client connects through the proxy (initialize, the initialized
// notification, tools/list under MCP-Protocol-Version 2025-11-25), calls
// the tool its rule allows and gets the server's answer; a tool no rule
// allows and one a deny rule names are 403 (l7_no_rule, l7_deny_rule
// with its rule in the event), a method no rule allows is 403, a
// revision outside mcp.versions 403 and one outside the registry 400 —
// and none of the refused calls reaches the server. curl's GraphQL
// queries pass under access: read-only over HTTP/1.1 and h2, GET and
// POST; its mutations are 403 l7_access_denied and never run.
// Mutation-checked: with the jsonrpc and graphql inspectors allowing
// every request, write_file, read_secrets and the mutations run on the
// servers and this fails (with rest's inspector in their place every
// request is refused, l7_body_not_inspected, and this fails too).
func TestMCPAndGraphQLClientsInSandbox(t *testing.T) {
	testutil.RequireReachable(t, "the npm registry", "registry.npmjs.org:443")
	requirePaths(t, "node and npm (Debian packages nodejs and npm)", "/usr/bin/node")
	npm := testutil.RequireCommand(t, "npm")
	l := newLab(t, "")
	dir := installMCPPackages(t, npm)
	srv := startNodeServer(t, dir)
	l.tlsFront(srv.port)
	head := labPolicy[:strings.Index(labPolicy, "  web:")]
	l.write(strings.Replace(head, "/etc]", "/etc, "+dir+"]", 1) + mcpNetwork)
	l.runArgs = []string{"--upstream-ca-bundle", l.inet.CAFile()}
	out, err := l.command(strings.ReplaceAll(mcpScript, "@DIR@", dir)).Output()
	t.Logf("sandbox output:\n%s", out)
	if err != nil {
		t.Fatalf("sandbox run: %v", err)
	}
	r := results(out)
	for k, want := range map[string]string{
		"connect":         "ok 2025-11-25",
		"tools":           "ok read_file,read_secrets,write_file",
		"read_file":       "ok read_file:/etc/hostname",
		"write_file":      "403 " + policy.L7NoRuleMatched,
		"read_secrets":    "403 " + policy.L7DeniedByRule,
		"resources":       "403 " + policy.L7NoRuleMatched,
		"version_outside": "403 " + policy.MCPVersionNotAllowed,
		"version_unknown": "400 " + policy.MCPVersionInvalid,
	} {
		if r[k] != want {
			t.Errorf("%s = %q, want %q (node stderr: %s)", k, r[k], want, r["node_err"])
		}
	}
	for k, want := range map[string]string{
		"gql_query_h1": `200 1.1 {"data":{"viewer":"octocat"}}`, "gql_query_h2": `200 2 {"data":{"viewer":"octocat"}}`,
		"gql_get_h2": `200 2 {"data":{"viewer":"octocat"}}`,
	} {
		if r[k] != want {
			t.Errorf("%s = %q, want %q", k, r[k], want)
		}
	}
	for _, k := range []string{"gql_mutation_h1", "gql_mutation_h2", "gql_get_mutation"} {
		if !strings.HasPrefix(r[k], "403 ") || !strings.Contains(r[k], `"reason":"`+policy.L7AccessDenied+`"`) {
			t.Errorf("%s = %q, want 403 %s", k, r[k], policy.L7AccessDenied)
		}
	}
	// What reached the servers: the allowed tool call and the queries.
	log := srv.output()
	if !strings.Contains(log, "call=read_file /etc/hostname") || strings.Contains(log, "call=write_file") || strings.Contains(log, "call=read_secrets") ||
		strings.Contains(log, "mutation=") || strings.Count(log, "graphql=") != 3 {
		t.Errorf("the servers saw:\n%s\nwant read_file and the three queries only", log)
	}
	// The denials' events name their reasons (and the deny rule).
	want := map[string]bool{
		policy.L7NoRuleMatched + " ": true, policy.L7DeniedByRule + " deny_rules[0]": true,
		policy.MCPVersionNotAllowed + " ": true, policy.L7AccessDenied + " ": true,
	}
	for _, ev := range l.eventLines() {
		if ev["class_uid"] != float64(4002) || ev["status_code"] != "policy_denied" {
			continue
		}
		p, _ := ev["unmapped"].(map[string]any)["egress_proxy"].(map[string]any)
		rule, _ := p["l7_rule"].(string)
		delete(want, fmt.Sprint(p["reason"])+" "+rule)
	}
	if len(want) > 0 {
		t.Errorf("no denied HTTP Activity event for %v", want)
	}
}

// installMCPPackages installs testdata/mcp's packages from the npm
// registry into a fresh directory the sandbox can read (not under a
// writable path) and returns it.
func installMCPPackages(t *testing.T, npm string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "palisade-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, f := range []string{"package.json", "server.mjs", "client.mjs"} {
		b, err := os.ReadFile(filepath.Join("testdata", "mcp", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--cache", filepath.Join(dir, ".npm-cache"))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	if out, err := exec.Command("chmod", "-R", "a+rX", dir).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	return dir
}

// nodeServer is server.mjs running on the host's loopback.
type nodeServer struct {
	port int
	mu   sync.Mutex
	log  bytes.Buffer
}

func (s *nodeServer) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

func (s *nodeServer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Write(b)
}

// startNodeServer starts dir/server.mjs and waits for its port; it is
// killed (by its pid) when the test ends.
func startNodeServer(t *testing.T, dir string) *nodeServer {
	t.Helper()
	s := &nodeServer{}
	cmd := exec.Command("/usr/bin/node", filepath.Join(dir, "server.mjs"))
	cmd.Dir = dir
	cmd.Stderr = testutil.LogWriter(t, "node server")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ports := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var p int
			if _, err := fmt.Sscanf(sc.Text(), "port=%d", &p); err == nil {
				ports <- p
				continue
			}
			fmt.Fprintln(s, sc.Text())
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case s.port = <-ports:
	case <-time.After(30 * time.Second):
		t.Fatal("node server.mjs printed no port within 30s")
	}
	return s
}

// tlsFront serves HTTPS (h2 and HTTP/1.1, the internet CA's
// certificates) on :8443 in the test internet and forwards every request
// to the node server on the host's loopback, streaming (server-sent
// events flushed as they come).
func (l *lab) tlsFront(port int) {
	ln, err := l.inet.Listen("tcp", ":8443")
	if err != nil {
		l.t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port)})
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0)
	srv := &http.Server{Handler: rp, TLSConfig: l.inet.TLSConfig(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(ln, srv.TLSConfig))
	l.t.Cleanup(func() { srv.Close() })
}
