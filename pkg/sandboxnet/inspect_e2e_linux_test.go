//go:build linux

package sandboxnet

import (
	"archive/zip"
	"bytes"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The HTTPS acceptance of TLS inspection, in a real sandbox: a server in
// the test internet (certificates from the nettest CA, h2 and HTTP/1.1)
// serves git over smart HTTP (git http-backend), a tiny pip simple index
// and an echo; the sandbox trusts only what the proxy's CA bundle gives it.

// inspectNetwork is the network part of the test policy (the rest is
// labPolicy's, with the helper's directory readable).
const inspectNetwork = `  registry:
    endpoints:
      - host: allowed.test
        port: 8443
        protocol: rest
        access: %s
    binaries:
      - path: /usr/bin/curl
      - path: /usr/lib/git-core/git-remote-http
      - path: /usr/bin/python3*
      - path: %s
`

const inspectPort = 8443

// inspectLab is the lab plus the HTTPS server and the helper binary.
type inspectLab struct {
	*lab
	gitRoot   string
	helper    string
	helperDir string
	seen      chan string
}

func newInspectLab(t *testing.T) *inspectLab {
	t.Helper()
	testutil.RequireCommand(t, "git")
	testutil.RequireCommand(t, "python3")
	if _, err := os.Stat("/usr/lib/git-core/git-http-backend"); err != nil {
		testutil.RequireData(t, "git http-backend (package git)", err)
	}
	l := &inspectLab{lab: newLab(t, "")}
	// The Go h2 client: this test binary, copied where the sandbox can
	// read it and the policy can name it (not under a writable path).
	d, err := os.MkdirTemp("/var/tmp", "palisade-h2-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	l.helperDir, l.helper = d, filepath.Join(d, "h2client")
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.helper, self, 0o755); err != nil {
		t.Fatal(err)
	}
	l.setAccess("read-only")
	l.gitRoot = filepath.Join(l.dir, "git")
	l.makeRepo()
	l.serve()
	return l
}

func (l *inspectLab) setAccess(access string) {
	head := labPolicy[:strings.Index(labPolicy, "  web:")]
	head = strings.Replace(head, "/etc]", "/etc, "+l.helperDir+"]", 1)
	l.write(head + fmt.Sprintf(inspectNetwork, access, l.helper))
}

func (l *inspectLab) git(dir string, args ...string) {
	l.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@test")
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func (l *inspectLab) makeRepo() {
	bare := filepath.Join(l.gitRoot, "repo.git")
	os.MkdirAll(bare, 0o755)
	l.git(bare, "init", "-q", "--bare", "-b", "main")
	l.git(bare, "config", "http.receivepack", "true")
	seed := filepath.Join(l.dir, "seed")
	os.MkdirAll(seed, 0o755)
	l.git(seed, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(seed, "README"), []byte("hello\n"), 0o644)
	l.git(seed, "add", "README")
	l.git(seed, "commit", "-q", "-m", "first")
	l.git(seed, "push", "-q", bare, "main")
}

// wheel is a minimal valid wheel for pip download.
func wheel(t *testing.T) []byte {
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	files := map[string]string{
		"tinypkg/__init__.py":                 "",
		"tinypkg-0.1.dist-info/METADATA":      "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
		"tinypkg-0.1.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: palisade-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"tinypkg-0.1.dist-info/top_level.txt": "tinypkg\n",
	}
	var record strings.Builder
	for _, name := range []string{"tinypkg/__init__.py", "tinypkg-0.1.dist-info/METADATA", "tinypkg-0.1.dist-info/WHEEL", "tinypkg-0.1.dist-info/top_level.txt"} {
		w, _ := z.Create(name)
		io.WriteString(w, files[name])
		sum := sha256.Sum256([]byte(files[name]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[name]))
	}
	record.WriteString("tinypkg-0.1.dist-info/RECORD,,\n")
	w, _ := z.Create("tinypkg-0.1.dist-info/RECORD")
	io.WriteString(w, record.String())
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// serve starts the HTTPS server in the internet namespace on :8443.
func (l *inspectLab) serve() {
	t := l.t
	whl := wheel(t)
	whlSum := sha256.Sum256(whl)
	l.seen = make(chan string, 1000)
	mux := http.NewServeMux()
	mux.Handle("/git/", &cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend", Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + l.gitRoot, "GIT_HTTP_EXPORT_ALL=1"},
	})
	mux.HandleFunc("/simple/tinypkg/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/tinypkg-0.1-py3-none-any.whl#sha256=%x">tinypkg-0.1-py3-none-any.whl</a></body></html>`, whlSum)
	})
	mux.HandleFunc("/files/tinypkg-0.1-py3-none-any.whl", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(whl)
	})
	mux.HandleFunc("/echo/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"method": r.Method, "path": r.URL.Path, "proto": r.Proto})
	})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case l.seen <- r.Method + " " + r.URL.Path:
		default:
		}
		mux.ServeHTTP(w, r)
	})
	ln, err := l.inet.Listen("tcp", fmt.Sprintf(":%d", inspectPort))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: l.inet.TLSConfig(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(ln, srv.TLSConfig))
	t.Cleanup(func() { srv.Close() })
}

// run runs script in a sandbox with the internet CA as the proxy's
// upstream bundle and returns its "name=value" results.
func (l *inspectLab) run(script string) (map[string]string, string) {
	l.t.Helper()
	name := "insp-" + randHex(4)
	cmd := exec.Command(l.sup, "run", "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--keep", "--name", name,
		"--upstream-ca-bundle", l.inet.CAFile(), "--workdir", l.wd,
		"--env", "H2URL=https://allowed.test:8443/echo/h2", "--", "/bin/sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		l.t.Logf("sandbox stderr:\n%s", stderr.String())
		l.t.Fatalf("sandbox run: %v\n%s", err, out)
	}
	l.t.Logf("sandbox output:\n%s", out)
	return results(out), name
}

func randHex(n int) string {
	b := make([]byte, n)
	f, _ := os.Open("/dev/urandom")
	io.ReadFull(f, b)
	f.Close()
	return hex.EncodeToString(b)
}

const inspectScript = `
B=https://allowed.test:8443
printf 'env=%s|%s|%s|%s|%s|%s\n' "$SSL_CERT_FILE" "$REQUESTS_CA_BUNDLE" "$CURL_CA_BUNDLE" "$NODE_EXTRA_CA_CERTS" "$GIT_SSL_CAINFO" "$PIP_CERT"
printf 'system_bundle_has_proxy_ca=%s\n' "$(grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt)"
printf 'bundle_writable=%s\n' "$( (echo x >> /run/palisade/ca-bundle.pem) 2>/dev/null && echo yes || echo no)"
c() { n=$1; shift; printf '%s=' "$n"; curl -s -o /tmp/b -w '%{http_code} %{http_version}' --max-time 20 "$@"; printf ' %s\n' "$(tr -d '\n' < /tmp/b)"; }
c get_h1 --http1.1 "$B/echo/a?token=querysecret"
c post_h1 --http1.1 -X POST -d payload "$B/echo/a"
c get_h2 --http2 "$B/echo/b"
c post_gitsuffix --http2 -X POST -H 'Content-Type: application/json' -d '{}' "$B/api/v4/projects/1/repository/files/git-upload-pack?branch=main"
c get_override --http1.1 -H 'X-HTTP-Method-Override: DELETE' "$B/echo/a"
c post_h2 --http2 -X POST -d payload "$B/echo/b"
printf 'keepalive=%s\n' "$(curl -s --http1.1 -o /dev/null -o /dev/null -w '%{http_code}:%{num_connects} ' "$B/echo/1" "$B/echo/2")"
printf 'python_get=%s\n' "$(python3 -c '
import urllib.request
print(urllib.request.urlopen("https://allowed.test:8443/echo/py", timeout=20).status)' 2>&1 | tail -1)"
printf 'python_post=%s\n' "$(python3 -c '
import urllib.request, urllib.error, json
try:
    urllib.request.urlopen(urllib.request.Request("https://allowed.test:8443/echo/py", data=b"x", method="POST"), timeout=20)
    print("allowed")
except urllib.error.HTTPError as e:
    print(e.code, json.load(e)["reason"])' 2>&1 | tail -1)"
python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir -q --index-url $B/simple/ -d /tmp/dl tinypkg >/tmp/pip.log 2>&1
printf 'pip=%s %s\n' "$?" "$(ls /tmp/dl 2>/dev/null | tr '\n' ' ')"
tail -3 /tmp/pip.log | tr '\n' ' ' | sed 's/^/pip_log=/'; echo
H2HELPER=1 @HELPER@ -test.run='^TestHelperH2Client$' >/tmp/h2.log 2>&1
grep '^h2' /tmp/h2.log; printf 'h2log=%s\n' "$(tail -5 /tmp/h2.log | tr '\n' ' ')"

rm -rf clone
git clone -q $B/git/repo.git clone >/tmp/clone.log 2>&1; printf 'clone=%s %s\n' "$?" "$(cat clone/README 2>/dev/null)"
printf 'clone_log=%s\n' "$(tr '\n' ' ' < /tmp/clone.log)"
cd clone && echo more >> README && git -c user.name=a -c user.email=a@test commit -qam second && cd ..
(cd clone && git push -q origin main) >/tmp/push.log 2>&1; printf 'push=%s\n' "$?"
printf 'push_log=%s\n' "$(tr '\n' ' ' < /tmp/push.log)"
printf 'bundle_sha=%s\n' "$(sha256sum < /run/palisade/ca-bundle.pem | cut -c1-64)"
printf 'system_sha=%s\n' "$(sha256sum < /etc/ssl/certs/ca-certificates.crt | cut -c1-64)"
`

// TestHelperH2Client is the Go HTTP/2 client run inside the sandbox (a
// copy of this test binary); it does nothing unless H2HELPER is set.
func TestHelperH2Client(t *testing.T) {
	if os.Getenv("H2HELPER") == "" {
		return
	}
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
	if err := http2.ConfigureTransport(tr); err != nil {
		fmt.Printf("h2err=%v\n", err)
		return
	}
	cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	for _, m := range []string{"GET", "DELETE"} {
		req, _ := http.NewRequest(m, os.Getenv("H2URL"), nil)
		resp, err := cl.Do(req)
		if err != nil {
			fmt.Printf("h2%s=error %v\n", strings.ToLower(m), err)
			continue
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		fmt.Printf("h2%s=%d %s %v\n", strings.ToLower(m), resp.StatusCode, resp.Proto, body["reason"])
	}
}

func TestInspectedHTTPSInSandbox(t *testing.T) {
	l := newInspectLab(t)
	script := strings.ReplaceAll(inspectScript, "@HELPER@", l.helper)
	r, name := l.run(script)

	want := strings.Repeat("/run/palisade/ca-bundle.pem|", 6)
	if r["env"] != strings.TrimSuffix(want, "|") {
		t.Errorf("CA variables: %q", r["env"])
	}
	if r["bundle_writable"] != "no" {
		t.Errorf("the sandbox could write its trust bundle")
	}
	check := func(name, prefix string) {
		t.Helper()
		if !strings.HasPrefix(r[name], prefix) {
			t.Errorf("%s = %q, want prefix %q", name, r[name], prefix)
		}
	}
	check("get_h1", "200 1.1 ")
	check("post_h1", `403 1.1 {"error":"policy_denied","host":"allowed.test","port":8443,"binary":"/usr/bin/curl"`)
	if !strings.Contains(r["post_h1"], `"reason":"l7_access_denied","method":"POST","path":"/echo/a"`) {
		t.Errorf("post_h1 denial body: %q", r["post_h1"])
	}
	check("get_h2", "200 2 ")
	// Red-team regressions in a real sandbox: a REST write whose path ends
	// in git's fetch name, and a GET that frameworks read as a DELETE.
	check("post_gitsuffix", `403 2 {"error":"policy_denied"`)
	check("get_override", `403 1.1 {"error":"policy_denied"`)
	check("post_h2", `403 2 {"error":"policy_denied"`)
	check("keepalive", "200:1 200:0 ") // the second request reused the connection
	check("python_get", "200")
	check("python_post", "403 l7_access_denied")
	check("pip", "0 tinypkg-0.1-py3-none-any.whl")
	check("h2get", "200 HTTP/2.0")
	check("h2delete", "403 HTTP/2.0 l7_access_denied")
	check("clone", "0 hello")
	if r["push"] == "0" {
		t.Errorf("push under read-only succeeded")
	}
	if !strings.Contains(r["push_log"], `remote: {"error":"policy_denied"`) || !strings.Contains(r["push_log"], `"reason":"l7_access_denied"`) {
		t.Errorf("push output does not show the denial: %q", r["push_log"])
	}

	// The sandbox's bundle is the system roots plus exactly the proxy CA.
	view, err := os.ReadFile(filepath.Join(l.state, name, BundleName))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(view)
	if hx := hex.EncodeToString(sum[:]); r["bundle_sha"] != hx || r["system_sha"] != hx {
		t.Errorf("the sandbox sees %s at its bundle path and %s at the system path, want the host's bundle %s", r["bundle_sha"], r["system_sha"], hx)
	}
	caPEM := lastCert(t, view)
	ca, err := x509.ParseCertificate(caPEM)
	if err != nil || !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("last bundle certificate is not the proxy's ECDSA CA: %v", err)
	}
	scanForKey(t, ca, l.state, l.wd, l.events, l.helperDir)
	scanBytesForKey(t, ca, "sandbox view of the bundle", view)

	// Every request was one HTTP Activity; no query string in any event.
	evs := l.eventLines()
	var https int
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), "querysecret") {
			t.Errorf("event carries a query string: %s", b)
		}
		if ev["class_uid"] == float64(4002) {
			https++
			if ev["status_code"] != "allowed" {
				t.Logf("refused: %v (%v)", ev["message"], ev["status_detail"])
			}
		}
	}
	if https < 8 {
		t.Errorf("only %d HTTP Activity events", https)
	}

	// read-write: the push goes through.
	l.setAccess("read-write")
	r, _ = l.run(strings.ReplaceAll(inspectScript, "@HELPER@", l.helper))
	check("clone", "0 hello")
	if r["push"] != "0" {
		t.Errorf("push under read-write failed: %q", r["push_log"])
	}
}

func lastCert(t *testing.T, bundle []byte) []byte {
	var last []byte
	for {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			break
		}
		last = b.Bytes
	}
	if last == nil {
		t.Fatal("no certificate in the sandbox's bundle")
	}
	return last
}

// scanForKey fails if any file under the roots holds the CA's private
// key: a PEM private key block at all, or the 32-byte P-256 scalar whose
// public point is the CA's, raw, hex or base64.
func scanForKey(t *testing.T, ca *x509.Certificate, roots ...string) {
	t.Helper()
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			if fi, err := d.Info(); err != nil || fi.Size() > 4<<20 {
				return nil // the helper binary and large files: not written by the proxy
			}
			b, err := os.ReadFile(p)
			if err == nil {
				scanBytesForKey(t, ca, p, b)
			}
			return nil
		})
	}
}

var hexRun = regexp.MustCompile(`[0-9a-fA-F]{64,}`)
var b64Run = regexp.MustCompile(`[A-Za-z0-9+/_-]{43,}={0,2}`)

func scanBytesForKey(t *testing.T, ca *x509.Certificate, what string, b []byte) {
	t.Helper()
	if bytes.Contains(b, []byte("PRIVATE KEY")) {
		t.Errorf("%s holds a PEM private key", what)
	}
	pub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		t.Fatal("CA key is not ECDSA")
	}
	want, err := pub.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	try := func(buf []byte) {
		for i := 0; i+32 <= len(buf); i++ {
			k, err := ecdh.P256().NewPrivateKey(buf[i : i+32])
			if err == nil && k.PublicKey().Equal(want) {
				t.Errorf("%s holds the CA private key", what)
				return
			}
		}
	}
	try(b)
	for _, m := range hexRun.FindAll(b, -1) {
		if d, err := hex.DecodeString(string(m[:len(m)&^1])); err == nil {
			try(d)
		}
	}
	for _, m := range b64Run.FindAll(b, -1) {
		s := strings.TrimRight(string(m), "=")
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			if d, err := enc.DecodeString(s[:len(s)/4*4]); err == nil {
				try(d)
			}
		}
	}
}
