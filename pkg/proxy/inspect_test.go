package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/palisade-sandbox/palisade/pkg/l7/websocket"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// upstreamTLS is an HTTPS server (HTTP/1.1 and h2) for allowed.test on
// loopback with a certificate from its own test CA; it records what
// reached it.
type upstreamTLS struct {
	srv  *httptest.Server
	ca   *tlsca.Authority
	port int
	mu   sync.Mutex
	seen []string // "METHOD path?query proto"
}

func newUpstreamTLS(t testing.TB, h2 bool) *upstreamTLS {
	t.Helper()
	ca, err := tlsca.New(tlsca.Options{Name: "upstream-test"})
	if err != nil {
		t.Fatal(err)
	}
	u := &upstreamTLS{ca: ca}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Method+" "+r.URL.RequestURI()+" "+r.Proto)
		u.mu.Unlock()
		if r.URL.Path == "/echo-stream" {
			// Full-duplex echo, chunk by chunk (what a gRPC bidi stream does).
			w.Header().Set("Trailer", "Grpc-Status")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			buf := make([]byte, 64)
			for {
				n, err := r.Body.Read(buf)
				if n > 0 {
					w.Write(buf[:n])
					w.(http.Flusher).Flush()
				}
				if err != nil {
					break
				}
			}
			w.Header().Set("Grpc-Status", "0")
			return
		}
		if r.URL.Path == "/bulk" {
			// n bytes of bulkByte(i), sized unless chunked=1, written in
			// uneven pieces (and flushed, when chunked).
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			chunked := r.URL.Query().Get("chunked") == "1"
			if !chunked {
				w.Header().Set("Content-Length", strconv.Itoa(n))
			}
			buf := make([]byte, 100_003)
			for off := 0; off < n; {
				k := min(n-off, len(buf))
				for i := range k {
					buf[i] = bulkByte(off + i)
				}
				if _, err := w.Write(buf[:k]); err != nil {
					return
				}
				if chunked {
					w.(http.Flusher).Flush()
				}
				off += k
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/trailer" {
			w.Header().Set("Trailer", "Grpc-Status")
			w.Write([]byte("data"))
			w.Header().Set("Grpc-Status", "0")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.URL.Path, "proto": r.Proto, "host": r.Host, "body": len(body), "te": r.Header.Get("Te"), "trailer": len(r.Trailer), "authorization": r.Header.Get("Authorization")})
	}))
	leaf, err := ca.Leaf("allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	protos := []string{"http/1.1"}
	if h2 {
		protos = []string{"h2", "http/1.1"}
		u.srv.EnableHTTP2 = true
	}
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: protos}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	u.port = u.srv.Listener.Addr().(*net.TCPAddr).Port
	return u
}

func (u *upstreamTLS) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func (u *upstreamTLS) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(u.ca.Certificate())
	return p
}

func restPolicy(port int, access string, extra string) string {
	return fmt.Sprintf(`version: 1
network_policies:
  registry:
    name: registry
    endpoints:
      - host: allowed.test
        port: %d
        protocol: rest
        access: %s
%s    binaries:
      - path: /usr/bin/curl
`, port, access, extra)
}

// inspectEnv is a proxy with a sandbox CA in front of an upstream.
type inspectEnv struct {
	*testEnv
	up *upstreamTLS
	ca *tlsca.Authority
}

func newInspectEnv(t testing.TB, h2 bool, yaml func(port int) string, trustUpstream bool, opts ...envOpt) *inspectEnv {
	t.Helper()
	up := newUpstreamTLS(t, h2)
	ca, err := tlsca.New(tlsca.Options{Name: "proxytest"})
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, yaml(up.port), append([]envOpt{func(c *Config) {
		c.CA = ca
		if trustUpstream {
			c.UpstreamRoots = up.pool()
		} else {
			c.UpstreamRoots = x509.NewCertPool()
		}
	}}, opts...)...)
	return &inspectEnv{testEnv: env, up: up, ca: ca}
}

// client is an HTTP client using the proxy and trusting the sandbox CA.
func (e *inspectEnv) client(h2 bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.Certificate())
	pu, _ := url.Parse("http://" + e.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2,
		MaxConnsPerHost: 1}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (e *inspectEnv) url(path string) string {
	return fmt.Sprintf("https://allowed.test:%d%s", e.up.port, path)
}

func readDenial(t *testing.T, resp *http.Response) DenialBody {
	t.Helper()
	defer resp.Body.Close()
	var d DenialBody
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatalf("denial body: %v", err)
	}
	return d
}

