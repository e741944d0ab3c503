package proxy

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/sigv4"
)

// Made-up AWS credentials; the client signs with placeholders.
const (
	awsKeyID  = "AKIAREALKEYID0000001"
	awsSecret = "real/secret+key0000000000000000000000001"
	awsToken  = "FwoGZXIvYXdzEXAMPLEsessiontoken"
)

func sigv4CredFile(u *credUpstream) string {
	return fmt.Sprintf(`version: 1
providers:
  aws:
    credentials:
      AWS_ACCESS_KEY_ID: {value: %q}
      AWS_SECRET_ACCESS_KEY: {value: %q}
      AWS_SESSION_TOKEN: {value: %q}
    endpoints:
      - host: s3.us-east-1.amazonaws.com
        ports: [%d, %d]
      - host: minio.test
        port: %d
`, awsKeyID, awsSecret, awsToken, u.tlsPort, u.plainPort, u.tlsPort)
}

func sigv4Policy(u *credUpstream, mode string) string {
	return fmt.Sprintf(`version: 1
network_policies:
  aws:
    endpoints:
      - host: s3.us-east-1.amazonaws.com
        ports: [%d, %d]
        protocol: rest
        access: full
        credential_signing: %s
        signing_service: s3
      - host: minio.test
        port: %d
        protocol: rest
        access: full
        credential_signing: sigv4
        signing_service: s3
    binaries:
      - path: /usr/bin/curl
`, u.tlsPort, u.plainPort, mode, u.tlsPort)
}

// awsSeen is what the upstream got of one SigV4 request.
type awsSeen struct {
	auth, date, content, token, host string
	body                             []byte
	header                           http.Header
	path, query, method              string
}

func newSigV4Env(t *testing.T, mode string) (*credEnv, chan awsSeen) {
	t.Helper()
	e := newCredEnv(t)
	seen := make(chan awsSeen, 16)
	// Replace the upstream's handler: record the SigV4 fields.
	e.up.handler = func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- awsSeen{auth: r.Header.Get("Authorization"), date: r.Header.Get("X-Amz-Date"), content: r.Header.Get("X-Amz-Content-Sha256"),
			token: r.Header.Get("X-Amz-Security-Token"), host: r.Host, body: b, header: r.Header.Clone(),
			path: r.URL.EscapedPath(), query: r.URL.RawQuery, method: r.Method}
	}
	e.src.set(sigv4CredFile(e.up))
	e.writePolicy(sigv4Policy(e.up, mode))
	if _, err := e.p.Reload("test"); err != nil {
		t.Fatal(err)
	}
	e.dialer.mu.Lock()
	e.dialer.hosts["s3.us-east-1.amazonaws.com"] = netip.MustParseAddr("127.0.0.1")
	e.dialer.hosts["minio.test"] = netip.MustParseAddr("127.0.0.1")
	e.dialer.mu.Unlock()
	return e, seen
}

// placeholderSigned is a request signed as a client in the sandbox
// signs it: with the placeholders for credentials.
func placeholderSigned(t *testing.T, method, rawURL, body, contentSHA string) *http.Request {
	t.Helper()
	req, _ := http.NewRequest(method, rawURL, strings.NewReader(body))
	if body == "" {
		req.Body = http.NoBody
	}
	req.Header.Set("X-Amz-Content-Sha256", contentSHA)
	req.Header.Set("X-Amz-Date", "20200101T000000Z")
	req.Header.Set("X-Amz-Security-Token", credentials.Placeholder("AWS_SESSION_TOKEN"))
	req.Header.Set("X-Amz-Meta-Owner", "agent")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+credentials.Placeholder("AWS_ACCESS_KEY_ID")+
		"/20200101/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date;x-amz-meta-owner;x-amz-security-token, Signature=0000")
	return req
}

