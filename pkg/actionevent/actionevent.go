// Package actionevent defines mac.action_event.v1, the normalised record the
// hub's action ledger stores for every security-relevant act of a sandbox,
// and the mapping from one OCSF 1.8.0 JSON line to one record.
//
// A record's event_id is derived from the exact bytes of the source line
// (surrounding whitespace trimmed) and the agent id, so delivering the same
// line twice yields the same id and the hub can drop the duplicate: the
// collector ships at least once, the hub stores exactly once. See
// docs/events.md, section "mac.action_event.v1".
//
// Secrets never cross the mapping: query strings, fragments and URL user
// information are dropped from every path, host and free-text reason, and
// command lines, headers and bodies are never copied.
//
// # Decoding
//
// OCSF lines and records are decoded with github.com/go-json-experiment/json
// (the encoding/json/v2 implementation, standard library from Go 1.27)
// into the tagged structs of ocsf.go. Until commit b65c6ea the package had
// its own JSON reader (about 1,150 lines); issue 15 required it to be at
// least twice as fast as the best library end to end in the collector or
// go. It was not. Measured side by side on the collector's input
// (testdata/collector-lines.jsonl, from scripts/bench/ocsf-lines.py, about
// 1.8 KB a line), 2-CPU AMD EPYC shared with other builds (load average
// 3 to 4):
//
//	BenchmarkCollectorLine (decode, map, event id, AppendJSON; per line)
//	  hand-written reader    4.3 µs   1241 B  29 allocs
//	  go-json-experiment     7.0-7.4  942 B   14 allocs
//	  encoding/json         14-16.5   1824 B  41 allocs
//	BenchmarkDecode (decoding alone)
//	  hand-written 2.4-3.2 µs, go-json-experiment 4.6-6.5 µs, encoding/json 12-16 µs
//
//	scripts/bench/collector.sh, N=200000, events per CPU-second on one core
//	  normalise + ship to hub:  hand-written 127k 149k 157k; go-json-experiment 109k 103k 114k
//	  normalise only (--stdout): hand-written 182k 198k 183k; go-json-experiment 127k 128k 130k
//
// End to end the hand-written reader was 1.2 to 1.5 times faster, so the
// library replaced it; the collector still meets its 100,000 events per
// CPU-second with flat memory (27 to 32 MiB peak at N/4 and N). The
// benchmarks (decoder_bench_test.go) keep comparing the library with
// encoding/json.
package actionevent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Schema is the value of every record's "schema" field.
const Schema = "mac.action_event.v1"

// Layer is the only layer this package produces: events observed by the
// sandbox (supervisor, egress proxy, fence), as opposed to host or hub acts.
const Layer = "sandbox"

// Actions a record can carry.
const (
	ActionAllow = "allow" // the act was permitted
	ActionDeny  = "deny"  // the act was refused
	ActionAudit = "audit" // observed or recorded without a decision
)

// Categories a record can carry, derived from the OCSF class.
const (
	CategoryNetwork     = "network"     // 4001 Network Activity, 4007 SSH Activity
	CategoryHTTP        = "http"        // 4002 HTTP Activity
	CategoryProcess     = "process"     // 1007 Process Activity
	CategoryFile        = "file"        // 1001 File System Activity
	CategoryDetection   = "detection"   // 2004 Detection Finding
	CategoryPolicy      = "policy"      // 5019 Device Config State Change (policy load/reload)
	CategoryApplication = "application" // 6002 Application Lifecycle, 6003 API Activity
	CategoryOther       = "other"       // any other class
)

// Severities, from OCSF severity_id.
var severities = map[int]string{
	0: "unknown", 1: "informational", 2: "low", 3: "medium",
	4: "high", 5: "critical", 6: "fatal", 99: "other",
}

// EventIDLen is the length in hex characters of an event_id (128 bits).
const EventIDLen = 32

