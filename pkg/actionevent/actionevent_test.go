package actionevent

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
)

func readSamples(t testing.TB) [][]byte {
	t.Helper()
	data, err := os.ReadFile("testdata/ocsf-samples.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	if len(out) != 6 {
		t.Fatalf("want 6 sample lines, have %d", len(out))
	}
	return out
}

func TestFromOCSFClasses(t *testing.T) {
	s := readSamples(t)
	const agent = "agent-7"
	cases := []struct {
		line int
		want Record
	}{
		{0, Record{
			Time: time.UnixMilli(1767225600123).UTC(), Category: CategoryHTTP, Action: ActionDeny, Severity: "medium",
			SandboxID: "sbx-agent-7f3a",
			Actor:     Actor{PID: 4242, Process: "curl", Binary: "/usr/bin/curl", BinarySHA256: "6f1b7c5e1e0a3d4f2b9c8a7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f"},
			Target:    Target{Host: "evil.example", Port: 443, Method: "POST", Path: "/upload"},
			Policy:    Policy{Name: "mac-hermes-policy", Checksum: "sha256:9b74c9897bac770ffc029102a200c5de9b74c9897bac770ffc029102a200c5de", Rule: "default-deny"},
			Reason:    "no network_policies entry allows POST https://evil.example/upload",
			Source:    Source{ClassUID: 4002, ClassName: "HTTP Activity", ActivityID: 6, ActivityName: "Post"},
		}},
		{1, Record{
			Time: time.UnixMilli(1767225601000).UTC(), Category: CategoryNetwork, Action: ActionAllow, Severity: "informational",
			SandboxID: "sbx-agent-7f3a",
			Actor:     Actor{PID: 777, Process: "git-remote-https", Binary: "/usr/lib/git-core/git-remote-https"},
			Target:    Target{Host: "github.com", Port: 443},
			Policy:    Policy{Rule: "github", Checksum: "9b74c9897bac770ffc029102a200c5de9b74c9897bac770ffc029102a200c5de"},
			Reason:    "CONNECT github.com:443 allowed by network_policies.github",
			Source:    Source{ClassUID: 4001, ClassName: "Network Activity", ActivityID: 1, ActivityName: "Open"},
		}},
		{2, Record{
			Time: time.UnixMilli(1767225602000).UTC(), Category: CategoryProcess, Action: ActionAudit, Severity: "informational",
			SandboxID: "sbx-agent-7f3a",
			Actor:     Actor{PID: 31337, Process: "python3", Binary: "/usr/bin/python3.12", BinarySHA256: strings.Repeat("a", 64)},
			Source:    Source{ClassUID: 1007, ClassName: "Process Activity", ActivityID: 1, ActivityName: "Launch"},
		}},
		{3, Record{
			Time: time.UnixMilli(1767225603000).UTC(), Category: CategoryDetection, Action: ActionDeny, Severity: "high",
			SandboxID: "sbx-agent-7f3a",
			Actor:     Actor{PID: 999, Process: "ping", Binary: "/usr/bin/ping"},
			Reason:    "raw socket attempt blocked by seccomp",
			Source:    Source{ClassUID: 2004, ClassName: "Detection Finding", ActivityID: 1, ActivityName: "Create"},
		}},
		{4, Record{
			Time: time.UnixMilli(1767225604000).UTC(), Category: CategoryPolicy, Action: ActionAudit, Severity: "informational",
			SandboxID: "sbx-agent-7f3a",
			Policy:    Policy{Name: "mac-hermes-policy", Checksum: "sha256:" + strings.Repeat("1", 64)},
			Reason:    "network policy reloaded",
			Source:    Source{ClassUID: 5019, ClassName: "Device Config State Change", ActivityID: 1, ActivityName: "Log"},
		}},
		{5, Record{ // generic fallback: another class
			Time: time.UnixMilli(1767225605000).UTC(), Category: CategoryApplication, Action: ActionAudit, Severity: "informational",
			SandboxID: "sbx-agent-7f3a",
			Actor:     Actor{PID: 55, Process: "node"},
			Target:    Target{Host: "registry.npmjs.org", Port: 8443, Method: "GET", Path: "/left-pad"},
			Source:    Source{ClassUID: 6003, ClassName: "API Activity", ActivityID: 2, ActivityName: "Read"},
		}},
	}
	for _, c := range cases {
		got, err := FromOCSF(s[c.line], agent)
		if err != nil {
			t.Fatalf("line %d: %v", c.line, err)
		}
		want := c.want
		want.Schema, want.Layer, want.AgentID = Schema, Layer, agent
		want.EventID = ID(agent, s[c.line])
		if !reflect.DeepEqual(got, want) {
			t.Errorf("line %d:\n got  %+v\n want %+v", c.line, got, want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("line %d: record fails validation: %v", c.line, err)
		}
	}
}

func TestFromOCSFNeverCopiesSecrets(t *testing.T) {
	for i, line := range readSamples(t) {
		r, err := FromOCSF(line, "a")
		if err != nil {
			t.Fatal(err)
		}
		out := string(r.AppendJSON(nil))
		for _, secret := range []string{"token=abc", "SECRET", "pw@", "user:", "/etc/shadow", "x=1", "frag", "Authorization"} {
			if strings.Contains(out, secret) {
				t.Errorf("line %d: record carries %q: %s", i, secret, out)
			}
		}
	}
}

func TestUnknownClassFallback(t *testing.T) {
	line := []byte(`{"class_uid":3002,"class_name":"Authentication","activity_id":1,"activity_name":"Logon","time":1700000000000,"severity_id":2,"disposition_id":25,"dst_endpoint":{"ip":"2001:db8::1","port":22},"metadata":{"uid":"sbx-1"}}`)
	r, err := FromOCSF(line, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Category != CategoryOther || r.Source.ClassName != "Authentication" || r.Source.ActivityName != "Logon" ||
		r.Action != ActionDeny || r.Severity != "low" || r.Target.Host != "2001:db8::1" || r.Target.Port != 22 || r.SandboxID != "sbx-1" {
		t.Errorf("fallback mapping wrong: %+v", r)
	}
	if r.AgentID != "" {
		t.Errorf("agent_id %q, want empty", r.AgentID)
	}
}

func TestActionMapping(t *testing.T) {
	cases := []struct {
		attrs string
		want  string
	}{
		{`"action_id":1`, ActionAllow},
		{`"action_id":2`, ActionDeny},
		{`"action_id":3`, ActionAudit},
		{`"action_id":4`, ActionAudit},
		{`"disposition_id":1`, ActionAllow},
		{`"disposition_id":6`, ActionDeny},
		{`"disposition_id":15`, ActionAudit},
		{`"action":"Denied"`, ActionDeny},
		{`"activity_id":5`, ActionDeny}, // Network Activity: Refuse
		{`"activity_id":1`, ActionAudit},
		{`"action_id":0,"disposition_id":0`, ActionAudit},
	}
	for _, c := range cases {
		line := `{"class_uid":4001,"time":1,` + c.attrs + `}`
		r, err := FromOCSF([]byte(line), "a")
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if r.Action != c.want {
			t.Errorf("%s: action %q, want %q", c.attrs, r.Action, c.want)
		}
	}
}

func TestFromOCSFErrors(t *testing.T) {
	cases := []struct {
		line  string
		field string
	}{
		{`not json`, ""},
		{`[1,2]`, ""},
		{`{"class_uid":4001,`, ""},
		{`{"time":1700000000000}`, "class_uid"},
		{`{"class_uid":4001}`, "time"},
		{`{"class_uid":4001,"time":-5}`, "time"},
		{`{"class_uid":4001,"time_dt":"yesterday"}`, "time_dt"},
		{`{"class_uid":"4001","time":1}`, "class_uid"},
		{`{"class_uid":4001,"time":1,"dst_endpoint":{"port":"443"}}`, "dst_endpoint.port"},
	}
	for _, c := range cases {
		_, err := FromOCSF([]byte(c.line), "a")
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Errorf("%s: error %v, want *FormatError", c.line, err)
			continue
		}
		if fe.Field != c.field {
			t.Errorf("%s: field %q, want %q (%v)", c.line, fe.Field, c.field, err)
		}
	}
	if _, err := FromOCSF([]byte(" \r\n"), "a"); !errors.Is(err, ErrEmpty) {
		t.Errorf("blank line: %v, want ErrEmpty", err)
	}
}

func TestEventIDDeterministic(t *testing.T) {
	s := readSamples(t)
	a, _ := FromOCSF(s[0], "agent-1")
	b, _ := FromOCSF(append(append([]byte(nil), s[0]...), '\r', '\n'), "agent-1")
	if a.EventID != b.EventID {
		t.Errorf("same line, different ids: %s %s", a.EventID, b.EventID)
	}
	c, _ := FromOCSF(s[0], "agent-2")
	if c.EventID == a.EventID {
		t.Errorf("different agents share id %s", a.EventID)
	}
	// Lines that differ in one byte get different ids; ids of many
	// distinct lines never collide.
	seen := map[string]bool{}
	for i := 0; i < 20000; i++ {
		line := []byte(`{"class_uid":4001,"time":` + strconv.Itoa(1700000000000+i) + `}`)
		id := ID("a", line)
		if !ValidEventID(id) {
			t.Fatalf("bad id %q", id)
		}
		if seen[id] {
			t.Fatalf("collision at %d", i)
		}
		seen[id] = true
	}
	if ID("a", []byte("x")) != ID("a", []byte(" x\n")) {
		t.Error("surrounding whitespace changes the id")
	}
}

// The documented derivation, computed independently.
func TestEventIDDerivation(t *testing.T) {
	line := []byte(`{"class_uid":4001,"time":1}`)
	h := sha256Hex([]byte("mac.action_event.v1\nagent-1\n" + string(line)))
	if got := ID("agent-1", line); got != h[:32] {
		t.Errorf("ID = %s, want %s", got, h[:32])
	}
}

func TestAppendJSONRoundTrip(t *testing.T) {
	for i, line := range readSamples(t) {
		r, err := FromOCSF(line, "agent-\"quoted\"\u2028<x>")
		if err != nil {
			t.Fatal(err)
		}
		r.Reason = "tab\tnew\nline \x01 \xff bad utf8 & <html> \u2029 é"
		b := r.AppendJSON(nil)
		if !json.Valid(b) {
			t.Fatalf("line %d: invalid JSON %s", i, b)
		}
		var back Record
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		want := r
		want.Reason = strings.ToValidUTF8(r.Reason, "\ufffd")
		if !reflect.DeepEqual(back, want) {
			t.Errorf("line %d: round trip:\n got  %+v\n want %+v", i, back, want)
		}
		// encoding/json validates, compacts and HTML-escapes a Marshaler's
		// output: none of that may change the bytes.
		std, _ := json.Marshal(r)
		if !bytes.Equal(std, b) {
			t.Errorf("MarshalJSON differs from AppendJSON")
		}
	}
}

func TestValidate(t *testing.T) {
	good, err := FromOCSF(readSamples(t)[0], "a")
	if err != nil {
		t.Fatal(err)
	}
	mut := []struct {
		field string
		f     func(r *Record)
	}{
		{"schema", func(r *Record) { r.Schema = "x" }},
		{"event_id", func(r *Record) { r.EventID = "ABC" }},
		{"time", func(r *Record) { r.Time = time.Time{} }},
		{"layer", func(r *Record) { r.Layer = "host" }},
		{"category", func(r *Record) { r.Category = "misc" }},
		{"action", func(r *Record) { r.Action = "block" }},
		{"severity", func(r *Record) { r.Severity = "meh" }},
		{"actor.binary_sha256", func(r *Record) { r.Actor.BinarySHA256 = "xyz" }},
		{"target.port", func(r *Record) { r.Target.Port = 70000 }},
		{"target.path", func(r *Record) { r.Target.Path = "/a?b=c" }},
		{"target.host", func(r *Record) { r.Target.Host = "u@h" }},
	}
	for _, m := range mut {
		r := good
		m.f(&r)
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), m.field+":") {
			t.Errorf("%s mutation: error %v, want one naming the field", m.field, err)
		}
	}
}

