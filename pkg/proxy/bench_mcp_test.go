package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// BenchmarkMCPToolsCall (scripts/bench/mcp.sh runs it and prints the
// ratio): MCP tools/call requests over a terminated tunnel with
// keep-alive, HTTP/1.1, one at a time, to one HTTPS upstream on loopback
// that answers each with a small JSON-RPC result. "inspected" goes to
// mcp.bench.test, a protocol mcp endpoint (the body read and parsed, the
// revision, the tool name's syntax and the rules decided); "rest" to
// rest.bench.test, the same upstream under a protocol rest rule allowing
// POST /mcp (method and path only). Events are marshalled and written to
// io.Discard. Each row reports requests/s and the process's CPU time per
// request (cpu-us/req).
func BenchmarkMCPToolsCall(b *testing.B) {
	upCA, err := tlsca.New(tlsca.Options{Name: "bench-upstream"})
	if err != nil {
		b.Fatal(err)
	}
	result := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"ok"}]}}`)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(result)
	}))
	srv.TLS = &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Leaf(hi.ServerName) }}
	srv.StartTLS()
	b.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	upPool := x509.NewCertPool()
	upPool.AddCert(upCA.Certificate())
	ca, err := tlsca.New(tlsca.Options{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	yaml := fmt.Sprintf(`version: 1
network_policies:
  bench:
    endpoints:
      - host: mcp.bench.test
        port: %d
        protocol: mcp
        rules:
          - allow: {method: initialize}
          - allow: {method: tools/list}
          - allow: {method: tools/call, tool: {any: [search_*, read_file]}}
        deny_rules:
          - {method: tools/call, tool: read_secrets}
      - host: rest.bench.test
        port: %d
        protocol: rest
        rules:
          - allow: {method: POST, path: /mcp}
    binaries:
      - path: /usr/bin/curl
`, port, port)
	env := newEnv(b, yaml, func(c *Config) {
		c.CA, c.UpstreamRoots = ca, upPool
		c.Events = ocsf.NewWriter(io.Discard)
		c.Limits.DenyWindow = time.Hour
	})
	for _, h := range []string{"mcp.bench.test", "rest.bench.test"} {
		env.dialer.hosts[h] = netip.MustParseAddr("127.0.0.1")
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	pu, _ := url.Parse("http://" + env.addr)
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_issues","arguments":{"query":"is:open label:bug","limit":20}}}`
	rows := []struct{ name, host string }{{"inspected", "mcp.bench.test"}, {"rest", "rest.bench.test"}}
	if os.Getenv("PALISADE_BENCH_REVERSE") != "" {
		slices.Reverse(rows) // scripts/bench/mcp.sh alternates the order between rounds
	}
	for _, c := range rows {
		b.Run(c.name, func(b *testing.B) {
			tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1,
				TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}, DisableCompression: true}
			defer tr.CloseIdleConnections()
			u := fmt.Sprintf("https://%s:%d/mcp", c.host, port)
			call := func() {
				req, _ := http.NewRequest("POST", u, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("%s: %d", u, resp.StatusCode)
				}
			}
			call() // the connection and leaf exist before timing
			b.ResetTimer()
			start, cpu0 := time.Now(), testutil.ProcessCPU()
			for range b.N {
				call()
			}
			cpu, wall := testutil.ProcessCPU()-cpu0, time.Since(start)
			b.ReportMetric(float64(b.N)/wall.Seconds(), "req/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/req")
		})
	}
}
