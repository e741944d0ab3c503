//go:build linux

package sandboxnet

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// The SigV4 acceptance (issue 26 item 3) in a real sandbox: botocore
// (Debian's python3-botocore) holds only placeholder credentials (the
// sandbox's AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN) and talks S3 to a local upstream that verifies
// every signature with the real secret, with botocore's own signer
// (pkg/sigv4/testdata/verifier.py), independently of pkg/sigv4.

const sigv4Port = 9443

var sigv4Hosts = []string{"s3.us-east-1.amazonaws.com", "s3.eu-west-1.amazonaws.com", "minio.test"}

const sigv4Network = `  aws:
    endpoints:
      - host: s3.us-east-1.amazonaws.com
        port: 9443
        protocol: rest
        access: full
        credential_signing: sigv4
        signing_service: s3
      - host: s3.eu-west-1.amazonaws.com
        port: 9443
        protocol: rest
        access: full
        credential_signing: sigv4
        signing_service: s3
      - host: minio.test
        port: 9443
        protocol: rest
        access: full
        credential_signing: sigv4
        signing_service: s3
    binaries:
      - path: /usr/bin/curl
      - path: /usr/bin/python3*
`

// sigv4Script: botocore's signed-body PUT (a file-like body: botocore
// sends Expect: 100-continue), unsigned-payload GET, a PUT signed for
// another region, a GET to a host naming no region; then a chunk-signed
// upload and curl's own SigV4 upload with Expect: 100-continue (without
// the proxy's 100 it would wait past --max-time).
const sigv4Script = `
/usr/bin/python3 - <<'PY'
import io, os, botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError
ca = os.environ["REQUESTS_CA_BUNDLE"]
s = botocore.session.get_session()
def client(host, signed=True):
    cfg = Config(s3={"addressing_style": "path", "payload_signing_enabled": signed}, retries={"max_attempts": 1},
                 connect_timeout=10, read_timeout=20)
    return s.create_client("s3", region_name="us-east-1", endpoint_url="https://%s:9443" % host, verify=ca, config=cfg)
res = {}
def run(name, fn):
    try:
        res[name] = "ok " + str(fn())
    except ClientError as e:
        res[name] = "%s %s" % (e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"].get("Code", ""))
    except Exception as e:
        res[name] = "error %r" % e
c = client("s3.us-east-1.amazonaws.com")
run("put_signed", lambda: c.put_object(Bucket="bkt", Key="dir/hello world+1.txt", Body=io.BytesIO(b"hello from the sandbox"))["ETag"])
u = client("s3.us-east-1.amazonaws.com", signed=False)
run("get_unsigned", lambda: u.get_object(Bucket="bkt", Key="dir/hello world+1.txt")["Body"].read().decode())
run("wrong_region", lambda: client("s3.eu-west-1.amazonaws.com").put_object(Bucket="bkt", Key="k", Body=b"x")["ETag"])
run("no_region", lambda: client("minio.test").get_object(Bucket="bkt", Key="k")["Body"].read().decode())
for k, v in res.items():
    print(k + "=" + v)
PY
printf 'chunk_signed=%s\n' "$(curl -s -o /tmp/b -w '%{http_code}' --max-time 15 -X PUT --data-binary x -H 'x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD' -H 'Content-Encoding: aws-chunked' -H "Authorization: AWS4-HMAC-SHA256 Credential=$AWS_ACCESS_KEY_ID/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0" https://s3.us-east-1.amazonaws.com:9443/bkt/chunked) $(tr -d '\n' < /tmp/b)"
head -c 2000000 /dev/zero > /tmp/big
printf 'curl_sigv4=%s\n' "$(curl -s -o /tmp/b -w '%{http_code}' --max-time 15 --expect100-timeout 60 --aws-sigv4 'aws:amz:us-east-1:s3' --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-security-token: $AWS_SESSION_TOKEN" -H 'Expect: 100-continue' -T /tmp/big https://s3.us-east-1.amazonaws.com:9443/bkt/big) $(tr -d '\n' < /tmp/b)"
`