// Under access: read-only, GET goes through and POST is refused with the
// JSON denial naming method and path, on one keep-alive connection (and
// on one h2 connection), each request decided on its own.
func TestInspectedTunnelDecidesEveryRequest(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			e := newInspectEnv(t, h2, func(port int) string { return restPolicy(port, "read-only", "") }, true)
			cl := e.client(h2)
			for i := 0; i < 3; i++ {
				resp, err := cl.Get(e.url("/simple/pkg/?token=secret"))
				if err != nil {
					t.Fatal(err)
				}
				var got map[string]any
				json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if resp.StatusCode != 200 || got["method"] != "GET" || got["host"] != "allowed.test:"+fmt.Sprint(e.up.port) {
					t.Fatalf("GET: %d %v", resp.StatusCode, got)
				}
				wantProto := "HTTP/1.1"
				if h2 {
					wantProto = "HTTP/2.0"
				}
				if resp.Proto != wantProto || got["proto"] != wantProto {
					t.Fatalf("protocols: client leg %s, upstream leg %v, want %s", resp.Proto, got["proto"], wantProto)
				}
				resp, err = cl.Post(e.url("/upload/x?q=1"), "application/octet-stream", strings.NewReader("payload"))
				if err != nil {
					t.Fatal(err)
				}
				d := readDenial(t, resp)
				if resp.StatusCode != 403 || d.Error != "policy_denied" || d.Reason != policy.L7AccessDenied ||
					d.Method != "POST" || d.Path != "/upload/x" || d.Policy != "registry" || d.Binary != curlExe {
					t.Fatalf("POST: %d %+v", resp.StatusCode, d)
				}
			}
			for _, r := range e.up.requests() {
				if !strings.HasPrefix(r, "GET /simple/pkg/?token=secret") {
					t.Errorf("upstream saw %q", r)
				}
			}
			if n := len(e.up.requests()); n != 3 {
				t.Errorf("upstream saw %d requests, want 3", n)
			}
			if h2 {
				// One client connection carried all six requests.
				if n := len(e.rec.ByClass(ocsf.ClassNetworkActivity)); n > 1 {
					t.Errorf("%d tunnels for one h2 client", n)
				}
			}
			evs := e.waitEvents(ocsf.ClassHTTPActivity, 6)
			denied := 0
			for _, ev := range evs {
				b, _ := json.Marshal(ev)
				if strings.Contains(string(b), "secret") || strings.Contains(string(b), "q=1") {
					t.Errorf("event carries a query string: %s", b)
				}
				if ev["status_code"] == "policy_denied" {
					denied++
					if get(ev, "http_request", "url", "path") != "/upload/x" || get(ev, "http_request", "http_method") != "POST" ||
						num(get(ev, "http_response", "code")) != 403 || get(ev, "firewall_rule", "name") != "registry" {
						t.Errorf("denied request event: %s", b)
					}
				}
			}
			// Repeated denials of one (outcome, host, port, binary) are
			// rate-limited (reported later with a count): at least one.
			if len(evs)-denied != 3 || denied < 1 {
				t.Errorf("%d HTTP events, %d denied", len(evs), denied)
			}
		})
	}
}

// rawTLS opens an inspected tunnel and a TLS connection inside it.
func (e *inspectEnv) rawTLS(protos ...string) *tls.Conn {
	e.t.Helper()
	c, resp, br := e.connect(fmt.Sprintf("allowed.test:%d", e.up.port))
	if resp.StatusCode != 200 {
		e.t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.Certificate())
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "allowed.test", RootCAs: pool, NextProtos: protos})
	if err := tc.Handshake(); err != nil {
		e.t.Fatalf("handshake: %v", err)
	}
	return tc
}

