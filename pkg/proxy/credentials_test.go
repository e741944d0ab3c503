package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// Made-up secrets: the tests check where they go and that no event, log
// line or error ever holds one.
const (
	credSecret  = "sk-live-0123456789"
	credSecret2 = "sk-rotated-abcdef"
	credKey     = "API_TOKEN"
)

func credFile(value string, port int) string {
	return fmt.Sprintf(`version: 1
providers:
  api:
    credentials:
      %s: {value: %q}
    endpoints:
      - host: allowed.test
        port: %d
  bound:
    credentials:
      BOUND_TOKEN: {value: "bound-%s"}
`, credKey, value, port, value)
}

// credSource is a Config.Credentials whose text a test changes; a text
// that does not parse fails the load.
type credSource struct {
	mu   sync.Mutex
	text string
}

func (c *credSource) set(text string) { c.mu.Lock(); c.text = text; c.mu.Unlock() }

func (c *credSource) load() (*credentials.Store, error) {
	c.mu.Lock()
	text := c.text
	c.mu.Unlock()
	f, err := credentials.Parse([]byte(text))
	if err != nil {
		return nil, err
	}
	return credentials.Build(f, func(string) (string, bool) { return "", false })
}

// credUpstream is an HTTPS (h1 and h2) and plain HTTP server on one
// port each, for allowed.test and other.test; it records the
// credential-bearing parts of every request it gets.
type credUpstream struct {
	ca          *tlsca.Authority
	tlsPort     int
	plainPort   int
	mu          sync.Mutex
	seen        []string
	bodies      []string // "content-length body" of each request
	requestsGot atomic.Int64
	// handler, when set (before any request), answers instead.
	handler http.HandlerFunc
}

func newCredUpstream(t *testing.T) *credUpstream {
	t.Helper()
	ca, err := tlsca.New(tlsca.Options{Name: "cred-upstream"})
	if err != nil {
		t.Fatal(err)
	}
	u := &credUpstream{ca: ca}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.requestsGot.Add(1)
		if u.handler != nil {
			u.handler(w, r)
			return
		}
		u.mu.Lock()
		u.seen = append(u.seen, fmt.Sprintf("%s auth=%s key=%s q=%s", r.Host, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.URL.Query().Get("key")))
		u.mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies = append(u.bodies, fmt.Sprintf("%d %s", r.ContentLength, b))
		u.mu.Unlock()
		w.Write([]byte("ok"))
	})
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(hi.ServerName) },
		NextProtos: []string{"h2", "http/1.1"}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	plain := httptest.NewServer(h)
	t.Cleanup(plain.Close)
	u.tlsPort = srv.Listener.Addr().(*net.TCPAddr).Port
	u.plainPort = plain.Listener.Addr().(*net.TCPAddr).Port
	return u
}

func (u *credUpstream) last() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return ""
	}
	return u.seen[len(u.seen)-1]
}

func credPolicy(u *credUpstream) string {
	return fmt.Sprintf(`version: 1
network_policies:
  api:
    endpoints:
      - host: allowed.test
        port: %d
        protocol: rest
        access: full
      - host: other.test
        port: %d
        protocol: rest
        access: full
      - host: bound.test
        port: %d
        protocol: rest
        access: full
        credential_binding: {provider: bound}
      - host: allowed.test
        port: %d
      - host: other.test
        port: %d
    binaries:
      - path: /usr/bin/curl
`, u.tlsPort, u.tlsPort, u.tlsPort, u.plainPort, u.plainPort)
}

type credEnv struct {
	*testEnv
	up   *credUpstream
	ca   *tlsca.Authority
	src  *credSource
	logs *bytes.Buffer
}