// checkResigned checks an upstream request against a signature computed
// again from what the upstream received (the signer itself is checked
// against AWS's suite and botocore in pkg/sigv4; here: what the proxy
// strips, sets and signs).
func checkResigned(t *testing.T, s awsSeen, wantPayload string) {
	t.Helper()
	if s.token != awsToken || strings.Contains(s.auth, "openshell") || s.date == "20200101T000000Z" {
		t.Fatalf("placeholder fields went upstream: token %q auth %q date %q", s.token, s.auth, s.date)
	}
	if s.content != wantPayload {
		t.Errorf("x-amz-content-sha256 %q, want %q", s.content, wantPayload)
	}
	if !strings.HasPrefix(s.auth, "AWS4-HMAC-SHA256 Credential="+awsKeyID+"/"+s.date[:8]+"/us-east-1/s3/aws4_request, SignedHeaders=") {
		t.Fatalf("authorization %q", s.auth)
	}
	list, _, _ := strings.Cut(strings.SplitN(s.auth, "SignedHeaders=", 2)[1], ",")
	names := strings.Split(list, ";")
	want := []string{"host", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"}
	if s.header.Get("X-Amz-Meta-Owner") != "" {
		want = append(want, "x-amz-meta-owner")
	}
	for _, want := range want {
		if !strings.Contains(";"+list+";", ";"+want+";") {
			t.Errorf("%s not signed (%s)", want, list)
		}
	}
	if strings.Contains(list, "user-agent") || strings.Contains(list, "expect") {
		t.Errorf("signed %s", list)
	}
	ts, _ := parseAmzDate(s.date)
	sig := sigv4.Sign(&sigv4.Request{Method: s.method, Host: s.host, Path: s.path, Query: s.query, Header: s.header,
		Signed: names, PayloadHash: s.content}, sigv4.Credentials{AccessKeyID: awsKeyID, SecretAccessKey: awsSecret}, sigv4.ForService("s3", "us-east-1", ts))
	if sig.Authorization != s.auth {
		t.Errorf("signature does not match what the upstream received:\n%s\n%s", sig.Authorization, s.auth)
	}
}

// The client's placeholder-signed request is re-signed: its SigV4
// fields stripped, the real key, session token and a fresh date in, the
// payload mode taken from x-amz-content-sha256 (signed body hashed,
// UNSIGNED-PAYLOAD and STREAMING-UNSIGNED-PAYLOAD-TRAILER headers only);
// chunk-signed payloads, a host naming no region and an unknown
// x-amz-content-sha256 are refused; sigv4:body and sigv4:no_body
// override the client; on h1, h2 and forwarded http://.
func TestSigV4Resigning(t *testing.T) {
	e, seen := newSigV4Env(t, "sigv4")
	pu, _ := url.Parse("http://" + e.addr)
	fwd := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	defer fwd.CloseIdleConnections()
	body := "object body"
	sum := sha256.Sum256([]byte(body))
	bodyHash := hex.EncodeToString(sum[:])
	for name, cl := range map[string]*http.Client{"h1": e.client(false), "h2": e.client(true), "forwarded": fwd} {
		base := fmt.Sprintf("https://s3.us-east-1.amazonaws.com:%d", e.up.tlsPort)
		if name == "forwarded" {
			base = fmt.Sprintf("http://s3.us-east-1.amazonaws.com:%d", e.up.plainPort)
		}
		for _, tc := range []struct {
			method, body, header, want string
		}{
			{"PUT", body, bodyHash, bodyHash},
			{"PUT", body, sigv4.UnsignedPayload, sigv4.UnsignedPayload},
			{"PUT", body, sigv4.StreamingUnsignedPayloadTrailer, sigv4.StreamingUnsignedPayloadTrailer},
			{"GET", "", sigv4.EmptySHA256, sigv4.EmptySHA256},
			{"GET", "", "", sigv4.EmptySHA256},
		} {
			req := placeholderSigned(t, tc.method, base+"/bucket/a%20key?x-id=PutObject", tc.body, tc.header)
			if tc.header == "" {
				req.Header.Del("X-Amz-Content-Sha256")
			}
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatalf("%s %s %s: %v", name, tc.method, tc.header, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s %s %s: %d", name, tc.method, tc.header, resp.StatusCode)
			}
			s := <-seen
			checkResigned(t, s, tc.want)
			if string(s.body) != tc.body {
				t.Errorf("%s: body %q", name, s.body)
			}
		}
		for _, tc := range []struct {
			url, header string
			status      int
			reason      string
		}{
			{base + "/bucket/k", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", 403, ReasonSigV4ChunkSigned},
			{base + "/bucket/k", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER", 403, ReasonSigV4ChunkSigned},
			{base + "/bucket/k", "sha256-of-nothing", 400, ReasonSigV4ContentSHA},
		} {
			req := placeholderSigned(t, "PUT", tc.url, body, tc.header)
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var eb struct{ Reason string }
			json.NewDecoder(resp.Body).Decode(&eb)
			resp.Body.Close()
			if resp.StatusCode != tc.status || eb.Reason != tc.reason {
				t.Errorf("%s %s: %d %s, want %d %s", name, tc.header, resp.StatusCode, eb.Reason, tc.status, tc.reason)
			}
		}
	}
	// minio.test names no region and the policy gives none: refused.
	resp, err := e.client(false).Do(placeholderSigned(t, "GET", fmt.Sprintf("https://minio.test:%d/bucket/k", e.up.tlsPort), "", sigv4.EmptySHA256))
	if err != nil {
		t.Fatal(err)
	}
	if d := readDenial(t, resp); resp.StatusCode != 403 || d.Reason != ReasonSigV4Region {
		t.Errorf("no region: %d %+v", resp.StatusCode, d)
	}
	select {
	case s := <-seen:
		t.Errorf("a refused request reached the upstream: %+v", s)
	default:
	}
	e.noSecrets(t)
	b := strings.Join(func() []string {
		var out []string
		for _, l := range e.rec.Lines() {
			out = append(out, string(l))
		}
		return out
	}(), "\n") + e.logs.String()
	for _, s := range []string{awsSecret, awsToken, awsKeyID} {
		if strings.Contains(b, s) {
			t.Errorf("events or logs hold %q", s)
		}
	}
}

// The overrides: sigv4:body signs the body whatever the client says
// (except an aws-chunked unsigned trailer), sigv4:no_body never does.
func TestSigV4Overrides(t *testing.T) {
	body := "abc"
	sum := sha256.Sum256([]byte(body))
	bodyHash := hex.EncodeToString(sum[:])
	for mode, want := range map[string]map[string]string{
		"sigv4:body":    {sigv4.UnsignedPayload: bodyHash, bodyHash: bodyHash, sigv4.StreamingUnsignedPayloadTrailer: sigv4.StreamingUnsignedPayloadTrailer},
		"sigv4:no_body": {bodyHash: sigv4.UnsignedPayload, sigv4.UnsignedPayload: sigv4.UnsignedPayload, "garbage": sigv4.UnsignedPayload},
	} {
		e, seen := newSigV4Env(t, mode)
		cl := e.client(false)
		for client, payload := range want {
			resp, err := cl.Do(placeholderSigned(t, "PUT", fmt.Sprintf("https://s3.us-east-1.amazonaws.com:%d/b/k", e.up.tlsPort), body, client))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s, client %s: %d", mode, client, resp.StatusCode)
			}
			checkResigned(t, <-seen, payload)
		}
	}
}

// Expect: 100-continue on a signed-body PUT: the proxy asks for the body
// (forwarded: it writes the 100 itself; inspected: on its first read),
// hashes and signs it; a request refused before its body gets no 100.
func TestSigV4ExpectContinue(t *testing.T) {
	e, seen := newSigV4Env(t, "sigv4")
	body := "expect-continue body"
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		header string
		want   int
	}{{hash, 200}, {"STREAMING-AWS4-HMAC-SHA256-PAYLOAD", 403}} {
		c := e.dial()
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "PUT http://s3.us-east-1.amazonaws.com:%d/b/k HTTP/1.1\r\nHost: s3.us-east-1.amazonaws.com:%d\r\nContent-Length: %d\r\nExpect: 100-continue\r\nX-Amz-Content-Sha256: %s\r\nAuthorization: AWS4-HMAC-SHA256 Credential=%s/20200101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\n\r\n",
			e.up.plainPort, e.up.plainPort, len(body), tc.header, credentials.Placeholder("AWS_ACCESS_KEY_ID"))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.want != 200 {
			if resp.StatusCode != tc.want {
				t.Errorf("%s: %d before the body, want %d", tc.header, resp.StatusCode, tc.want)
			}
			continue
		}
		if resp.StatusCode != 100 {
			t.Fatalf("%d, want 100 Continue", resp.StatusCode)
		}
		io.WriteString(c, body)
		if resp, err = http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("after the body: %v %v", resp, err)
		}
		s := <-seen
		checkResigned(t, s, hash)
		if string(s.body) != body {
			t.Errorf("body %q", s.body)
		}
	}
}

func parseAmzDate(s string) (time.Time, error) { return time.Parse(sigv4.TimeFormat, s) }