// The smuggling and path-confusion corpus, sent as raw bytes inside the
// terminated tunnel: ambiguous framing and authority are 400, ambiguous
// paths 403 (refused as today), normalisable paths decided after
// normalisation. Nothing refused reaches the upstream.
func TestInspectedTunnelSmugglingCorpus(t *testing.T) {
	e := newInspectEnv(t, false, func(port int) string {
		return restPolicy(port, "read-only", "        deny_rules:\n          - method: GET\n            path: /admin/**\n"+
			"          - method: GET\n            path: /api/**\n            query:\n              action: delete\n")
	}, true)
	host := fmt.Sprintf("allowed.test:%d", e.up.port)
	cases := []struct {
		name, req string
		status    int
		reason    string
	}{
		{"CL+TE", "POST /x HTTP/1.1\r\nHost: {H}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, ReasonMalformed},
		{"TE variant", "GET /x HTTP/1.1\r\nHost: {H}\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400, ReasonMalformed},
		{"obs-fold", "GET /x HTTP/1.1\r\nHost: {H}\r\nX-A: a\r\n b\r\n\r\n", 400, ReasonMalformed},
		{"invalid char", "GET /x HTTP/1.1\r\nHost: {H}\r\nX-A: a\x01b\r\n\r\n", 400, ReasonMalformed},
		{"h2c upgrade", "GET /x HTTP/1.1\r\nHost: {H}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", 400, ReasonH2CUpgrade},
		{"absolute URI other host", "GET https://other.test/x HTTP/1.1\r\nHost: other.test\r\n\r\n", 400, ReasonAuthorityMismatch},
		{"absolute URI vs Host", "GET https://{H}/x HTTP/1.1\r\nHost: other.test\r\n\r\n", 400, ReasonMalformed},
		{"Host mismatch", "GET /x HTTP/1.1\r\nHost: other.test\r\n\r\n", 400, ReasonAuthorityMismatch},
		{"two Hosts", "GET /x HTTP/1.1\r\nHost: {H}\r\nHost: {H}\r\n\r\n", 400, ReasonMalformed},
		// Spellings servers read in several ways are decided under each
		// reading: refused by the rule when every reading is denied, as
		// ambiguous when the readings are decided differently.
		{"encoded slash", "GET /admin%2Fx HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		{"encoded slash lower", "GET /admin%2fx HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		{"encoded slash climbing into a denied prefix", "GET /x/..%2Fadmin/y HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7AmbiguousPath},
		{"trailing dot", "GET /admin./y HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7AmbiguousPath},
		{"encoded NUL", "GET /x%00 HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7AmbiguousPath},
		{"dot-semicolon", "GET /x/..;/admin/y HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7AmbiguousPath},
		{"double encoding", "GET /admin%252Fx HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7AmbiguousPath},
		{"encoded dot", "GET /x/%2e%2e/admin/y HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7AmbiguousPath},
		{"backslash", "GET /x\\..\\admin HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7AmbiguousPath},
		{"dot segments normalised into deny rule", "GET /x/../admin/y HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		{"slashes normalised into deny rule", "GET //admin//y HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		{"encoded letters normalised into deny rule", "GET /%61dmin/y HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		{"lower-case method", "post /x HTTP/1.1\r\nHost: {H}\r\nContent-Length: 0\r\n\r\n", 403, policy.L7AccessDenied},
		// A deny rule's query matcher holds when any value of the
		// parameter matches: servers that read the first or the last
		// value would otherwise act on the denied one.
		{"deny rule query, repeated parameter", "GET /api/x?action=list&action=delete HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		{"deny rule query, repeated parameter first", "GET /api/x?action=delete&action=list HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		// read-only reads a POST as git's fetch only when it is one:
		// a REST API route ending in a name the agent chooses is a write.
		{"git-upload-pack suffix on an API POST", "POST /api/v4/projects/1/repository/files/git-upload-pack?branch=main HTTP/1.1\r\nHost: {H}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", 403, policy.L7AccessDenied},
		{"git-upload-pack with a query", "POST /r.git/git-upload-pack?content=x HTTP/1.1\r\nHost: {H}\r\nContent-Type: application/x-git-upload-pack-request\r\nContent-Length: 0\r\n\r\n", 403, policy.L7AccessDenied},
		// Deny rules match the way common servers route: Express and
		// ASP.NET route case-insensitively, Express and older Spring
		// ignore a trailing slash, PHP reads "a[]" as "a".
		{"deny rule, upper-case path", "GET /ADMIN/x HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		{"deny rule, bare prefix", "GET /admin HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		{"deny rule, query name case", "GET /api/x?ACTION=delete HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		{"deny rule, query name as array", "GET /api/x?action%5B%5D=delete HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		// Frameworks that honour a method-override field act on that
		// method: it is decided too.
		{"method override field", "GET /x HTTP/1.1\r\nHost: {H}\r\nX-HTTP-Method-Override: DELETE\r\n\r\n", 403, policy.L7AccessDenied},
		{"method override variant", "GET /x HTTP/1.1\r\nHost: {H}\r\nX-Method-Override: put\r\n\r\n", 403, policy.L7AccessDenied},
		{"method override parameter", "GET /x?_method=DELETE HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7AccessDenied},
		// WSGI and CGI read "_" as "-": an override spelt so is read
		// too, and a field the proxy frames by is refused in that spelling.
		{"method override with underscores", "GET /x HTTP/1.1\r\nHost: {H}\r\nX_HTTP_Method_Override: DELETE\r\n\r\n", 403, policy.L7AccessDenied},
		{"Transfer-Encoding with an underscore", "POST /x HTTP/1.1\r\nHost: {H}\r\nTransfer_Encoding: chunked\r\nContent-Length: 0\r\n\r\n", 400, ReasonMalformed},
		// Query names PHP reads as debug_, deny values in any case.
		{"query name PHP reads as the denied one", "GET /api/x?action.=delete HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7AmbiguousPath},
		{"deny rule query value case", "GET /api/x?action=DELETE HTTP/1.1\r\nHost: {H}\r\n\r\n", 403, policy.L7DeniedByRule},
		// Held in the red-team pass (regression guards).
		{"tab in the request line", "GET\t/x HTTP/1.1\r\nHost: {H}\r\n\r\n", 400, ReasonMalformed},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: {H}\r\n\r\n", 400, ReasonMalformed},
		{"CONNECT inside the tunnel", "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n", 400, ReasonMalformed},
		{"HTTP/1.0 without Host", "GET /x HTTP/1.0\r\n\r\n", 400, ReasonAuthorityMismatch},
		{"absolute URI with userinfo", "GET http://u@{H}/x HTTP/1.0\r\n\r\n", 400, ReasonAuthorityMismatch},
		{"HTTP/1.2", "GET /x HTTP/1.2\r\nHost: {H}\r\n\r\n", 400, ReasonMalformed},
		{"CL with plus", "POST /x HTTP/1.1\r\nHost: {H}\r\nContent-Length: +4\r\n\r\nabcd", 400, ReasonMalformed},
		{"CL in hex", "POST /x HTTP/1.1\r\nHost: {H}\r\nContent-Length: 0x4\r\n\r\nabcd", 400, ReasonMalformed},
		{"two CLs", "POST /x HTTP/1.1\r\nHost: {H}\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcd", 400, ReasonMalformed},
		{"two TE fields", "POST /x HTTP/1.1\r\nHost: {H}\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, ReasonMalformed},
		{"TE xchunked", "POST /x HTTP/1.1\r\nHost: {H}\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 400, ReasonMalformed},
		{"space before colon", "POST /x HTTP/1.1\r\nHost: {H}\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400, ReasonMalformed},
		{"upper-case h2c", "GET /x HTTP/1.1\r\nHost: {H}\r\nConnection: Upgrade\r\nUpgrade: websocket, H2C\r\n\r\n", 400, ReasonH2CUpgrade},
		{"websocket on a denied path", "GET /admin/x HTTP/1.1\r\nHost: {H}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", 403, policy.L7DeniedByRule},
		{"websocket without a key", "GET /x HTTP/1.1\r\nHost: {H}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 400, ReasonUnsupportedUpgrade},
		{"unicode path", "GET /\xc3\xa0dmin/x HTTP/1.1\r\nHost: {H}\r\n\r\n", 400, ReasonInvalidPath},
		{"trailing-dot authority other port", "GET /x HTTP/1.1\r\nHost: allowed.test.:1\r\n\r\n", 400, ReasonAuthorityMismatch},
		{"websocket on POST", "POST /ws HTTP/1.1\r\nHost: {H}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 0\r\n\r\n", 400, ReasonUnsupportedUpgrade},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := e.rawTLS("http/1.1")
			defer tc.Close()
			tc.SetDeadline(time.Now().Add(10 * time.Second))
			expectRefusal(t, tc, strings.ReplaceAll(c.req, "{H}", host), c.status, c.reason)
		})
	}
	if r := e.up.requests(); len(r) != 0 {
		t.Fatalf("refused requests reached the upstream: %q", r)
	}
	// The normalised path is what the upstream gets.
	tc := e.rawTLS("http/1.1")
	defer tc.Close()
	fmt.Fprintf(tc, "GET //a/./b/../c%%7E?x=1 HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("normalised GET: %v %v", resp, err)
	}
	resp.Body.Close()
	// Above the root stays at the root; a scoped npm name keeps its
	// encoded "/" (its readings were all decided).
	fmt.Fprintf(tc, "GET /../@types%%2fnode HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	if resp, err = http.ReadResponse(bufio.NewReader(tc), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /../@types%%2fnode: %v %v", resp, err)
	}
	if r := e.up.requests(); len(r) != 2 || r[0] != "GET /a/c~?x=1 HTTP/1.1" || r[1] != "GET /@types%2fnode HTTP/1.1" {
		t.Fatalf("upstream saw %q", r)
	}
}

// On h2 a refused stream gets its 400 or 403 and the connection carries
// on; :authority must be the CONNECT host.
func TestInspectedH2AuthorityAndStreams(t *testing.T) {
	e := newInspectEnv(t, true, func(port int) string { return restPolicy(port, "read-only", "") }, true)
	tc := e.rawTLS("h2")
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q", p)
	}
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	do := func(method, authority, path string) int {
		req, _ := http.NewRequest(method, "https://"+authority+path, nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s %s%s: %v", method, authority, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	good := fmt.Sprintf("allowed.test:%d", e.up.port)
	for i, c := range []struct {
		method, auth, path string
		want               int
	}{
		{"GET", good, "/a", 200},
		{"GET", "other.test", "/a", 400},
		{"GET", fmt.Sprintf("allowed.test:%d", e.up.port+1), "/a", 400},
		{"DELETE", good, "/a", 403},
		{"GET", good, "/b%2Fc", 200},
		{"GET", good, "/b%00", 403},
		{"GET", good, "/a", 200},
	} {
		if got := do(c.method, c.auth, c.path); got != c.want {
			t.Errorf("request %d %s %s%s: %d, want %d", i, c.method, c.auth, c.path, got, c.want)
		}
	}
	if r := e.up.requests(); len(r) != 3 || r[1] != "GET /b%2Fc HTTP/2.0" {
		t.Errorf("upstream saw %q, want 3 requests", r)
	}
}

// Trailers and "TE: trailers" cross the proxy on h2 (what gRPC needs).
func TestInspectedH2Trailers(t *testing.T) {
	e := newInspectEnv(t, true, func(port int) string { return restPolicy(port, "read-only", "") }, true)
	cl := e.client(true)
	req, _ := http.NewRequest("GET", e.url("/trailer"), nil)
	req.Header.Set("TE", "trailers")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "data" || resp.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("body %q trailer %v", b, resp.Trailer)
	}
}

// Request trailers never reach the upstream (h2 and HTTP/1.1 chunked):
// a trailer is a header an upstream may read after the decision
// ("x-http-method-override: DELETE" after an allowed POST's body).
func TestInspectedRequestTrailersDropped(t *testing.T) {
	e := newInspectEnv(t, true, func(port int) string { return restPolicy(port, "read-write", "") }, true)
	for _, h2 := range []bool{true, false} {
		req, _ := http.NewRequest("POST", e.url("/x"), io.NopCloser(strings.NewReader("body")))
		req.ContentLength = -1 // chunked on HTTP/1.1: trailers need it
		req.Trailer = http.Header{"X-Http-Method-Override": {"DELETE"}}
		resp, err := e.client(h2).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 200 || body["body"] != float64(4) || body["trailer"] != float64(0) {
			t.Errorf("h2 %v: %d %v, want 200 and no trailer upstream", h2, resp.StatusCode, body)
		}
	}
}

// An upstream certificate that does not verify is a 502 upstream_tls
// with an event, never a downgrade.
func TestInspectedUpstreamCertificateRefused(t *testing.T) {
	e := newInspectEnv(t, false, func(port int) string { return restPolicy(port, "read-only", "") }, false)
	resp, err := e.client(false).Get(e.url("/x"))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 502 || body["error"] != ErrorUpstreamTLS {
		t.Fatalf("%d %v", resp.StatusCode, body)
	}
	if len(e.up.requests()) != 0 {
		t.Fatal("a request reached an unverified upstream")
	}
	evs := e.waitEvents(ocsf.ClassHTTPActivity, 1)
	if len(evs) == 0 || evs[0]["status_code"] != OutcomeUpstreamFailed || get(evs[0], "unmapped", "egress_proxy", "reason") != ReasonUpstreamTLS {
		t.Fatalf("events %v", evs)
	}
}

// A ClientHello whose SNI differs from the CONNECT host is refused, on a
// terminated tunnel (handshake fails) and on a passthrough tunnel (the
// tunnel closes before a byte reaches the upstream), with an event.
func TestSNIMismatchRefused(t *testing.T) {
	for _, rest := range []bool{true, false} {
		t.Run(fmt.Sprintf("inspected=%v", rest), func(t *testing.T) {
			e := newInspectEnv(t, false, func(port int) string {
				if rest {
					return restPolicy(port, "read-only", "")
				}
				return policyYAML(port, "")
			}, true)
			c, resp, br := e.connect(fmt.Sprintf("allowed.test:%d", e.up.port))
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "fronted.example", InsecureSkipVerify: true})
			if err := tc.Handshake(); err == nil {
				t.Fatal("handshake with a fronted SNI succeeded")
			}
			evs := e.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(evs) != 1 || evs[0]["status_code"] != OutcomePolicyDenied || get(evs[0], "unmapped", "egress_proxy", "reason") != ReasonSNIMismatch {
				t.Fatalf("events %v", evs)
			}
			if len(e.up.requests()) != 0 {
				t.Fatal("the upstream was reached")
			}
		})
	}
	// The matching SNI passes through untouched (the client verifies the
	// upstream's own certificate: no termination without rest).
	e := newInspectEnv(t, false, func(port int) string { return policyYAML(port, "") }, true)
	c, _, br := e.connect(fmt.Sprintf("allowed.test:%d", e.up.port))
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "allowed.test", RootCAs: e.up.pool()})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("passthrough handshake: %v", err)
	}
	tc.Close()
}

// On a passthrough tunnel the SNI check reads TLS records, not a first
// byte: a record other than a handshake before the ClientHello is
// refused with an event, whatever the upstream would make of it (a Go
// crypto/tls server ignores a warning alert and completes the handshake
// for the ClientHello that follows, here one for another host).
func TestSNIRecordBeforeClientHelloRefused(t *testing.T) {
	for name, prefix := range map[string][]byte{
		"warning alert":      {0x15, 3, 3, 0, 2, 1, 90},
		"two warning alerts": {0x15, 3, 1, 0, 2, 1, 90, 0x15, 3, 3, 0, 2, 1, 90},
		"change-cipher-spec": {0x14, 3, 3, 0, 1, 1},
		"application data":   {0x17, 3, 3, 0, 1, 0},
		"alert header alone": {0x15, 3},
	} {
		t.Run(name, func(t *testing.T) {
			e := newInspectEnv(t, false, func(port int) string { return policyYAML(port, "") }, true)
			c, resp, br := e.connect(fmt.Sprintf("allowed.test:%d", e.up.port))
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			c.Write(prefix)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "fronted.example", InsecureSkipVerify: true})
			if err := tc.Handshake(); err == nil {
				t.Fatal("handshake after a record before the ClientHello succeeded")
			}
			evs := e.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(evs) != 1 || evs[0]["status_code"] != OutcomePolicyDenied || get(evs[0], "unmapped", "egress_proxy", "reason") != ReasonClientHelloNotFirst {
				t.Fatalf("events %v", evs)
			}
		})
	}
	// Bytes that do not begin a TLS record are not TLS: they pass.
	e := newInspectEnv(t, false, func(port int) string { return policyYAML(port, "") }, true)
	c, _, br := e.connect(fmt.Sprintf("allowed.test:%d", e.up.port))
	fmt.Fprintf(c, "GET /plain HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 400 {
		t.Fatalf("plaintext to a TLS upstream: %v %v, want the upstream's own 400", resp, err)
	}
}

// Plaintext HTTP inside a tunnel to a rest endpoint is inspected as it
// is; bytes that are neither TLS nor HTTP are refused with an event.
func TestInspectedTunnelPlaintextAndUnknown(t *testing.T) {
	spy := newHeaderSpy(t)
	e := newEnv(t, restPolicy(spy.port, "read-only", ""), func(c *Config) { c.CA, _ = tlsca.New(tlsca.Options{}) })
	c2, _, _ := e.connect(fmt.Sprintf("allowed.test:%d", spy.port))
	c2.Write([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	if n, _ := c2.Read(make([]byte, 1)); n != 0 {
		t.Fatal("non-HTTP bytes got an answer")
	}
	waitFor(t, "refusal event", func() bool {
		for _, ev := range e.rec.ByClass(ocsf.ClassNetworkActivity) {
			if get(ev, "unmapped", "egress_proxy", "reason") == ReasonNotHTTP {
				return true
			}
		}
		return false
	})
	c, resp, br := e.connect(fmt.Sprintf("allowed.test:%d", spy.port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %d", resp.StatusCode)
	}
	host := fmt.Sprintf("allowed.test:%d", spy.port)
	fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	r1, err := http.ReadResponse(br, nil)
	if err != nil || r1.StatusCode != 200 {
		t.Fatalf("GET: %v %v", r1, err)
	}
	io.Copy(io.Discard, r1.Body)
	fmt.Fprintf(c, "DELETE /a HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	r2, err := http.ReadResponse(br, nil)
	if err != nil || r2.StatusCode != 403 {
		t.Fatalf("DELETE: %v %v", r2, err)
	}
}

// FuzzInspectedRequestHead: a head the inspected HTTP/1.1 path accepts
// has an origin-form target, one authority, and unambiguous framing.
func FuzzInspectedRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET /a HTTP/1.1\r\nHost: h.test\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: h.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET https://h.test/x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: h.test\r\nHost: h.test\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: h.test\r\nX: a\r\n b\r\n\r\n",
		"GET https://h.test?q HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	ix := &inspector{}
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := ParseHead(raw)
		if err != nil {
			return
		}
		r, fr, err := ix.buildRequest(h, bufio.NewReader(strings.NewReader("")))
		if err != nil {
			return
		}
		if !strings.HasPrefix(r.RequestURI, "/") || strings.Contains(r.RequestURI, "#") {
			t.Fatalf("accepted target %q", r.RequestURI)
		}
		if len(r.Header.Values("Host")) > 1 {
			t.Fatal("accepted two Host fields")
		}
		if r.Header.Get("Transfer-Encoding") != "" && r.Header.Get("Content-Length") != "" {
			t.Fatal("accepted Content-Length with Transfer-Encoding")
		}
		if fr.chunked && r.ContentLength != -1 || !fr.chunked && r.ContentLength != fr.length {
			t.Fatalf("framing %+v vs ContentLength %d", fr, r.ContentLength)
		}
	})
}

// The upstream leg's HTTP/1.1 client: concurrent h2 streams to an
// HTTP/1.1 upstream overflow to new connections to the same checked
// address; a connection the upstream closes (Connection: close, or idle
// close) is replaced without the client noticing.
func TestInspectedUpstreamH1ConnectionReuse(t *testing.T) {
	e := newInspectEnv(t, false, func(port int) string { return restPolicy(port, "read-only", "") }, true)
	cl := e.client(true)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := cl.Get(e.url(fmt.Sprintf("/c/%d", i)))
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" {
				errs <- fmt.Errorf("%d %s", resp.StatusCode, resp.Proto)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The upstream drops its keep-alive connections; the next requests on
	// the same client connection still go through.
	h1 := e.client(false)
	for i := 0; i < 3; i++ {
		resp, err := h1.Get(e.url("/x"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		e.up.srv.CloseClientConnections()
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(e.up.requests()); n != 23 {
		t.Errorf("upstream saw %d requests, want 23", n)
	}
}

// Forwarded http:// requests share a keep-alive client connection, each
// decided on its own: another host on the same connection is decided,
// resolved and dialled afresh; a denied one gets its 403 and the
// connection ends; each is one HTTP Activity event.
func TestForwardKeepAliveDecidesEachRequest(t *testing.T) {
	spy := newHeaderSpy(t)
	env := newEnv(t, policyYAML(spy.port, ""))
	c := env.dial()
	br := bufio.NewReader(c)
	send := func(host, path string) *http.Response {
		t.Helper()
		fmt.Fprintf(c, "GET http://%s:%d%s HTTP/1.1\r\nHost: %s\r\n\r\n", host, spy.port, path, host)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s%s: %v", host, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i, host := range []string{"allowed.test", "a.wild.test", "allowed.test"} {
		if resp := send(host, fmt.Sprintf("/r%d", i)); resp.StatusCode != 200 || resp.Close {
			t.Fatalf("request %d to %s: %d close=%v", i, host, resp.StatusCode, resp.Close)
		}
	}
	// A chunked body with a trailer section, then another request: the
	// trailers are consumed with the body, the next head starts clean.
	fmt.Fprintf(c, "POST http://allowed.test:%d/c HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"5\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n", spy.port)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("chunked POST: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	spy.mu.Lock()
	gotBody := spy.body
	spy.mu.Unlock()
	if gotBody != "hello" {
		t.Fatalf("upstream body %q", gotBody)
	}
	if resp := send("allowed.test", "/after-trailer"); resp.StatusCode != 200 {
		t.Fatalf("request after a trailer section: %d", resp.StatusCode)
	}
	if resp := send("denied.test", "/x"); resp.StatusCode != 403 {
		t.Fatalf("denied host on a kept-alive connection: %d", resp.StatusCode)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("connection stayed open after a denial")
	}
	spy.mu.Lock()
	n := spy.count
	spy.mu.Unlock()
	if n != 5 {
		t.Fatalf("upstream saw %d requests, want 5", n)
	}
	if l := env.dialer.Lookups(); !slices.Contains(l, "a.wild.test") || slices.Contains(l, "denied.test") {
		t.Fatalf("lookups %v: each allowed host resolved, the denied one never", l)
	}
	evs := env.waitEvents(ocsf.ClassHTTPActivity, 5)
	if len(evs) != 5 {
		t.Fatalf("%d HTTP events, want one per allowed request", len(evs))
	}
	corr := get(evs[0], "metadata", "correlation_uid")
	for _, ev := range evs {
		if get(ev, "metadata", "correlation_uid") != corr {
			t.Errorf("requests of one connection carry different correlation ids")
		}
	}
}

// A WebSocket upgrade goes through only when its GET path is allowed
// and the upstream's 101 answers the client's key; after it the
// client's bytes go upstream only as masked WebSocket frames, the
// upstream's come back as they are.
func TestInspectedWebSocketUpgrade(t *testing.T) {
	upCA, _ := tlsca.New(tlsca.Options{})
	var mu sync.Mutex
	var afterSwitch []string // requests an upstream that never switched read
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", 400)
			return
		}
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		accept := websocket.AcceptKey(r.Header.Get("Sec-WebSocket-Key"))
		if r.URL.Path == "/ws/liar" {
			accept = "x"
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n")
		brw.Flush()
		if r.URL.Path == "/ws/http" {
			// 101, then HTTP as before: every request it reads counts.
			for {
				req, err := http.ReadRequest(brw.Reader)
				if err != nil {
					return
				}
				mu.Lock()
				afterSwitch = append(afterSwitch, req.Method+" "+req.URL.Path)
				mu.Unlock()
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
		}
		io.Copy(c, brw) // echo
	}))
	leaf, _ := upCA.Leaf("allowed.test")
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	srv.StartTLS()
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	pool := x509.NewCertPool()
	pool.AddCert(upCA.Certificate())
	ca, _ := tlsca.New(tlsca.Options{})
	env := newEnv(t, restRulesPolicy(port, "GET", "/ws/**"), func(c *Config) { c.CA, c.UpstreamRoots = ca, pool })
	e := &inspectEnv{testEnv: env, ca: ca, up: &upstreamTLS{port: port}}
	upgrade := func(path string) (*http.Response, *tls.Conn, *bufio.Reader) {
		tc := e.rawTLS("http/1.1")
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: allowed.test:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path, port)
		br := bufio.NewReader(tc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, tc, br
	}
	resp, tc, br := upgrade("/ws/chat")
	if resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "websocket" || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("allowed upgrade: %d %v", resp.StatusCode, resp.Header)
	}
	frame := []byte{0x81, 0x85, 1, 2, 3, 4, 'h' ^ 1, 'e' ^ 2, 'l' ^ 3, 'l' ^ 4, 'o' ^ 1} // masked "hello"
	tc.Write(frame)
	got := make([]byte, len(frame))
	if _, err := io.ReadFull(br, got); err != nil || !bytes.Equal(got, frame) {
		t.Fatalf("relay after 101: %q %v", got, err)
	}
	tc.Close()
	resp, tc, _ = upgrade("/admin/socket")
	tc.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("upgrade on a path the rules do not allow: %d", resp.StatusCode)
	}
	// A 101 whose accept does not answer the key is not relayed.
	resp, tc, _ = upgrade("/ws/liar")
	tc.Close()
	if resp.StatusCode != 502 {
		t.Fatalf("101 with a wrong accept: %d, want 502", resp.StatusCode)
	}
	// An upstream that answered 101 and kept reading HTTP never gets the
	// raw requests sent after it: the first non-frame closes the tunnel.
	resp, tc, br = upgrade("/ws/http")
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	fmt.Fprintf(tc, "DELETE /ws/item HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /admin HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if n, _ := io.Copy(io.Discard, br); n != 0 {
		t.Errorf("%d bytes came back after raw HTTP on an upgraded connection", n)
	}
	tc.Close()
	waitFor(t, "the frame refusal's event", func() bool {
		for _, ev := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
			if get(ev, "unmapped", "egress_proxy", "reason") == ReasonWebSocketFrame {
				return true
			}
		}
		return false
	})
	// The wrong accept's event is its own connection's: it may come
	// after the frame refusal's under load.
	waitFor(t, "the event for the 101 with a wrong accept", func() bool {
		for _, ev := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
			if get(ev, "unmapped", "egress_proxy", "reason") == ReasonWebSocketHandshake {
				return true
			}
		}
		return false
	})
	mu.Lock()
	defer mu.Unlock()
	if len(afterSwitch) != 0 {
		t.Errorf("the upstream read %q after its 101", afterSwitch)
	}
}

func restRulesPolicy(port int, method, path string) string {
	return fmt.Sprintf(`version: 1
network_policies:
  ws:
    endpoints:
      - host: allowed.test
        port: %d
        protocol: rest
        rules:
          - allow: {method: %s, path: "%s"}
    binaries:
      - path: /usr/bin/curl
`, port, method, path)
}

// A request on a long-lived inspected connection is held to the policy
// in force when it arrives: a reload that tightens the entry, then one
// that removes it, apply to the next request on the same connection.
func TestInspectedRequestsFollowReloads(t *testing.T) {
	e := newInspectEnv(t, false, func(port int) string { return restPolicy(port, "read-write", "") }, true)
	cl := e.client(false)
	post := func() int {
		resp, err := cl.Post(e.url("/up"), "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post(); c != 200 {
		t.Fatalf("POST under read-write: %d", c)
	}
	e.writePolicy(restPolicy(e.up.port, "read-only", ""))
	if _, err := e.p.Reload("test"); err != nil {
		t.Fatal(err)
	}
	if c := post(); c != 403 {
		t.Fatalf("POST after the reload to read-only: %d", c)
	}
	// The refused POST's unread body closed that connection; a GET opens
	// the next one, which then outlives the entry.
	if resp, err := cl.Get(e.url("/x")); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET under read-only: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	e.writePolicy(policyYAML(1, ""))
	if _, err := e.p.Reload("test"); err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Get(e.url("/x"))
	if err != nil {
		t.Fatal(err)
	}
	d := readDenial(t, resp)
	if resp.StatusCode != 403 || d.Reason != "port_not_allowed" {
		t.Fatalf("GET after the entry was removed: %d %+v", resp.StatusCode, d)
	}
	if n := len(e.rec.ByClass(ocsf.ClassNetworkActivity)); n != 1 {
		t.Fatalf("%d tunnels ended, want only the one the refused POST closed", n)
	}
}

// A full-duplex h2 stream (gRPC bidi) crosses the proxy chunk by chunk:
// each message is echoed back before the next is sent, so nothing may
// wait for the request body to end; the trailer arrives at the end.
func TestInspectedH2FullDuplexStream(t *testing.T) {
	e := newInspectEnv(t, true, func(port int) string {
		return restRulesPolicy(port, "POST", "/echo-stream")
	}, true)
	cl := e.client(true)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", e.url("/echo-stream"), pr)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	respc := make(chan *http.Response, 1)
	errc := make(chan error, 1)
	go func() {
		resp, err := cl.Do(req)
		if err != nil {
			errc <- err
			return
		}
		respc <- resp
	}()
	io.WriteString(pw, "msg-0")
	var resp *http.Response
	select {
	case resp = <-respc:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no response headers while the request stream is open")
	}
	defer resp.Body.Close()
	buf := make([]byte, 5)
	for i := 0; i < 5; i++ {
		if i > 0 {
			fmt.Fprintf(pw, "msg-%d", i)
		}
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != fmt.Sprintf("msg-%d", i) {
			t.Fatalf("echo %d: %q %v", i, buf, err)
		}
	}
	pw.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("trailer %v", resp.Trailer)
	}
}

// Different denials to one host within the rate limiter's window keep
// their detail: the first of each distinct (method, path, reason) is an
// event of its own, and the count event lists the folded ones with their
// counts (before, PROPFIND, TRACE, GET /admin and DELETE folded into one
// "DELETE count=5").
func TestDenialBurstKeepsDetail(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newInspectEnv(t, false, func(port int) string {
		return restPolicy(port, "read-only", "        deny_rules:\n          - method: GET\n            path: /admin/**\n")
	}, true, func(c *Config) { c.Now = clock; c.Limits.DenyWindow = time.Hour })
	tc := e.rawTLS("http/1.1")
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(tc)
	host := fmt.Sprintf("allowed.test:%d", e.up.port)
	for _, rq := range []string{"PROPFIND /x", "TRACE /x", "GET /admin/a", "DELETE /public/ok", "DELETE /public/ok", "GET /admin/a", "DELETE /public/ok", "DELETE /public/ok"} {
		fmt.Fprintf(tc, "%s HTTP/1.1\r\nHost: %s\r\n\r\n", rq, host)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 403 {
			t.Fatalf("%s: %v %v", rq, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	named := func() []string {
		var out []string
		for _, ev := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
			m := get(ev, "http_request", "http_method")
			if m == nil {
				m = ev["activity_name"] // a method OCSF does not list
			}
			out = append(out, fmt.Sprintf("%v %v %v", m, get(ev, "http_request", "url", "path"), get(ev, "count")))
		}
		return out
	}
	waitFor(t, "four events and four folded", func() bool { return len(named()) >= 4 && e.p.Counters().EventsSuppressed == 4 })
	if got := fmt.Sprint(named()); got != "[PROPFIND /x <nil> TRACE /x <nil> GET /admin/a <nil> DELETE /public/ok <nil>]" {
		t.Fatalf("events %s, want the first of each distinct denial", got)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	e.p.flushDenials(clock())
	evs := e.rec.ByClass(ocsf.ClassHTTPActivity)
	if len(evs) != 5 || num(get(evs[4], "count")) != 4 {
		t.Fatalf("count event: %v", named())
	}
	b, _ := json.Marshal(get(evs[4], "unmapped", "egress_proxy", "denials"))
	if want := `[{"count":3,"method":"DELETE","path":"/public/ok","reason":"l7_access_denied"},{"count":1,"method":"GET","path":"/admin/a","reason":"l7_deny_rule"}]`; string(b) != want {
		t.Fatalf("count event lists %s, want %s", b, want)
	}
}

// A malformed request's event names what could be read of it: the
// method and path of an in-tunnel head and of a forwarded one (an HTTP
// Activity, as every forwarded request is), the CONNECT authority.
func TestMalformedRequestNamesWhatParsed(t *testing.T) {
	e := newInspectEnv(t, false, func(port int) string { return restPolicy(port, "read-only", "") }, true)
	tc := e.rawTLS("http/1.1")
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(tc, "DELETE /items/7?token=querysecret HTTP/1.1\r\nHost: allowed.test:%d\r\nX-A: a\r\n b\r\n\r\n", e.up.port)
	if resp, err := http.ReadResponse(bufio.NewReader(tc), nil); err != nil || resp.StatusCode != 400 {
		t.Fatalf("obs-fold in a tunnel: %v %v", resp, err)
	}
	tc.Close()
	c := e.dial()
	fmt.Fprintf(c, "PUT http://allowed.test:%d/upload/x?sig=querysecret HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", e.up.port)
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 400 {
		t.Fatalf("forwarded with two lengths: %v %v", resp, err)
	}
	c = e.dial()
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nX-B: a\x01b\r\n\r\n", e.up.port)
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 400 {
		t.Fatalf("CONNECT with a control character: %v %v", resp, err)
	}
	var got []string
	waitFor(t, "three malformed_request events", func() bool {
		got = nil
		for _, ev := range append(e.rec.ByClass(ocsf.ClassHTTPActivity), e.rec.ByClass(ocsf.ClassNetworkActivity)...) {
			if get(ev, "unmapped", "egress_proxy", "reason") == ReasonMalformed {
				got = append(got, fmt.Sprintf("%v %v %v %v:%v", ev["class_uid"], get(ev, "http_request", "http_method"), get(ev, "http_request", "url", "path"), get(ev, "dst_endpoint", "hostname"), get(ev, "dst_endpoint", "port")))
			}
		}
		return len(got) == 3
	})
	want := []string{
		fmt.Sprintf("4002 DELETE /items/7 allowed.test:%d", e.up.port),
		fmt.Sprintf("4002 PUT /upload/x allowed.test:%d", e.up.port),
		fmt.Sprintf("4001 <nil> <nil> allowed.test:%d", e.up.port),
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	for _, ev := range e.rec.Events() {
		if b, _ := json.Marshal(ev); strings.Contains(string(b), "querysecret") {
			t.Fatalf("an event carries a query: %s", b)
		}
	}
}

// A stream the HTTP/2 server refuses before the handler sees it (here an
// upper-case field name, a protocol error in h2) gets an HTTP Activity
// event naming its method and path; the connection carries on.
func TestH2RefusedStreamHasEvent(t *testing.T) {
	e := newInspectEnv(t, true, func(port int) string { return restPolicy(port, "read-only", "") }, true)
	tc := e.rawTLS("h2")
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(tc, http2.ClientPreface)
	fr := http2.NewFramer(tc, tc)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	headers := func(id uint32, method, path string, extra ...string) {
		hb.Reset()
		fields := append([]string{":method", method, ":path", path, ":scheme", "https", ":authority", fmt.Sprintf("allowed.test:%d", e.up.port)}, extra...)
		for i := 0; i < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	}
	headers(1, "DELETE", "/items/9?x=querysecret", "X-Bad", "1")
	headers(3, "GET", "/a")
	dec := hpack.NewDecoder(4096, nil)
	var rst bool
	status := ""
	for status == "" {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v (rst %v)", err, rst)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			rst = rst || f.StreamID == 1 && f.ErrCode == http2.ErrCodeProtocol
		case *http2.HeadersFrame:
			fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
			if f.StreamID == 3 {
				status = fields[0].Value
			}
		}
	}
	if !rst || status != "200" {
		t.Fatalf("stream 1 reset %v, stream 3 status %q", rst, status)
	}
	var ev map[string]any
	waitFor(t, "the refused stream's event", func() bool {
		for _, x := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
			if get(x, "unmapped", "egress_proxy", "reason") == ReasonH2Refused {
				ev = x
				return true
			}
		}
		return false
	})
	if get(ev, "http_request", "http_method") != "DELETE" || get(ev, "http_request", "url", "path") != "/items/9" || get(ev, "http_request", "version") != "HTTP/2.0" {
		t.Fatalf("event %v", ev)
	}
	if b, _ := json.Marshal(ev); strings.Contains(string(b), "querysecret") {
		t.Fatalf("the event carries the query: %s", b)
	}
	if n := len(e.up.requests()); n != 1 {
		t.Fatalf("upstream saw %d requests, want the GET only", n)
	}
}