func TestSigV4WithBotocoreInSandbox(t *testing.T) {
	l := newLab(t, sigv4Network)
	testutil.RequireCommand(t, "/usr/bin/python3")
	if _, err := os.Stat("/usr/lib/python3/dist-packages/botocore/auth.py"); err != nil {
		testutil.RequireData(t, "botocore (python3-botocore)", err)
	}
	verifier, err := filepath.Abs("../sigv4/testdata/verifier.py")
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]string{}
	for _, h := range sigv4Hosts {
		hosts[h] = l.inet.V4[0].String()
	}
	l.hosts = l.inet.HostsFile(hosts)
	head := labPolicy[:strings.Index(labPolicy, "  web:")]
	l.write(head + sigv4Network)

	keyID, secret, token := "AKIA"+strings.ToUpper(randHex(8)), "s3cr3t/"+randHex(16), "tok+"+randHex(16)
	credPath := filepath.Join(l.dir, "credentials.yaml")
	endpoints := ""
	for _, h := range sigv4Hosts {
		endpoints += fmt.Sprintf("      - {host: %s, port: %d}\n", h, sigv4Port)
	}
	if err := os.WriteFile(credPath, []byte(fmt.Sprintf(`version: 1
providers:
  aws:
    credentials:
      AWS_ACCESS_KEY_ID: {value: %q}
      AWS_SECRET_ACCESS_KEY: {value: %q}
      AWS_SESSION_TOKEN: {env: PALISADE_E2E_AWS_TOKEN}
    endpoints:
%s`, keyID, secret, endpoints)), 0o600); err != nil {
		t.Fatal(err)
	}

	// The S3-like upstream: the verifier, on a listener in the test
	// internet, with certificates from a CA the proxy is told to trust.
	ca, err := tlsca.New(tlsca.Options{Name: "s3-upstream"})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(l.dir, "s3-ca.pem")
	os.WriteFile(caFile, ca.CertPEM(), 0o644)
	certs := map[string][2]string{}
	for _, h := range sigv4Hosts {
		leaf, err := ca.Leaf(h)
		if err != nil {
			t.Fatal(err)
		}
		key, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		cf, kf := filepath.Join(l.dir, h+".pem"), filepath.Join(l.dir, h+".key")
		os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]}), 0o644)
		os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600)
		certs[h] = [2]string{cf, kf}
	}
	cfgPath := filepath.Join(l.dir, "verifier.json")
	cfg, _ := json.Marshal(map[string]any{"certs": certs, "keys": map[string]string{keyID: secret}, "region": "us-east-1", "service": "s3"})
	os.WriteFile(cfgPath, cfg, 0o600)
	ln, err := l.inet.Listen("tcp", fmt.Sprintf(":%d", sigv4Port))
	if err != nil {
		t.Fatal(err)
	}
	lf, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	srv := exec.Command("/usr/bin/python3", verifier, "serve", cfgPath)
	srv.ExtraFiles = []*os.File{lf}
	srvOut, _ := srv.StdoutPipe()
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	lf.Close()
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	lines := make(chan map[string]any, 64)
	go func() {
		sc := bufio.NewScanner(srvOut)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	select {
	case m := <-lines:
		if m["ready"] != true {
			t.Fatalf("verifier: %v", m)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("verifier not ready: %s", srvErr.String())
	}

	cmd := exec.Command(l.sup, "run", "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--workdir", l.wd, "--log-level", "debug", "--upstream-ca-bundle", caFile,
		"--credentials", credPath, "--", "/bin/sh", "-c", sigv4Script)
	cmd.Env = append(os.Environ(), "PALISADE_E2E_AWS_TOKEN="+token)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out, stderr.String())
	}
	r := results(out)
	t.Logf("sandbox: %v", r)
	var seen []map[string]any
	srv.Process.Kill()
	for m := range lines {
		seen = append(seen, m)
	}
	for _, m := range seen {
		t.Logf("upstream: %v %v ok=%v %v payload=%v", m["method"], m["path"], m["ok"], m["reason"], m["payload"])
	}

	if !strings.HasPrefix(r["put_signed"], "ok ") {
		t.Errorf("signed-body PUT: %q", r["put_signed"])
	}
	if r["get_unsigned"] != "ok hello from the sandbox" {
		t.Errorf("unsigned-payload GET: %q", r["get_unsigned"])
	}
	if !strings.HasPrefix(r["wrong_region"], "403 AuthorizationHeaderMalformed") {
		t.Errorf("PUT signed for eu-west-1 to a us-east-1 upstream: %q, want the upstream's 403", r["wrong_region"])
	}
	if !strings.HasPrefix(r["no_region"], "403") {
		t.Errorf("host naming no region: %q, want 403", r["no_region"])
	}
	if !strings.HasPrefix(r["chunk_signed"], "403") || !strings.Contains(r["chunk_signed"], "sigv4_chunk_signed_payload") {
		t.Errorf("chunk-signed upload: %q", r["chunk_signed"])
	}
	if !strings.HasPrefix(r["curl_sigv4"], "200") {
		t.Errorf("curl --aws-sigv4 with Expect: 100-continue: %q", r["curl_sigv4"])
	}
	// What the upstream verified: the PUT with a signed body, the GET
	// unsigned, curl's upload, each with the real key and token; the
	// wrong region refused there; nothing of minio.test or the
	// chunk-signed upload reached it.
	var putSigned, getUnsigned, curlPut, wrongRegion bool
	for _, m := range seen {
		ok, _ := m["ok"].(bool)
		auth, _ := m["authorization"].(string)
		payload, _ := m["payload"].(string)
		if strings.Contains(auth, "openshell") || (ok && (!strings.Contains(auth, "Credential="+keyID+"/") || m["token"] != token)) {
			t.Errorf("upstream request %v %v: authorization %q token %q", m["method"], m["path"], auth, m["token"])
		}
		switch {
		case m["method"] == "PUT" && m["path"] == "/bkt/dir/hello%20world%2B1.txt" && ok && len(payload) == 64:
			putSigned = true
		case m["method"] == "GET" && m["path"] == "/bkt/dir/hello%20world%2B1.txt" && ok && payload == "UNSIGNED-PAYLOAD":
			getUnsigned = true
		case m["method"] == "PUT" && m["path"] == "/bkt/big" && ok && m["length"] == 2000000.0:
			curlPut = true
		case m["path"] == "/bkt/k" && !ok && m["reason"] == "AuthorizationHeaderMalformed":
			wrongRegion = true
		case m["path"] == "/bkt/chunked":
			t.Errorf("the chunk-signed upload reached the upstream")
		}
	}
	if !putSigned || !getUnsigned || !curlPut || !wrongRegion {
		t.Errorf("upstream saw: signed PUT %v, unsigned GET %v, curl PUT %v, wrong region refused %v", putSigned, getUnsigned, curlPut, wrongRegion)
	}
	events, _ := os.ReadFile(l.events)
	logs, _ := filepath.Glob(filepath.Join(l.state, "*", ProxyLogName))
	var proxyLog []byte
	for _, p := range logs {
		b, _ := os.ReadFile(p)
		proxyLog = append(proxyLog, b...)
	}
	for what, data := range map[string][]byte{"events": events, "proxy log": proxyLog, "stderr": stderr.Bytes(), "output": out} {
		for _, s := range []string{secret, token} {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("the %s hold a secret", what)
			}
		}
	}
}