func newCredEnv(t *testing.T) *credEnv {
	t.Helper()
	up := newCredUpstream(t)
	ca, err := tlsca.New(tlsca.Options{Name: "proxytest"})
	if err != nil {
		t.Fatal(err)
	}
	src := &credSource{text: credFile(credSecret, up.tlsPort)}
	var logs bytes.Buffer
	var logMu sync.Mutex
	env := newEnv(t, credPolicy(up), func(c *Config) {
		c.CA = ca
		c.UpstreamRoots = up.caPool()
		c.Credentials = src.load
		c.CredentialsPath = "/etc/palisade/credentials.yaml"
		c.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	env.dialer.mu.Lock()
	env.dialer.hosts["other.test"] = netip.MustParseAddr("127.0.0.1")
	env.dialer.hosts["bound.test"] = netip.MustParseAddr("127.0.0.1")
	env.dialer.mu.Unlock()
	return &credEnv{testEnv: env, up: up, ca: ca, src: src, logs: &logs}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (u *credUpstream) caPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(u.ca.Certificate())
	return p
}

func (e *credEnv) client(h2 bool) *http.Client {
	ie := &inspectEnv{testEnv: e.testEnv, ca: e.ca}
	return ie.client(h2)
}

// do sends one request with the placeholder in a header, X-Api-Key and
// the query, and returns the status and the denial reason (if any).
func (e *credEnv) do(t *testing.T, cl *http.Client, rawURL string, key string) (int, string) {
	t.Helper()
	ph := credentials.Placeholder(key)
	req, _ := http.NewRequest("POST", rawURL+"?key="+url.QueryEscape(ph)+"&a=1", strings.NewReader("body"))
	req.Header.Set("Authorization", "Bearer "+ph)
	req.Header.Set("X-Api-Key", ph)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 403 {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, ""
	}
	var d DenialBody
	json.NewDecoder(resp.Body).Decode(&d)
	return resp.StatusCode, d.Reason
}

// noSecrets fails when an event or log line holds a value or a
// placeholder, or an event about a request names a key (an error about
// the credentials file names the key to fix, never its value).
func (e *credEnv) noSecrets(t *testing.T) {
	t.Helper()
	all := bytes.Join(e.rec.Lines(), []byte("\n"))
	all = append(all, e.logs.Bytes()...)
	for _, s := range []string{credSecret, credSecret2, "bound-" + credSecret, "openshell:resolve", "openshell%3A"} {
		if bytes.Contains(all, []byte(s)) {
			t.Errorf("events or logs hold %q", s)
		}
	}
	for _, class := range []int{ocsf.ClassHTTPActivity, ocsf.ClassNetworkActivity, ocsf.ClassDetectionFinding} {
		for _, ev := range e.rec.ByClass(class) {
			b, _ := json.Marshal(ev)
			if bytes.Contains(b, []byte(credKey)) || bytes.Contains(b, []byte("BOUND_TOKEN")) {
				t.Errorf("event names a key: %s", b)
			}
		}
	}
}

// Placeholders in header fields and the query resolve to the value on
// the endpoint the credential is bound to (inspected HTTPS, h1 and h2,
// and forwarded http://), after the L7 decision; the same placeholder to
// another allowed endpoint is refused with 403 and a Detection Finding,
// and reaches nothing upstream.
func TestCredentialPlaceholdersResolveWhereBound(t *testing.T) {
	e := newCredEnv(t)
	wantSeen := func(host string, port int, secret string) string {
		return fmt.Sprintf("%s:%d auth=Bearer %s key=%s q=%s", host, port, secret, secret, secret)
	}
	for _, h2 := range []bool{false, true} {
		cl := e.client(h2)
		code, _ := e.do(t, cl, fmt.Sprintf("https://allowed.test:%d/v1/chat", e.up.tlsPort), credKey)
		if code != 200 || e.up.last() != wantSeen("allowed.test", e.up.tlsPort, credSecret) {
			t.Fatalf("h2=%v bound: %d, upstream saw %q", h2, code, e.up.last())
		}
		before := e.up.requestsGot.Load()
		code, reason := e.do(t, cl, fmt.Sprintf("https://other.test:%d/v1/chat", e.up.tlsPort), credKey)
		if code != 403 || reason != credentials.ReasonEndpointMismatch {
			t.Fatalf("h2=%v other host: %d %s", h2, code, reason)
		}
		code, reason = e.do(t, cl, fmt.Sprintf("https://allowed.test:%d/x", e.up.tlsPort), "NO_SUCH_KEY")
		if code != 403 || reason != credentials.ReasonUnknown {
			t.Fatalf("h2=%v unknown key: %d %s", h2, code, reason)
		}
		if n := e.up.requestsGot.Load(); n != before {
			t.Fatalf("h2=%v: a refused request reached the upstream", h2)
		}
		// A provider without endpoints resolves where the policy binds it.
		code, _ = e.do(t, cl, fmt.Sprintf("https://bound.test:%d/", e.up.tlsPort), "BOUND_TOKEN")
		if code != 200 || e.up.last() != wantSeen("bound.test", e.up.tlsPort, "bound-"+credSecret) {
			t.Fatalf("h2=%v policy binding: %d, upstream saw %q", h2, code, e.up.last())
		}
	}
	// Forwarded http://: the same rules.
	pu, _ := url.Parse("http://" + e.addr)
	fwd := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	defer fwd.CloseIdleConnections()
	// The forwarded endpoint (port plainPort) is not the one the provider
	// lists (tlsPort): refused.
	if code, reason := e.do(t, fwd, fmt.Sprintf("http://allowed.test:%d/v1", e.up.plainPort), credKey); code != 403 || reason != credentials.ReasonEndpointMismatch {
		t.Fatalf("forwarded, unbound port: %d %s", code, reason)
	}
	e.src.set(strings.Replace(credFile(credSecret, e.up.tlsPort), fmt.Sprintf("port: %d", e.up.tlsPort), fmt.Sprintf("ports: [%d, %d]", e.up.tlsPort, e.up.plainPort), 1))
	e.p.Reload("test")
	if code, _ := e.do(t, fwd, fmt.Sprintf("http://allowed.test:%d/v1", e.up.plainPort), credKey); code != 200 || e.up.last() != wantSeen("allowed.test", e.up.plainPort, credSecret) {
		t.Fatalf("forwarded, bound: %d, upstream saw %q", code, e.up.last())
	}
	if code, reason := e.do(t, fwd, fmt.Sprintf("http://other.test:%d/v1", e.up.plainPort), credKey); code != 403 || reason != credentials.ReasonEndpointMismatch {
		t.Fatalf("forwarded, other host: %d %s", code, reason)
	}

	// Findings: one per mismatch (3), none for the unknown key; the
	// refused requests' events are HTTP Activity denials naming the
	// reason; no event names the key, the placeholder or the value.
	findings := e.waitEvents(ocsf.ClassDetectionFinding, 1)
	misuse := 0
	for _, f := range findings {
		if types, _ := get(f, "finding_info", "types").([]any); len(types) == 1 && types[0] == ocsf.FindingTypeCredentialMisuse {
			misuse++
			if !strings.HasPrefix(fmt.Sprint(get(f, "finding_info", "title")), "credential placeholder sent to ") || get(f, "action") != "Denied" ||
				get(f, "actor", "process", "file", "path") != curlExe {
				t.Errorf("finding %v", f)
			}
		}
	}
	if misuse < 1 {
		t.Errorf("no Credential Misuse finding among %d findings", len(findings))
	}
	reasons := map[string]int{}
	for _, ev := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
		if ev["status_code"] == OutcomePolicyDenied {
			reasons[fmt.Sprint(get(ev, "unmapped", "egress_proxy", "reason"))]++
		}
	}
	if reasons[credentials.ReasonEndpointMismatch] == 0 || reasons[credentials.ReasonUnknown] == 0 {
		t.Errorf("denied HTTP events by reason: %v", reasons)
	}
	e.noSecrets(t)
}

// Rotation: a reload swaps values and bindings together; a reload that
// fails revokes every value (not the old set) until one succeeds; each
// is a 5019 event that names neither key nor value.
func TestCredentialRotationAndRevocation(t *testing.T) {
	e := newCredEnv(t)
	cl := e.client(false)
	target := fmt.Sprintf("https://allowed.test:%d/", e.up.tlsPort)
	if code, _ := e.do(t, cl, target, credKey); code != 200 || !strings.Contains(e.up.last(), credSecret) {
		t.Fatalf("before rotation: %d %q", code, e.up.last())
	}
	e.src.set(credFile(credSecret2, e.up.tlsPort))
	e.p.Reload("test")
	if code, _ := e.do(t, cl, target, credKey); code != 200 || !strings.Contains(e.up.last(), credSecret2) {
		t.Fatalf("after rotation: %d %q", code, e.up.last())
	}
	e.src.set("version: 1\nproviders: {api: {credentials: {" + credKey + ": {value: ''}}}}\n")
	e.p.Reload("test")
	if code, reason := e.do(t, cl, target, credKey); code != 403 || reason != credentials.ReasonRevoked {
		t.Fatalf("after a failed reload: %d %s", code, reason)
	}
	if !e.p.Credentials().IsRevoked() {
		t.Fatal("store not revoked")
	}
	e.src.set(credFile(credSecret2, e.up.tlsPort))
	e.p.Reload("test")
	if code, _ := e.do(t, cl, target, credKey); code != 200 || !strings.Contains(e.up.last(), credSecret2) {
		t.Fatalf("after a good reload: %d %q", code, e.up.last())
	}
	var loads, reloads, revoked int
	for _, ev := range e.rec.ByClass(ocsf.ClassDeviceConfigStateChange) {
		switch {
		case ev["activity_name"] == ocsf.ActivityCredentialsLoad:
			loads++
		case ev["activity_name"] == ocsf.ActivityCredentialsReload && ev["status"] == "Success":
			reloads++
		case ev["activity_name"] == ocsf.ActivityCredentialsReload:
			revoked++
			if get(ev, "state") != "Disabled" {
				t.Errorf("revocation event %v", ev)
			}
		}
	}
	if loads != 1 || reloads != 2 || revoked != 1 {
		t.Errorf("credential events: %d loads, %d reloads, %d revocations", loads, reloads, revoked)
	}
	e.noSecrets(t)
}

// The policy and the credentials must agree at start and at every
// policy reload: a binding to a provider the credentials do not have is
// refused, and so is a policy that lets a bound endpoint's tunnels pass
// uninspected.
func TestCredentialPolicyAgreement(t *testing.T) {
	e := newCredEnv(t)
	good := credPolicy(e.up)
	e.writePolicy(strings.Replace(good, "provider: bound", "provider: nosuch", 1))
	if _, err := e.p.Reload("test"); err == nil || !strings.Contains(err.Error(), "the credentials file has no provider nosuch") {
		t.Errorf("unknown provider: %v", err)
	}
	uninspected := strings.Replace(good, "        protocol: rest\n        access: full\n", "", 1)
	e.writePolicy(uninspected)
	if _, err := e.p.Reload("test"); err == nil || !strings.Contains(err.Error(), "does not inspect its CONNECT tunnels") {
		t.Errorf("uninspected bound endpoint: %v", err)
	}
	// Without a credentials file a binding cannot load at all.
	e.writePolicy(good)
	_, err := New(Config{PolicyPath: e.policyPath, Compile: CompileDecision, Canonicalize: CanonicalHost, Dialer: e.dialer})
	if err == nil || !strings.Contains(err.Error(), "no credentials file is loaded") {
		t.Errorf("binding without credentials: %v", err)
	}
	// Credentials that do not load stop the start.
	bad := &credSource{text: "version: 1\n"}
	_, err = New(Config{PolicyPath: e.policyPath, Compile: CompileDecision, Canonicalize: CanonicalHost, Dialer: e.dialer, Credentials: bad.load})
	if err == nil || !strings.Contains(err.Error(), "credentials do not load") {
		t.Errorf("bad credentials at start: %v", err)
	}
}

// A request without placeholders is untouched by the resolver: no copy
// of its header, the same query.
func TestCredentialNoPlaceholderPassesThrough(t *testing.T) {
	e := newCredEnv(t)
	h := http.Header{"Authorization": {"Bearer real-looking"}}
	q := "a=1"
	if r := e.p.resolveCredentials("allowed.test", e.up.tlsPort, nil, h, &q, nil, false); r != nil {
		t.Errorf("resolver made for a request without placeholders")
	}
	if testing.AllocsPerRun(100, func() { e.p.resolveCredentials("allowed.test", e.up.tlsPort, nil, h, &q, nil, false) }) != 0 {
		t.Errorf("a request without placeholders allocates")
	}
}

// Watch reloads the credentials when their file changes (it lives in
// another directory than the policy): a new value is in force without a
// signal, and a broken file revokes.
func TestWatchReloadsCredentials(t *testing.T) {
	up := newCredUpstream(t)
	dir := t.TempDir()
	path := dir + "/credentials.yaml"
	write := func(text string) {
		if err := fsutil.WriteFileAtomic(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(credFile(credSecret, up.tlsPort))
	load := func() (*credentials.Store, error) {
		b, err := os.ReadFile(path) // the ownership checks are credentials.ReadFile's tests'
		if err != nil {
			return nil, err
		}
		f, err := credentials.Parse(b)
		if err != nil {
			return nil, err
		}
		return credentials.Build(f, func(string) (string, bool) { return "", false })
	}
	env := newEnv(t, credPolicy(up), func(c *Config) { c.Credentials, c.CredentialsPath = load, path })
	env.watch()
	resolved := func() string {
		h := http.Header{"A": {credentials.Placeholder(credKey)}}
		q := ""
		r := env.p.resolveCredentials("allowed.test", up.tlsPort, nil, h, &q, nil, false)
		if r == nil || r.Err() != nil {
			return "refused"
		}
		return h.Get("A")
	}
	if got := resolved(); got != credSecret {
		t.Fatalf("before: %q", got)
	}
	write(credFile(credSecret2, up.tlsPort))
	waitFor(t, "the rotated value", func() bool { return resolved() == credSecret2 })
	write("version: 1\n")
	waitFor(t, "revocation", func() bool { return env.p.Credentials().IsRevoked() })
	if got := resolved(); got != "refused" {
		t.Errorf("after a broken file: %q", got)
	}
}

// /status says which credentials are in force, and when they are
// revoked, why.
func TestCredentialStatus(t *testing.T) {
	e := newCredEnv(t)
	st := e.p.Status().Credentials
	if st == nil || st.Generation != 1 || st.Credentials != 2 || st.Providers != 2 || st.Revoked {
		t.Fatalf("status %+v", st)
	}
	e.src.set("version: 1\n")
	e.p.Reload("test")
	st = e.p.Status().Credentials
	if !st.Revoked || !strings.Contains(st.LastError, "is required (at least one provider)") {
		t.Errorf("revoked status %+v", st)
	}
	b, _ := json.Marshal(e.p.Status())
	if bytes.Contains(b, []byte(credKey)) || bytes.Contains(b, []byte(credSecret)) {
		t.Errorf("status names a key or a value: %s", b)
	}
}

func (u *credUpstream) lastBody() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) == 0 {
		return ""
	}
	return u.bodies[len(u.bodies)-1]
}

// bodyCredFile binds API_TOKEN (a value that needs escaping in JSON and
// in a form) to allowed.test on both upstream ports.
func bodyCredFile(u *credUpstream) string {
	return fmt.Sprintf(`version: 1
providers:
  api:
    credentials:
      %s: {value: %q}
    endpoints:
      - host: allowed.test
        ports: [%d, %d]
`, credKey, bodySecret, u.tlsPort, u.plainPort)
}

const bodySecret = `sk-"quoted"\back&slash=1 +x`

// bodyPolicy: allowed.test opts in to body rewrite on both ports
// (inspected HTTPS and forwarded http://); other.test (HTTPS) does not.
func bodyPolicy(u *credUpstream) string {
	return fmt.Sprintf(`version: 1
network_policies:
  api:
    endpoints:
      - host: allowed.test
        ports: [%d, %d]
        protocol: rest
        access: full
        request_body_credential_rewrite: true
      - host: other.test
        port: %d
        protocol: rest
        access: full
    binaries:
      - path: /usr/bin/curl
`, u.tlsPort, u.plainPort, u.tlsPort)
}

// Where the endpoint opts in, placeholders in JSON, form and text
// bodies resolve (escaped for their encoding, Content-Length correct;
// chunked bodies too), other types pass as they are, a body over 256
// KiB is refused with 413 before anything reaches the upstream, and a
// placeholder in a body to an endpoint the credential is not bound to is
// refused like one in a header. Without the opt-in bodies are not read.
func TestCredentialBodyRewrite(t *testing.T) {
	e := newCredEnv(t)
	e.src.set(bodyCredFile(e.up))
	e.writePolicy(bodyPolicy(e.up))
	if _, err := e.p.Reload("test"); err != nil {
		t.Fatal(err)
	}
	ph := credentials.Placeholder(credKey)
	jsonWant, _ := json.Marshal(map[string]string{"token": bodySecret})
	pu, _ := url.Parse("http://" + e.addr)
	fwd := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	defer fwd.CloseIdleConnections()
	type bodyCase struct {
		name, ctype, body string
		chunked           bool
		check             func(got string) bool
	}
	cases := []bodyCase{
		{"json", "application/json", `{"token":"` + ph + `"}`, false, func(got string) bool { return got == fmt.Sprintf("%d %s", len(jsonWant), jsonWant) }},
		{"json chunked", "application/json; charset=utf-8", `{"token":"` + ph + `"}`, true, func(got string) bool { return got == fmt.Sprintf("%d %s", len(jsonWant), jsonWant) }},
		{"form", "application/x-www-form-urlencoded", "a=1&token=" + url.QueryEscape(ph), false, func(got string) bool {
			_, body, _ := strings.Cut(got, " ")
			q, err := url.ParseQuery(body)
			return err == nil && q.Get("token") == bodySecret && q.Get("a") == "1"
		}},
		{"text", "text/plain", "token " + ph + "\n", false, func(got string) bool {
			return got == fmt.Sprintf("%d token %s\n", len("token ")+len(bodySecret)+1, bodySecret)
		}},
		{"other type", "application/octet-stream", ph, false, func(got string) bool { return got == fmt.Sprintf("%d %s", len(ph), ph) }},
	}
	clients := map[string]*http.Client{"h1": e.client(false), "h2": e.client(true), "forwarded": fwd}
	for _, cn := range []string{"h1", "h2", "forwarded"} {
		cl := clients[cn]
		target := fmt.Sprintf("https://allowed.test:%d/upload", e.up.tlsPort)
		if cn == "forwarded" {
			target = fmt.Sprintf("http://allowed.test:%d/upload", e.up.plainPort)
		}
		for _, tc := range cases {
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(strings.NewReader(tc.body)) // no length: chunked on h1
			}
			req, _ := http.NewRequest("POST", target, body)
			req.Header.Set("Content-Type", tc.ctype)
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", cn, tc.name, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !tc.check(e.up.lastBody()) {
				t.Errorf("%s %s: %d, upstream got %q", cn, tc.name, resp.StatusCode, e.up.lastBody())
			}
		}
		// Over the bound: 413, nothing upstream (sized, and chunked).
		before := e.up.requestsGot.Load()
		for _, chunked := range []bool{false, true} {
			var body io.Reader = strings.NewReader(strings.Repeat("x", credentials.MaxBody+1))
			if chunked {
				body = io.MultiReader(body)
			}
			req, _ := http.NewRequest("POST", target, body)
			req.Header.Set("Content-Type", "text/plain")
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatalf("%s large: %v", cn, err)
			}
			var eb errorBody
			json.NewDecoder(resp.Body).Decode(&eb)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || eb.Reason != credentials.ReasonBodyTooLarge {
				t.Errorf("%s large body (chunked %v): %d %+v", cn, chunked, resp.StatusCode, eb)
			}
		}
		if n := e.up.requestsGot.Load(); n != before {
			t.Errorf("%s: a body too large reached the upstream", cn)
		}
	}
	// other.test: no opt-in, the body is not read (the placeholder goes
	// as it is); a header placeholder there is still refused.
	cl := e.client(false)
	resp, err := cl.Post(fmt.Sprintf("https://other.test:%d/x", e.up.tlsPort), "application/json", strings.NewReader(`{"t":"`+ph+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(e.up.lastBody(), ph) {
		t.Errorf("no opt-in: %d %q", resp.StatusCode, e.up.lastBody())
	}
	// A body placeholder for an unbound key is refused.
	resp, err = cl.Post(fmt.Sprintf("https://allowed.test:%d/x", e.up.tlsPort), "application/json", strings.NewReader(`{"t":"`+credentials.Placeholder("BOUND_TOKEN")+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var d DenialBody
	json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	if resp.StatusCode != 403 || d.Reason != credentials.ReasonUnknown {
		t.Errorf("unknown key in a body: %d %+v", resp.StatusCode, d)
	}
	e.noSecrets(t)
}

// Expect: 100-continue on an opted-in endpoint: the proxy asks for the
// body (100), resolves it and forwards it; a request refused for a
// header placeholder is answered before the client sends the body.
func TestCredentialBodyExpectContinue(t *testing.T) {
	e := newCredEnv(t)
	e.src.set(bodyCredFile(e.up))
	e.writePolicy(bodyPolicy(e.up))
	if _, err := e.p.Reload("test"); err != nil {
		t.Fatal(err)
	}
	ph := credentials.Placeholder(credKey)
	body := `{"token":"` + ph + `"}`
	for _, target := range []string{fmt.Sprintf("http://allowed.test:%d/x", e.up.plainPort), fmt.Sprintf("http://other.test:%d/x", e.up.plainPort)} {
		c := e.dial()
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\nAuthorization: Bearer %s\r\n\r\n", target, len(body), ph)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if strings.Contains(target, "other.test") {
			// other.test has no forwarded endpoint in bodyPolicy: refused
			// by the policy before any 100.
			if resp.StatusCode != 403 {
				t.Errorf("%s: %d, want 403 before the body", target, resp.StatusCode)
			}
			continue
		}
		if resp.StatusCode != 100 {
			t.Fatalf("%s: %d, want 100 Continue", target, resp.StatusCode)
		}
		io.WriteString(c, body)
		resp, err = http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s after the body: %v %v", target, resp, err)
		}
		want, _ := json.Marshal(map[string]string{"token": bodySecret})
		if got := e.up.lastBody(); got != fmt.Sprintf("%d %s", len(want), want) || !strings.Contains(e.up.last(), "auth=Bearer "+bodySecret) {
			t.Errorf("upstream got %q / %q", got, e.up.last())
		}
	}
	// Inspected h1: a header placeholder bound elsewhere is refused with
	// no 100 sent.
	cl := e.client(false)
	req, _ := http.NewRequest("POST", fmt.Sprintf("https://other.test:%d/x", e.up.tlsPort), strings.NewReader(body))
	req.Header.Set("Expect", "100-continue")
	req.Header.Set("Authorization", "Bearer "+ph)
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("inspected, bound elsewhere: %d", resp.StatusCode)
	}
}

