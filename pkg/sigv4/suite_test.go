package sigv4

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// suiteContext is a case's context.json.
type suiteContext struct {
	Credentials struct {
		AccessKeyID     string `json:"access_key_id"`
		SecretAccessKey string `json:"secret_access_key"`
		Token           string `json:"token"`
	} `json:"credentials"`
	Normalize        bool   `json:"normalize"`
	Region           string `json:"region"`
	Service          string `json:"service"`
	SignBody         bool   `json:"sign_body"`
	Timestamp        string `json:"timestamp"`
	OmitSessionToken bool   `json:"omit_session_token"`
}

// parseSuiteRequest reads a request.txt: the request line (whose target
// may hold spaces), header lines (a line starting with whitespace
// continues the one before), a blank line and the body.
func parseSuiteRequest(t *testing.T, text string) (method, target string, h http.Header, order []string, body string) {
	t.Helper()
	head, body, _ := strings.Cut(text, "\n\n")
	lines := strings.Split(head, "\n")
	first := lines[0]
	sp1, sp2 := strings.IndexByte(first, ' '), strings.LastIndexByte(first, ' ')
	method, target = first[:sp1], first[sp1+1:sp2]
	h = http.Header{}
	var last string
	for _, l := range lines[1:] {
		if l == "" {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			vv := h[last]
			vv[len(vv)-1] += " " + strings.TrimSpace(l)
			continue
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			t.Fatalf("header line %q", l)
		}
		last = http.CanonicalHeaderKey(name)
		if _, seen := h[last]; !seen {
			order = append(order, name)
		}
		h[last] = append(h[last], value)
	}
	return method, target, h, order, body
}

// TestAWSSigningTestSuite runs every case of AWS's SigV4 test suite
// (testdata/aws-signing-test-suite/v4, header signing): the canonical
// request, the string to sign and the signature must be exactly the
// published ones.
func TestAWSSigningTestSuite(t *testing.T) {
	dirs, err := filepath.Glob("testdata/aws-signing-test-suite/v4/*")
	if err != nil || len(dirs) < 30 {
		t.Fatalf("test suite: %d cases (%v)", len(dirs), err)
	}
	read := func(dir, name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(b), "\r\n", "\n")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var ctx suiteContext
			if err := json.Unmarshal([]byte(read(dir, "context.json")), &ctx); err != nil {
				t.Fatal(err)
			}
			ts, err := time.Parse(time.RFC3339, ctx.Timestamp)
			if err != nil {
				t.Fatal(err)
			}
			method, target, h, order, body := parseSuiteRequest(t, read(dir, "request.txt"))
			path, query, _ := strings.Cut(target, "?")
			sum := sha256.Sum256([]byte(body))
			payload := hex.EncodeToString(sum[:])
			h.Set("X-Amz-Date", ts.Format(TimeFormat))
			signed := append(order, "X-Amz-Date")
			if ctx.SignBody {
				h.Set("X-Amz-Content-Sha256", payload)
				signed = append(signed, "X-Amz-Content-Sha256")
			}
			if ctx.Credentials.Token != "" && !ctx.OmitSessionToken {
				h.Set("X-Amz-Security-Token", ctx.Credentials.Token)
				signed = append(signed, "X-Amz-Security-Token")
			}
			host := h.Get("Host")
			r := &Request{Method: method, Host: host, Path: path, Query: query, Header: h, Signed: signed, PayloadHash: payload}
			o := Options{Region: ctx.Region, Service: ctx.Service, Time: ts, DoubleEncode: true, Normalize: ctx.Normalize}
			c := Credentials{AccessKeyID: ctx.Credentials.AccessKeyID, SecretAccessKey: ctx.Credentials.SecretAccessKey, SessionToken: ctx.Credentials.Token}
			sig := Sign(r, c, o)
			if want := read(dir, "header-canonical-request.txt"); sig.CanonicalRequest != want {
				t.Errorf("canonical request:\n%s\nwant:\n%s", sig.CanonicalRequest, want)
			}
			if want := read(dir, "header-string-to-sign.txt"); sig.StringToSign != want {
				t.Errorf("string to sign:\n%s\nwant:\n%s", sig.StringToSign, want)
			}
			if want := strings.TrimSpace(read(dir, "header-signature.txt")); sig.Signature != want {
				t.Errorf("signature %s, want %s", sig.Signature, want)
			}
		})
	}
}
