package routeproof

import (
	"encoding/json"
	"strings"
	"testing"
)

// The record's text comes only from the table: no byte of the output
// reaches it, whatever the output is.
func FuzzClassify(f *testing.F) {
	f.Add(1, []byte(`{"error":"policy_denied","host":"h"}`), []byte(""))
	f.Add(1, []byte(`Error: {"error":{"code":"invalid_api_key","message":"sk-zzz"}} {"status":429}`), []byte("{"))
	f.Add(0, []byte("SENTINEL\n"), []byte(`{"type":"error","error":{"type":"rate_limit_error"}}`))
	f.Add(1, []byte(`{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"error":{"status":503}}}}}}}}}`), []byte(nil))
	f.Fuzz(func(t *testing.T, code int, stdout, stderr []byte) {
		rec := Classify(Run{ExitCode: code, Stdout: stdout, Stderr: stderr, Sentinel: "SENTINEL"})
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		switch rec.FailureClass {
		case "", ClassTimeout, ClassAgentBinaryMissing, ClassSandboxPolicyDenied, ClassAuthenticationFailed,
			ClassRateLimited, ClassProviderServerError, ClassSentinelMissing, ClassProbeFailed:
		default:
			t.Fatalf("class %q", rec.FailureClass)
		}
		if rec.Verified == (rec.FailureClass != "") {
			t.Fatalf("verified %v with class %q", rec.Verified, rec.FailureClass)
		}
		if e := rec.Evidence; e != nil {
			for _, s := range []string{e.Error, e.Code} {
				if s != "" && !authCodes[s] && !rateCodes[s] && s != "policy_denied" {
					t.Fatalf("evidence carries %q from the output: %s", s, b)
				}
			}
		}
		if strings.Contains(string(b), "sk-") {
			t.Fatalf("record carries output text: %s", b)
		}
	})
}

// Several error objects: the table's order decides (a policy denial
// explains everything after it).
func TestClassRank(t *testing.T) {
	out := []byte(`{"error":{"status":503}}` + "\n" + `{"error":{"code":"rate_limit_exceeded"}}` + "\n" + `{"error":"policy_denied"}`)
	if c := Classify(Run{ExitCode: 1, Stdout: out}).FailureClass; c != ClassSandboxPolicyDenied {
		t.Fatalf("class %q", c)
	}
	// Exit 0 with the sentinel is verified even if an earlier retry
	// logged an error object.
	out = []byte(`{"error":{"status":429}}` + "\nS-1\n")
	if r := Classify(Run{ExitCode: 0, Stdout: out, Sentinel: "S-1"}); !r.Verified {
		t.Fatalf("%+v", r)
	}
	// Exit status decides before any JSON.
	if c := Classify(Run{ExitCode: 137, Stdout: []byte(`{"error":"policy_denied"}`)}).FailureClass; c != ClassTimeout {
		t.Fatalf("class %q", c)
	}
}