// Rotation is atomic: a reload that changes a credential's value and
// its binding together (value A for allowed.test, then value B for
// other.test, and back) while requests to both hosts are in flight
// never sends a value where the set in force with it does not bind it:
// allowed.test only ever gets A, other.test only ever B (each request
// resolves against one store, swapped by one pointer store). The rounds
// are bounded in count and time.
func TestCredentialRotationIsAtomic(t *testing.T) {
	e := newCredEnv(t)
	const a, b = "sk-rotate-aaaa", "sk-rotate-bbbb"
	file := func(value, host string) string {
		return fmt.Sprintf("version: 1\nproviders:\n  api:\n    credentials:\n      %s: {value: %q}\n    endpoints:\n      - host: %s\n        port: %d\n",
			credKey, value, host, e.up.tlsPort)
	}
	e.src.set(file(a, "allowed.test"))
	e.p.Reload("test")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(20 * time.Second)
	for _, host := range []string{"allowed.test", "other.test"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := e.client(false)
			ph := credentials.Placeholder(credKey)
			for i := 0; i < 2000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", fmt.Sprintf("https://%s:%d/r", host, e.up.tlsPort), nil)
				req.Header.Set("Authorization", "Bearer "+ph)
				resp, err := cl.Do(req)
				if err != nil {
					t.Errorf("%s: %v", host, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	for i := 0; i < 60 && time.Now().Before(deadline); i++ {
		if i%2 == 0 {
			e.src.set(file(b, "other.test"))
		} else {
			e.src.set(file(a, "allowed.test"))
		}
		if _, err := e.p.Reload("test"); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	e.up.mu.Lock()
	seen := slices.Clone(e.up.seen)
	e.up.mu.Unlock()
	var okA, okB int
	for _, s := range seen {
		switch {
		case strings.HasPrefix(s, "allowed.test:") && strings.Contains(s, "auth=Bearer "+a):
			okA++
		case strings.HasPrefix(s, "other.test:") && strings.Contains(s, "auth=Bearer "+b):
			okB++
		default:
			t.Errorf("a value went where the set in force with it does not bind it: %s", s)
		}
	}
	if okA == 0 || okB == 0 {
		t.Errorf("allowed.test got A %d times, other.test got B %d times: the rotation did not happen under traffic", okA, okB)
	}
	t.Logf("%d requests reached the upstream: allowed.test with A %d, other.test with B %d", len(seen), okA, okB)
}