func TestScrubText(t *testing.T) {
	cases := map[string]string{
		"plain text": "plain text",
		"see https://u:p@h.example:8443/a/b?c=d#e now":   "see https://h.example:8443/a/b now",
		`url="http://h/x?tok=1" and GET /p?q=secret ok?`: `url="http://h/x" and GET /p ok?`,
		"a@b.example is not a URL":                       "a@b.example is not a URL",
		"ftp://x@y@z/p":                                  "ftp://z/p",
	}
	for in, want := range cases {
		if got := ScrubText(in); got != want {
			t.Errorf("ScrubText(%q) = %q, want %q", in, got, want)
		}
	}
}

// The class and activity tables match the OCSF 1.8.0 definitions shipped
// in testdata/ocsf at the module root.
func TestClassTablesMatchOCSFSchema(t *testing.T) {
	dir := ocsfDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "classes", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no OCSF class files in %s", dir)
	}
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var def struct {
			UID        int    `json:"uid"`
			Caption    string `json:"caption"`
			Attributes map[string]struct {
				Enum map[string]struct {
					Caption string `json:"caption"`
				} `json:"enum"`
			} `json:"attributes"`
		}
		if err := json.Unmarshal(data, &def); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		info, ok := classes[def.UID]
		if !ok {
			t.Errorf("class %d (%s) has no table entry", def.UID, def.Caption)
			continue
		}
		if info.name != def.Caption {
			t.Errorf("class %d: name %q, schema says %q", def.UID, info.name, def.Caption)
		}
		enum := def.Attributes["activity_id"].Enum
		if len(enum) != len(info.activities) {
			t.Errorf("class %d: %d activities, schema has %d", def.UID, len(info.activities), len(enum))
		}
		for k, v := range enum {
			id, _ := strconv.Atoi(k)
			if info.activities[id] != v.Caption {
				t.Errorf("class %d activity %d: %q, schema says %q", def.UID, id, info.activities[id], v.Caption)
			}
		}
		checked++
	}
	for _, uid := range []int{4001, 4002, 1007, 2004, 5019} {
		if _, ok := classes[uid]; !ok {
			t.Errorf("required class %d missing", uid)
		}
	}
	if checked < 5 {
		t.Errorf("checked only %d classes", checked)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func ocsfDir(t testing.TB) string {
	t.Helper()
	dir, err := ocsftest.FindDir()
	if err != nil {
		t.Fatalf("OCSF 1.8.0 definitions: %v", err)
	}
	return dir
}

func FuzzFromOCSF(f *testing.F) {
	for _, l := range readSamples(f) {
		f.Add(l)
	}
	f.Add([]byte(`{"class_uid":4002,"time":1,"http_request":{"url":{"url_string":"http://a:b@c/d?e"}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := FromOCSF(line, "fuzz")
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) && !errors.Is(err, ErrEmpty) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("record from %q invalid: %v", line, err)
		}
		b := r.AppendJSON(nil)
		if !json.Valid(b) {
			t.Fatalf("invalid JSON %s", b)
		}
		if r.EventID != ID("fuzz", line) {
			t.Fatal("event id not derived from the line")
		}
	})
}

func BenchmarkFromOCSF(b *testing.B) {
	line := readSamples(b)[0]
	b.SetBytes(int64(len(line)))
	buf := make([]byte, 0, 1024)
	for b.Loop() {
		r, err := FromOCSF(line, "agent-1")
		if err != nil {
			b.Fatal(err)
		}
		buf = r.AppendJSON(buf[:0])
	}
}

func TestParseRoundTrip(t *testing.T) {
	for i, line := range readSamples(t) {
		r, err := FromOCSF(line, "agent-1")
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(r.AppendJSON(nil))
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Errorf("line %d: Parse(AppendJSON(r)) != r:\n got  %+v\n want %+v", i, back, r)
		}
		type plain Record // no MarshalJSON: plain encoding/json output
		std, _ := json.Marshal(plain(r))
		if _, err := Parse(std); err != nil {
			t.Errorf("line %d: Parse refuses encoding/json output: %v", i, err)
		}
	}
}

func TestParseStrict(t *testing.T) {
	good, _ := FromOCSF(readSamples(t)[1], "agent-1")
	base := string(good.AppendJSON(nil))
	cases := []struct {
		body  string
		field string
	}{
		{strings.Replace(base, `"layer"`, `"lair"`, 1), "lair"},
		{strings.Replace(base, `"port":443`, `"port":"443"`, 1), "target.port"},
		{strings.Replace(base, `"actor":{`, `"actor":{"uid":1,`, 1), "actor.uid"},
		{strings.Replace(base, `"time":"`, `"time":"x`, 1), "time"},
		{strings.Replace(base, `"actor":{`, `"actor":null,"x":{`, 1), "actor"},
		{base + "{}", ""},
		{base[:len(base)-1], ""},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.body))
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Parse(%s): error %v, want one for field %q", c.body, err, c.field)
		}
	}
}

func TestSplitBatch(t *testing.T) {
	got, err := SplitBatch([]byte(` {"events": [ {"a":1} , {"b":[2,"]"]},{} ] } `))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"a":1}`, `{"b":[2,"]"]}`, `{}`}
	if len(got) != len(want) {
		t.Fatalf("got %d elements, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("element %d = %s, want %s", i, got[i], want[i])
		}
	}
	for _, bad := range []string{`{}`, `{"events":{}}`, `{"events":[1,]}`, `{"events":[],"more":1}`, `[]`, `{"events":[{"a":1}]`} {
		if _, err := SplitBatch([]byte(bad)); err == nil {
			t.Errorf("SplitBatch(%s) accepted", bad)
		}
	}
}

// The decoder agrees with encoding/json on what is valid JSON: a line is
// refused as malformed (a syntax error, not a type error) exactly when
// json.Valid says it is not JSON.
func FuzzDecoderValidity(f *testing.F) {
	for _, l := range readSamples(f) {
		f.Add(l)
	}
	for _, s := range []string{`{"a":"\ud83d\ude00"}`, `{"a":1e5}`, `{"a":-0.5}`, `{"a":[]}`, `{"a":"\u00"}`, `{"a":01}`, `{"a":tru}`, "{\"a\":\"\x01\"}",
		`{"a":1,"a":2}`, "{\"a\":\"\xff\"}", `[1,2`, `{"class_uid":"x",`, `{"time":[1,}`, `1 2`, `{} {}`, ` {} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev ocsfEvent
		err := decodeOCSF(b, &ev)
		var syn *jsontext.SyntacticError
		if malformed := errors.As(err, &syn); malformed == json.Valid(b) {
			t.Fatalf("decoder says %v, encoding/json says valid=%v for %q", err, json.Valid(b), b)
		}
	})
}

// BenchmarkFromOCSFProducerLine maps the producer's own HTTP Activity
// example (docs/events.md), the common case in the collector.
func BenchmarkFromOCSFProducerLine(b *testing.B) {
	doc, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		b.Fatal(err)
	}
	m := ocsfExample.FindSubmatch(doc[bytes.Index(doc, []byte("<!-- ocsf-example: http-allowed")):])
	if m == nil {
		b.Fatal("no http-allowed example")
	}
	var line bytes.Buffer
	json.Compact(&line, m[2])
	b.SetBytes(int64(line.Len()))
	buf := make([]byte, 0, 1024)
	for b.Loop() {
		r, err := FromOCSF(line.Bytes(), "agent-1")
		if err != nil {
			b.Fatal(err)
		}
		buf = r.AppendJSON(buf[:0])
	}
}

// Parse never panics, and what it accepts survives a round trip.
func FuzzParse(f *testing.F) {
	for _, l := range readSamples(f) {
		r, _ := FromOCSF(l, "a")
		f.Add(r.AppendJSON(nil))
	}
	f.Add([]byte(`{"schema":"x","actor":{},"target":{"port":1e3}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		back, err := Parse(r.AppendJSON(nil))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", r.AppendJSON(nil), err)
		}
		if !reflect.DeepEqual(back, r) && !r.Time.IsZero() {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", r, back)
		}
	})
}

// A refused file access (File System Activity 1001) maps to category
// file with the path as target.path; a path with URL delimiters is
// escaped, never cut, so the record stays valid.
func TestFileDenialMapping(t *testing.T) {
	line := []byte(`{"class_uid":1001,"activity_id":2,"time":1767225600123,"severity_id":3,"action_id":2,"disposition_id":2,` +
		`"status_detail":"fs.read_file","metadata":{"version":"1.8.0","uid":"sbx-1","product":{"name":"Palisade"}},` +
		`"file":{"name":"a?b#c%d","path":"/etc/a?b#c%d","type_id":1},` +
		`"actor":{"process":{"pid":42,"name":"cat","sandbox":"sbx-1","file":{"name":"cat","path":"/usr/bin/cat","type_id":8}}},` +
		`"policy":{"uid":"sha256:` + strings.Repeat("ab", 32) + `"}}`)
	r, err := FromOCSF(line, "agent-7")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("record invalid: %v", err)
	}
	if r.Category != CategoryFile || r.Action != ActionDeny || r.Target.Path != "/etc/a%3Fb%23c%25d" ||
		r.Actor.PID != 42 || r.Actor.Binary != "/usr/bin/cat" || r.Reason != "fs.read_file" ||
		r.Source.ActivityName != "Read" || r.SandboxID != "sbx-1" {
		t.Fatalf("record %+v", r)
	}
}