// Record is one mac.action_event.v1 record. Field names are API: the hub,
// the OTLP export and downstream pipelines read them.
type Record struct {
	Schema    string    `json:"schema"`
	EventID   string    `json:"event_id"`
	Time      time.Time `json:"time"`
	Layer     string    `json:"layer"`
	Category  string    `json:"category"`
	Action    string    `json:"action"`
	Severity  string    `json:"severity"`
	AgentID   string    `json:"agent_id,omitempty"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	Actor     Actor     `json:"actor"`
	Target    Target    `json:"target"`
	Policy    Policy    `json:"policy"`
	Reason    string    `json:"reason,omitempty"`
	Source    Source    `json:"source"`
}

// Actor is the process that acted.
type Actor struct {
	PID          int64  `json:"pid,omitempty"`
	Process      string `json:"process,omitempty"`       // process name
	Binary       string `json:"binary,omitempty"`        // executable path
	BinarySHA256 string `json:"binary_sha256,omitempty"` // lower-case hex
}

// Target is what the actor reached for. Path never carries a query string.
type Target struct {
	Host   string `json:"host,omitempty"`
	Port   int    `json:"port,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
}

// Policy names the policy in force and the rule that decided.
type Policy struct {
	Name     string `json:"name,omitempty"`     // the policy (file or hub name)
	Checksum string `json:"checksum,omitempty"` // its checksum, "sha256:<hex>" or "<hex>"
	Rule     string `json:"rule,omitempty"`     // the network_policies entry that matched
}

// Source identifies the OCSF event the record was normalised from.
type Source struct {
	ClassUID     int    `json:"class_uid"`
	ClassName    string `json:"class_name,omitempty"`
	ActivityID   int    `json:"activity_id"`
	ActivityName string `json:"activity_name,omitempty"`
}

// ID returns the deterministic event_id of a source line for an agent:
// the first 128 bits, in hex, of
//
//	sha256("mac.action_event.v1\n" + agentID + "\n" + line)
//
// where line has surrounding ASCII whitespace (including the newline)
// removed. Redelivering a line gives the same id; two lines that differ in
// any byte (OCSF events carry their time in milliseconds, the pid, the
// destination…) get different ids.
func ID(agentID string, line []byte) string {
	line = trimSpace(line)
	h := sha256.New()
	h.Write([]byte(Schema))
	h.Write([]byte{'\n'})
	h.Write([]byte(agentID))
	h.Write([]byte{'\n'})
	h.Write(line)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:EventIDLen/2])
}

// ValidEventID reports whether s has the shape of an event_id.
func ValidEventID(s string) bool {
	if len(s) != EventIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Validate checks the invariants every record satisfies; the reference hub
// refuses records that fail it. Errors name the field.
func (r *Record) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if r.Schema != Schema {
		bad("schema", "is %q, want %q", r.Schema, Schema)
	}
	if !ValidEventID(r.EventID) {
		bad("event_id", "want %d lower-case hex characters", EventIDLen)
	}
	if r.Time.IsZero() {
		bad("time", "missing")
	}
	if r.Layer != Layer {
		bad("layer", "is %q, want %q", r.Layer, Layer)
	}
	switch r.Category {
	case CategoryNetwork, CategoryHTTP, CategoryProcess, CategoryFile, CategoryDetection, CategoryPolicy, CategoryApplication, CategoryOther:
	default:
		bad("category", "unknown category %q", r.Category)
	}
	switch r.Action {
	case ActionAllow, ActionDeny, ActionAudit:
	default:
		bad("action", "is %q, want allow, deny or audit", r.Action)
	}
	okSev := false
	for _, s := range severities {
		if r.Severity == s {
			okSev = true
		}
	}
	if !okSev {
		bad("severity", "unknown severity %q", r.Severity)
	}
	if r.Actor.PID < 0 {
		bad("actor.pid", "negative")
	}
	if r.Actor.BinarySHA256 != "" && !isHex(r.Actor.BinarySHA256, 64) {
		bad("actor.binary_sha256", "want 64 lower-case hex characters")
	}
	if r.Target.Port < 0 || r.Target.Port > 65535 {
		bad("target.port", "%d out of range", r.Target.Port)
	}
	if strings.ContainsAny(r.Target.Path, "?#") {
		bad("target.path", "carries a query string or fragment")
	}
	if strings.Contains(r.Target.Host, "@") {
		bad("target.host", "carries user information")
	}
	if r.Source.ClassUID < 0 {
		bad("source.class_uid", "negative")
	}
	return errors.Join(errs...)
}

