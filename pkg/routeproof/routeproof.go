// Package routeproof classifies seed 000's in-sandbox route proof: a
// coding CLI's probe command ran (in a throwaway sandbox, with a
// short-lived inference token) and either echoed the sentinel back or
// failed. The failure_class of the mac.coding_agent.verification.v1
// record is derived from the exit status and from structured JSON error
// objects only. Free text is never searched: matching words in a
// transcript once classed a run as rate limited because a sandbox was
// named mac-task-429907755059.
//
// Precedence: exit 124/137 (timeout) and 126/127 (binary missing) first,
// then a structured error object (policy denial, authentication, rate
// limit, provider 5xx, in that order), then exit 0 with the sentinel
// (verified) or without it (sentinel_missing); anything else is
// probe_failed.
package routeproof

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Schema is the record's schema name.
const Schema = "mac.coding_agent.verification.v1"

// The failure classes of seed 000's table.
const (
	ClassTimeout                   = "timeout"
	ClassAgentBinaryMissing        = "agent_binary_missing"
	ClassSandboxPolicyDenied       = "sandbox_policy_denied"
	ClassAuthenticationFailed      = "authentication_failed"
	ClassRateLimited               = "rate_limited"
	ClassProviderServerError       = "provider_server_error"
	ClassInferenceTokenUnavailable = "inference_token_unavailable"
	ClassSentinelMissing           = "sentinel_missing"
	ClassProbeFailed               = "probe_failed"
)

// BinaryPresent is binary_status when the run proves the CLI launched and
// opened a socket (a policy denial or an authentication failure).
const BinaryPresent = "present"

// Record is one mac.coding_agent.verification.v1 result. It carries no
// output text, token, URL or message: only the class and the structured
// evidence it was derived from.
type Record struct {
	Schema         string    `json:"schema"`
	CLI            string    `json:"cli"`
	Verified       bool      `json:"verified"`
	FailureClass   string    `json:"failure_class,omitempty"`
	BinaryStatus   string    `json:"binary_status,omitempty"`
	ExitCode       *int      `json:"exit_code,omitempty"`
	Evidence       *Evidence `json:"evidence,omitempty"`
	TimeoutSeconds float64   `json:"timeout_seconds,omitempty"`
	DurationMS     int64     `json:"duration_ms"`
	CheckedAt      string    `json:"checked_at"`
}

// Evidence is the structured error object a class came from: its error
// string or code (only values of the table, never free text) and status.
type Evidence struct {
	Source string `json:"source"` // "exit_status" or "json_error"
	Error  string `json:"error,omitempty"`
	Code   string `json:"code,omitempty"`
	Status int    `json:"status,omitempty"`
}

// Run is what the probe command did.
type Run struct {
	ExitCode int    // 128+N when killed by signal N
	Stdout   []byte // bounded by the caller
	Stderr   []byte
	Sentinel string
}

// errorSignal is one structured error found in the output.
type errorSignal struct {
	class string
	ev    Evidence
}

var (
	authCodes = map[string]bool{"invalid_api_key": true, "unauthorized": true}
	rateCodes = map[string]bool{"rate_limit_exceeded": true, "rate_limit_error": true}
	// classRank orders the structured classes: the first in this list
	// wins when several appear.
	classRank = []string{ClassSandboxPolicyDenied, ClassAuthenticationFailed, ClassRateLimited, ClassProviderServerError}
)

// Classify derives the record's verdict from a run. The caller fills the
// CLI, timing and timestamp.
func Classify(r Run) Record {
	rec := Record{Schema: Schema}
	code := r.ExitCode
	rec.ExitCode = &code
	switch code {
	case 124, 137:
		rec.FailureClass = ClassTimeout
		rec.Evidence = &Evidence{Source: "exit_status"}
		return rec
	case 126, 127:
		rec.FailureClass = ClassAgentBinaryMissing
		rec.Evidence = &Evidence{Source: "exit_status"}
		return rec
	}
	if sig, ok := structuredError(r.Stdout, r.Stderr); ok && !(code == 0 && sentinelSeen(r.Stdout, r.Sentinel)) {
		rec.FailureClass = sig.class
		ev := sig.ev
		rec.Evidence = &ev
		if sig.class == ClassSandboxPolicyDenied || sig.class == ClassAuthenticationFailed {
			rec.BinaryStatus = BinaryPresent
		}
		return rec
	}
	if code == 0 {
		if sentinelSeen(r.Stdout, r.Sentinel) {
			rec.Verified = true
			return rec
		}
		rec.FailureClass = ClassSentinelMissing
		rec.Evidence = &Evidence{Source: "exit_status"}
		return rec
	}
	rec.FailureClass = ClassProbeFailed
	rec.Evidence = &Evidence{Source: "exit_status"}
	return rec
}

// TokenUnavailable is the record for a probe that never ran because the
// worker could not mint its inference token.
func TokenUnavailable() Record {
	return Record{Schema: Schema, FailureClass: ClassInferenceTokenUnavailable}
}

