package sigv4

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// botocore is Debian's (python3-botocore), run by the system Python.
const botocorePython = "/usr/bin/python3"

func requireBotocore(t *testing.T) {
	t.Helper()
	testutil.RequireCommand(t, botocorePython)
	if _, err := os.Stat("/usr/lib/python3/dist-packages/botocore/auth.py"); err != nil {
		testutil.RequireData(t, "botocore (python3-botocore)", err)
	}
}

// TestAgainstBotocore signs requests with the awkward parts real clients
// send (S3 keys with spaces, '+', '=', unicode and encoded slashes;
// queries unsorted, repeated, empty, unencoded; session tokens; signed
// and unsigned payloads; other services' double-encoded, normalised
// paths) and has botocore's own signer, in testdata/verifier.py, verify
// every one: an implementation independent of this package.
func TestAgainstBotocore(t *testing.T) {
	requireBotocore(t)
	type tcase struct {
		service, method, path, query, body string
		extra                              map[string]string
		token                              string
		unsigned                           bool
		// control: signed with another secret; botocore must refuse it
		// (the verifier is not a rubber stamp).
		control bool
	}
	cases := []tcase{
		{service: "s3", method: "GET", path: "/bucket/key"},
		{service: "s3", method: "PUT", path: "/bucket/a%20b%2Bc%3Dd/%E2%82%AC.txt", body: "hello", extra: map[string]string{"Content-Type": "text/plain", "X-Amz-Meta-Note": "  two   spaces  "}},
		{service: "s3", method: "PUT", path: "/bucket/dir%2Ffile", body: strings.Repeat("x", 70000), unsigned: true},
		{service: "s3", method: "GET", path: "/bucket", query: "list-type=2&prefix=a%2Fb&delimiter=%2F&max-keys=10"},
		{service: "s3", method: "GET", path: "/bucket", query: "versions&prefix=&z=1&a=2&a=1"},
		{service: "s3", method: "GET", path: "/bucket/k", token: "FwoGZXIvYXdzEXAMPLE/token+with=chars"},
		{service: "sts", method: "POST", path: "/", body: "Action=GetCallerIdentity&Version=2011-06-15", extra: map[string]string{"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}},
		{service: "bedrock", method: "POST", path: "/model/anthropic.claude-3%3A0/invoke", body: `{"prompt":"hi"}`, extra: map[string]string{"Content-Type": "application/json"}},
		{service: "execute-api", method: "GET", path: "/stage/a/./b/../c", query: "q=%E1%88%B4"},
		{service: "s3", method: "GET", path: "/bucket/key", control: true},
	}
	cmd := exec.Command(botocorePython, "testdata/verifier.py", "check")
	var in bytes.Buffer
	ts := time.Date(2026, 12, 1, 10, 20, 30, 0, time.UTC)
	for _, tc := range cases {
		host := "s3.eu-west-1.amazonaws.com"
		if tc.service != "s3" {
			host = tc.service + ".eu-west-1.amazonaws.com"
		}
		h := http.Header{}
		for k, v := range tc.extra {
			h.Set(k, v)
		}
		sum := sha256.Sum256([]byte(tc.body))
		hash := hex.EncodeToString(sum[:])
		if tc.unsigned {
			hash = UnsignedPayload
		}
		h.Set("X-Amz-Date", ts.Format(TimeFormat))
		h.Set("X-Amz-Content-Sha256", hash)
		if tc.token != "" {
			h.Set("X-Amz-Security-Token", tc.token)
		}
		var signed []string
		for k := range h {
			signed = append(signed, k)
		}
		c := Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret/key+0", SessionToken: tc.token}
		if tc.control {
			c.SecretAccessKey = "another-secret"
		}
		sig := Sign(&Request{Method: tc.method, Host: host, Path: tc.path, Query: tc.query, Header: h, Signed: signed, PayloadHash: hash},
			c, ForService(tc.service, "eu-west-1", ts))
		h.Set("Authorization", sig.Authorization)
		var hdrs [][2]string
		for k, vv := range h {
			for _, v := range vv {
				hdrs = append(hdrs, [2]string{k, v})
			}
		}
		hdrs = append(hdrs, [2]string{"Host", host})
		line, _ := json.Marshal(map[string]any{"method": tc.method, "host": host, "path": tc.path, "query": tc.query,
			"headers": hdrs, "body": base64.StdEncoding.EncodeToString([]byte(tc.body)), "akid": c.AccessKeyID,
			"secret": "secret/key+0", "region": "eu-west-1", "service": tc.service})
		in.Write(append(line, '\n'))
	}
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("verifier: %v\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	i := 0
	for ; sc.Scan(); i++ {
		var r struct {
			OK      bool           `json:"ok"`
			Reason  string         `json:"reason"`
			Details map[string]any `json:"details"`
		}
		json.Unmarshal(sc.Bytes(), &r)
		if cases[i].control {
			if r.OK || r.Reason != "SignatureDoesNotMatch" {
				t.Errorf("control case: botocore says %v %s", r.OK, r.Reason)
			}
			continue
		}
		if !r.OK {
			t.Errorf("case %d (%s %s %s?%s): botocore says %s\n%v", i, cases[i].service, cases[i].method, cases[i].path, cases[i].query, r.Reason, r.Details["canonical"])
		}
	}
	if i != len(cases) {
		t.Fatalf("verifier answered %d of %d cases\n%s", i, len(cases), stderr.String())
	}
}