// AppendJSON appends the record's JSON encoding to b. The encoding is
// deterministic (fixed field order, empty optional fields omitted) and
// decodes with encoding/json into an equal Record.
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"schema":`...)
	b = appendString(b, r.Schema)
	b = append(b, `,"event_id":`...)
	b = appendString(b, r.EventID)
	b = append(b, `,"time":"`...)
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","layer":`...)
	b = appendString(b, r.Layer)
	b = append(b, `,"category":`...)
	b = appendString(b, r.Category)
	b = append(b, `,"action":`...)
	b = appendString(b, r.Action)
	b = append(b, `,"severity":`...)
	b = appendString(b, r.Severity)
	if r.AgentID != "" {
		b = append(b, `,"agent_id":`...)
		b = appendString(b, r.AgentID)
	}
	if r.SandboxID != "" {
		b = append(b, `,"sandbox_id":`...)
		b = appendString(b, r.SandboxID)
	}
	b = append(b, `,"actor":{`...)
	o := objWriter{b: b}
	o.int("pid", r.Actor.PID)
	o.str("process", r.Actor.Process)
	o.str("binary", r.Actor.Binary)
	o.str("binary_sha256", r.Actor.BinarySHA256)
	b = append(o.b, `},"target":{`...)
	o = objWriter{b: b}
	o.str("host", r.Target.Host)
	o.int("port", int64(r.Target.Port))
	o.str("method", r.Target.Method)
	o.str("path", r.Target.Path)
	b = append(o.b, `},"policy":{`...)
	o = objWriter{b: b}
	o.str("name", r.Policy.Name)
	o.str("checksum", r.Policy.Checksum)
	o.str("rule", r.Policy.Rule)
	b = append(o.b, '}')
	if r.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, r.Reason)
	}
	b = append(b, `,"source":{"class_uid":`...)
	b = strconv.AppendInt(b, int64(r.Source.ClassUID), 10)
	if r.Source.ClassName != "" {
		b = append(b, `,"class_name":`...)
		b = appendString(b, r.Source.ClassName)
	}
	b = append(b, `,"activity_id":`...)
	b = strconv.AppendInt(b, int64(r.Source.ActivityID), 10)
	if r.Source.ActivityName != "" {
		b = append(b, `,"activity_name":`...)
		b = appendString(b, r.Source.ActivityName)
	}
	b = append(b, `}}`...)
	return b
}

// MarshalJSON implements json.Marshaler with AppendJSON.
func (r Record) MarshalJSON() ([]byte, error) {
	return r.AppendJSON(make([]byte, 0, 512)), nil
}

type objWriter struct {
	b     []byte
	after bool
}

func (o *objWriter) key(k string) {
	if o.after {
		o.b = append(o.b, ',')
	}
	o.after = true
	o.b = append(o.b, '"')
	o.b = append(o.b, k...)
	o.b = append(o.b, `":`...)
}

func (o *objWriter) str(k, v string) {
	if v == "" {
		return
	}
	o.key(k)
	o.b = appendString(o.b, v)
}

func (o *objWriter) int(k string, v int64) {
	if v == 0 {
		return
	}
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does; <, > and & are escaped so the output is safe to
// embed in HTML, also as encoding/json does.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