// sentinelSeen reports whether the CLI echoed the sentinel: a line of its
// stdout that contains it. This is the proof of success the seed asks
// for, not a classification of a failure.
func sentinelSeen(stdout []byte, sentinel string) bool {
	if sentinel == "" {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), sentinel) {
			return true
		}
	}
	return false
}

// maxObjectsPerLine bounds the JSON decoding attempts per line.
const maxObjectsPerLine = 32

// structuredError finds the highest-ranked error signal among the JSON
// objects in the output: a line that is a JSON object, or a JSON object
// embedded in a line after a prefix (CLIs print "Error: {...}"). Only the
// objects' fields are read; the surrounding text never is.
func structuredError(outs ...[]byte) (errorSignal, bool) {
	best := -1
	var found errorSignal
	for _, out := range outs {
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			tries := 0
			for i := 0; i < len(line) && tries < maxObjectsPerLine; i++ {
				if line[i] != '{' {
					continue
				}
				tries++
				var obj map[string]any
				dec := json.NewDecoder(bytes.NewReader(line[i:]))
				if dec.Decode(&obj) != nil {
					continue
				}
				if sig, ok := classifyObject(obj); ok {
					if rank := indexOf(classRank, sig.class); best < 0 || rank < best {
						best, found = rank, sig
					}
				}
				i += int(dec.InputOffset()) - 1
			}
		}
	}
	return found, best >= 0
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return len(list)
}

// classifyObject reads one JSON object the way the table does:
//
//   - {"error":"policy_denied",...} (the egress proxy's denial body) →
//     sandbox_policy_denied;
//   - an error code (the object's "error" string, or "code"/"type" of an
//     "error" object, or of the object itself when it is the error) of
//     invalid_api_key/unauthorized, or status 401/403 →
//     authentication_failed;
//   - rate_limit_exceeded/rate_limit_error, or status 429 → rate_limited;
//   - status 5xx → provider_server_error.
//
// Objects nested under other keys are searched too (SDKs wrap the API's
// error in their own), to a bounded depth.
func classifyObject(obj map[string]any) (errorSignal, bool) {
	return classifyDepth(obj, 0)
}

func classifyDepth(obj map[string]any, depth int) (errorSignal, bool) {
	if depth > 6 {
		return errorSignal{}, false
	}
	best := errorSignal{}
	bestRank := -1
	consider := func(s errorSignal, ok bool) {
		if !ok {
			return
		}
		if r := indexOf(classRank, s.class); bestRank < 0 || r < bestRank {
			best, bestRank = s, r
		}
	}
	errStr, _ := obj["error"].(string)
	errObj, _ := obj["error"].(map[string]any)
	if errStr == "policy_denied" {
		consider(errorSignal{ClassSandboxPolicyDenied, Evidence{Source: "json_error", Error: errStr}}, true)
	}
	// The error's code: the "error" string itself, or code/type of the
	// error object; a top-level code/type counts only next to an error
	// marker ("error" key or "type":"error").
	var codes []string
	status := 0
	if errStr != "" {
		codes = append(codes, errStr)
	}
	if errObj != nil {
		codes = append(codes, str(errObj["code"]), str(errObj["type"]))
		status = statusOf(errObj)
	}
	isErrorObj := errStr != "" || errObj != nil || str(obj["type"]) == "error"
	if isErrorObj {
		codes = append(codes, str(obj["code"]))
		if t := str(obj["type"]); t != "error" {
			codes = append(codes, t)
		}
		if status == 0 {
			status = statusOf(obj)
		}
		for _, c := range codes {
			switch {
			case authCodes[c]:
				consider(errorSignal{ClassAuthenticationFailed, Evidence{Source: "json_error", Code: c, Status: status}}, true)
			case rateCodes[c]:
				consider(errorSignal{ClassRateLimited, Evidence{Source: "json_error", Code: c, Status: status}}, true)
			}
		}
		switch {
		case status == 401 || status == 403:
			consider(errorSignal{ClassAuthenticationFailed, Evidence{Source: "json_error", Status: status}}, true)
		case status == 429:
			consider(errorSignal{ClassRateLimited, Evidence{Source: "json_error", Status: status}}, true)
		case status >= 500 && status <= 599:
			consider(errorSignal{ClassProviderServerError, Evidence{Source: "json_error", Status: status}}, true)
		}
	}
	for _, v := range obj {
		switch c := v.(type) {
		case map[string]any:
			consider(classifyDepth(c, depth+1))
		case []any:
			for _, e := range c {
				if m, ok := e.(map[string]any); ok {
					consider(classifyDepth(m, depth+1))
				}
			}
		}
	}
	return best, bestRank >= 0
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// statusOf reads an HTTP status from status, status_code or statusCode
// (a number, or a string of digits).
func statusOf(m map[string]any) int {
	for _, k := range []string{"status", "status_code", "statusCode"} {
		switch v := m[k].(type) {
		case float64:
			if v >= 100 && v <= 599 && v == float64(int(v)) {
				return int(v)
			}
		case string:
			if n, err := strconv.Atoi(v); err == nil && n >= 100 && n <= 599 {
				return n
			}
		}
	}
	return 0
}
