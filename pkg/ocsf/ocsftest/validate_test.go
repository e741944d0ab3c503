package ocsftest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
)

// Hand-written valid events, independent of package ocsf, so these tests
// prove the validator rather than the constructors.
const networkEvent = `{
  "activity_id": 1, "activity_name": "Open",
  "category_uid": 4, "category_name": "Network Activity",
  "class_uid": 4001, "class_name": "Network Activity",
  "type_uid": 400101, "type_name": "Network Activity: Open",
  "time": 1767225600123,
  "severity_id": 3, "severity": "Medium",
  "status_id": 2, "status": "Failure", "status_code": "policy_denied",
  "status_detail": "no policy allows example.org:443",
  "metadata": {
    "version": "1.8.0", "uid": "sbx-1",
    "product": {"name": "Palisade", "vendor_name": "Palisade"},
    "profiles": ["host", "security_control"]
  },
  "device": {"type_id": 99, "type": "Sandbox", "hostname": "sbx-1",
             "os": {"name": "Linux", "type_id": 200, "type": "Linux"}},
  "action_id": 2, "action": "Denied",
  "disposition_id": 2, "disposition": "Blocked",
  "firewall_rule": {"name": "default-deny", "uid": "default"},
  "actor": {"process": {
    "pid": 77, "name": "python3",
    "file": {"name": "python3", "path": "/usr/bin/python3", "type_id": 8,
             "hashes": [{"algorithm_id": 3, "value": "abcdef0123"}]},
    "user": {"uid": "10001", "name": "sandbox"},
    "parent_process": {"pid": 70, "name": "bash"}
  }},
  "src_endpoint": {"ip": "10.200.0.2", "port": 40000},
  "dst_endpoint": {"hostname": "example.org", "ip": "2001:db8::7", "port": 443},
  "connection_info": {"direction_id": 2, "protocol_name": "tcp", "protocol_ver_id": 6}
}`

const processEvent = `{
  "activity_id": 2, "category_uid": 1, "class_uid": 1007,
  "type_uid": 100702, "time": 1767225600999, "severity_id": 1,
  "exit_code": 0,
  "metadata": {"version": "1.8.0", "product": {"name": "Palisade"}},
  "device": {"type_id": 99, "type": "Sandbox", "name": "sbx-1"},
  "actor": {"process": {"pid": 1, "name": "sandbox-init"}},
  "process": {"pid": 2, "name": "sh", "cmd_line": "sh -c true"}
}`

const httpEvent = `{
  "activity_id": 3, "category_uid": 4, "class_uid": 4002, "type_uid": 400203,
  "time": 1767225600999, "severity_id": 1,
  "metadata": {"version": "1.8.0", "product": {"name": "Palisade"}},
  "http_request": {"http_method": "GET",
                   "url": {"scheme": "http", "hostname": "example.org", "port": 80, "path": "/x"}},
  "http_response": {"code": 200}
}`

func schema(t *testing.T) *ocsftest.Schema {
	t.Helper()
	return ocsftest.RequireSchema(t)
}

func TestSchemaLoads(t *testing.T) {
	s := schema(t)
	for _, uid := range []int{1007, 2004, 4001, 4002, 5019} {
		if s.Classes[uid] == nil {
			t.Errorf("class %d not loaded", uid)
		}
	}
	for _, name := range []string{"metadata", "device", "process", "network_endpoint", "os", "file", "fingerprint", "policy", "user", "network_connection_info"} {
		if s.Objects[name] == nil {
			t.Errorf("object %s not available", name)
		}
	}
	// The supplement only fills gaps: objects the shared export has are
	// never replaced.
	for _, name := range s.Supplemented {
		if s.Objects[name].Supplement == "" {
			t.Errorf("%s listed as supplemented but not from the supplement", name)
		}
	}
	if s.Objects["process"].Supplement != "" || s.Objects["device"].Supplement != "" {
		t.Error("a shared object was replaced by the supplement")
	}
	if !s.Profiles["security_control"] || !s.Profiles["host"] || !s.Profiles["ai_operation"] {
		t.Errorf("profiles not loaded: %v", s.Profiles)
	}
}

func TestValidEventsPass(t *testing.T) {
	s := schema(t)
	for name, ev := range map[string]string{"network": networkEvent, "process": processEvent, "http": httpEvent} {
		if errs := s.Validate([]byte(ev)); len(errs) != 0 {
			t.Errorf("%s: valid event rejected: %v", name, errs)
		}
	}
}

// mutate decodes ev, applies fn to the generic object and re-encodes it.
func mutate(t *testing.T, ev string, fn func(m map[string]any)) []byte {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(ev))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// at walks a dotted path ("actor.process.file") to the parent object of
// its last element and returns it with the last key.
func at(m map[string]any, path string) (map[string]any, string) {
	parts := strings.Split(path, ".")
	cur := m
	for _, p := range parts[:len(parts)-1] {
		if i := strings.IndexByte(p, '['); i >= 0 {
			n, _ := strconv.Atoi(strings.TrimSuffix(p[i+1:], "]"))
			cur = cur[p[:i]].([]any)[n].(map[string]any)
			continue
		}
		cur = cur[p].(map[string]any)
	}
	return cur, parts[len(parts)-1]
}

func set(path string, v any) func(map[string]any) {
	return func(m map[string]any) {
		o, k := at(m, path)
		o[k] = v
	}
}

func del(path string) func(map[string]any) {
	return func(m map[string]any) {
		o, k := at(m, path)
		delete(o, k)
	}
}

func num(s string) json.Number { return json.Number(s) }

// TestBrokenEventsRejected proves the validator: each deliberately broken
// event must be rejected with an error at the broken attribute.
func TestBrokenEventsRejected(t *testing.T) {
	s := schema(t)
	cases := []struct {
		name, base string
		fn         func(map[string]any)
		path, msg  string
	}{
		{"unknown attribute", networkEvent, set("bogus", "x"), "bogus", "unknown attribute"},
		{"unknown nested attribute", networkEvent, set("actor.process.bogus", 1), "actor.process.bogus", "unknown attribute"},
		{"attribute of another class", networkEvent, set("exit_code", num("0")), "exit_code", "unknown attribute"},
		{"unknown attribute in supplement object", networkEvent, set("actor.process.file.bogus", 1), "actor.process.file.bogus", "unknown attribute"},
		{"time as string", networkEvent, set("time", "1767225600123"), "time", "wrong type"},
		{"time as float", networkEvent, set("time", num("1767225600123.5")), "time", "wrong type"},
		{"time in seconds", networkEvent, set("time", num("1767225600")), "time", "not epoch milliseconds"},
		{"integer as string", networkEvent, set("severity_id", "3"), "severity_id", "wrong type"},
		{"integer as float", processEvent, set("exit_code", num("1.0")), "exit_code", "wrong type"},
		{"boolean as string", networkEvent, set("actor.process.file.is_readonly", "true"), "actor.process.file.is_readonly", "wrong type"},
		{"object as array", networkEvent, set("device", []any{}), "device", "wrong type"},
		{"object as string", networkEvent, set("src_endpoint", "10.0.0.1"), "src_endpoint", "wrong type"},
		{"array as scalar", networkEvent, set("metadata.profiles", "host"), "metadata.profiles", "expected array"},
		{"scalar as array", networkEvent, set("message", []any{"a"}), "message", "got array"},
		{"null value", networkEvent, set("message", nil), "message", "null"},
		{"port out of range", networkEvent, set("dst_endpoint.port", num("70000")), "dst_endpoint.port", "out of range"},
		{"invalid ip", networkEvent, set("dst_endpoint.ip", "999.1.1.1"), "dst_endpoint.ip", "not an IP"},
		{"missing required", networkEvent, del("severity_id"), "severity_id", "required attribute missing"},
		{"missing required metadata.product", networkEvent, del("metadata.product"), "metadata.product", "required attribute missing"},
		{"missing required class object", processEvent, del("process"), "process", "required attribute missing"},
		{"missing nested required", networkEvent, del("device.type_id"), "device.type_id", "required attribute missing"},
		{"missing required in supplement object", networkEvent, del("actor.process.file.name"), "actor.process.file.name", "required attribute missing"},
		{"missing required deep", networkEvent, del("actor.process.file.hashes[0].value"), "actor.process.file.hashes[0].value", "required attribute missing"},
		{"bad activity enum", networkEvent, set("activity_id", num("42")), "activity_id", "not defined for enum"},
		{"bad severity enum", networkEvent, set("severity_id", num("8")), "severity_id", "not defined for enum"},
		{"bad nested enum", networkEvent, set("device.type_id", num("1000")), "device.type_id", "not defined for enum"},
		{"bad supplement enum", networkEvent, set("device.os.type_id", num("5")), "device.os.type_id", "not defined for enum"},
		{"bad string enum", httpEvent, set("http_request.http_method", "FETCH"), "http_request.http_method", "not defined for enum"},
		{"sibling mismatch", networkEvent, set("activity_name", "Close"), "activity_name", "does not match the caption"},
		{"nested sibling mismatch", networkEvent, set("device.os.type", "Windows"), "device.os.type", "does not match the caption"},
		{"Other labelled Other", networkEvent, set("device.type", "Other"), "device.type", "source value"},
		{"bad type_uid", networkEvent, set("type_uid", num("400102")), "type_uid", "class_uid*100+activity_id"},
		{"wrong version", networkEvent, set("metadata.version", "1.7.0"), "metadata.version", "1.8.0"},
		{"unknown class", networkEvent, set("class_uid", num("9999")), "class_uid", "unknown class"},
		{"class_uid missing", networkEvent, del("class_uid"), "class_uid", "required attribute missing"},
		{"profile attribute without profile", networkEvent, set("metadata.profiles", []any{"host"}), "action_id", "profile security_control"},
		{"unknown profile", networkEvent, set("metadata.profiles", []any{"host", "security_control", "nope"}), "metadata.profiles[2]", "unknown profile"},
		{"at_least_one on class", networkEvent, func(m map[string]any) { delete(m, "src_endpoint"); delete(m, "dst_endpoint") }, "(event)", "at_least_one"},
		{"at_least_one on http class", httpEvent, func(m map[string]any) { delete(m, "http_request"); delete(m, "http_response") }, "(event)", "at_least_one"},
		{"at_least_one on object", networkEvent, set("actor", map[string]any{}), "actor", "at_least_one"},
		{"at_least_one process ids", processEvent, del("process.pid"), "process", "at_least_one"},
		{"object without definition", networkEvent, set("actor.process.session", map[string]any{"uid": "x"}), "actor.process.session", "no definition"},
		{"deprecated attribute", httpEvent, set("http_status", num("200")), "http_status", "deprecated"},
		{"array element wrong type", networkEvent, set("actor.process.file.hashes", []any{"abc"}), "actor.process.file.hashes[0]", "wrong type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			line := mutate(t, c.base, c.fn)
			errs := s.Validate(line)
			if len(errs) == 0 {
				t.Fatalf("broken event accepted: %s", line)
			}
			for _, err := range errs {
				var ve *ocsftest.Error
				if e, ok := err.(*ocsftest.Error); ok {
					ve = e
				}
				if ve != nil && ve.Path == c.path && strings.Contains(ve.Msg, c.msg) {
					return
				}
			}
			t.Fatalf("no error at %s mentioning %q; got %v", c.path, c.msg, errs)
		})
	}
}

func TestMalformedJSONRejected(t *testing.T) {
	s := schema(t)
	cases := map[string]string{
		"duplicate key":   strings.Replace(processEvent, `"exit_code": 0,`, `"exit_code": 0, "exit_code": 1,`, 1),
		"trailing data":   processEvent + ` {}`,
		"not an object":   `[1,2]`,
		"invalid json":    `{"class_uid": 1007,`,
		"empty":           ``,
		"class_uid float": strings.Replace(processEvent, `"class_uid": 1007`, `"class_uid": 1007.0`, 1),
	}
	for name, line := range cases {
		if errs := s.Validate([]byte(line)); len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
}

// fakeTB records Errorf calls so the helpers' reporting can be tested.
type fakeTB struct {
	testing.TB
	errors  []string
	skipped string
	fatal   string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, a ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, a...))
}

// Skip and Fatalf end the call like the real ones do (runtime.Goexit
// there); call through fakeTB.run to catch it.
func (f *fakeTB) Skip(a ...any) {
	f.skipped = fmt.Sprint(a...)
	panic(stopped{})
}
func (f *fakeTB) Fatalf(format string, a ...any) {
	f.fatal = fmt.Sprintf(format, a...)
	panic(stopped{})
}

type stopped struct{}

// run calls fn and absorbs the stop of Skip or Fatalf.
func (f *fakeTB) run(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); !ok {
				panic(r)
			}
		}
	}()
	fn()
}

func TestHelpersReport(t *testing.T) {
	schema(t)
	good := []byte(strings.Join(strings.Fields(processEvent), " "))
	bad := mutate(t, processEvent, set("severity_id", num("8")))

	f := &fakeTB{TB: t}
	ocsftest.Validate(f, good)
	if len(f.errors) != 0 {
		t.Fatalf("Validate reported a valid event: %v", f.errors)
	}
	ocsftest.Validate(f, bad)
	if len(f.errors) == 0 || !strings.Contains(strings.Join(f.errors, "\n"), "severity_id") {
		t.Fatalf("Validate did not report the broken event: %v", f.errors)
	}

	f = &fakeTB{TB: t}
	stream := append(append(append([]byte{}, good...), '\n'), append(bad, '\n')...)
	if n := ocsftest.ValidateLines(f, stream); n != 2 {
		t.Fatalf("ValidateLines counted %d events, want 2", n)
	}
	if len(f.errors) == 0 {
		t.Fatal("ValidateLines did not report the broken line")
	}
	f = &fakeTB{TB: t}
	ocsftest.ValidateLines(f, good)
	if len(f.errors) == 0 || !strings.Contains(f.errors[0], "newline") {
		t.Fatalf("ValidateLines accepted a stream without a final newline: %v", f.errors)
	}
	if errs := ocsftest.ValidateJSON(bad); len(errs) == 0 {
		t.Fatal("ValidateJSON accepted a broken event")
	}
	if errs := ocsftest.ValidateJSON(good); len(errs) != 0 {
		t.Fatalf("ValidateJSON rejected a valid event: %v", errs)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ocsftest.Load(dir); err == nil {
		t.Fatal("Load accepted a directory without classes")
	}
	t.Setenv(ocsftest.DirEnv, dir)
	if _, err := ocsftest.FindDir(); err == nil || !strings.Contains(err.Error(), ocsftest.DirEnv) {
		t.Fatalf("FindDir with a wrong %s: %v", ocsftest.DirEnv, err)
	}
	real := schema(t).Dir
	t.Setenv(ocsftest.DirEnv, real)
	if d, err := ocsftest.FindDir(); err != nil || d != real {
		t.Fatalf("FindDir(%s) = %q, %v", real, d, err)
	}
	// The parent of v1.8.0 is accepted too.
	t.Setenv(ocsftest.DirEnv, real+"/..")
	if d, err := ocsftest.FindDir(); err != nil || !bytes.HasSuffix([]byte(d), []byte("v1.8.0")) {
		t.Fatalf("FindDir(parent) = %q, %v", d, err)
	}
}

// FuzzValidate: the validator never panics on arbitrary input, and an
// input it accepts is a JSON object with a known class.
func FuzzValidate(f *testing.F) {
	for _, ev := range []string{networkEvent, processEvent, httpEvent, `{}`, `[]`, `{"class_uid":4001}`, `{"a":{"a":{"a":1}}}`} {
		f.Add([]byte(ev))
	}
	s := ocsftest.RequireSchema(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		errs := s.Validate(line)
		if len(errs) > 0 {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("accepted invalid JSON %q: %v", line, err)
		}
		uid, ok := m["class_uid"].(float64)
		if !ok || s.Classes[int(uid)] == nil {
			t.Fatalf("accepted an event without a known class: %q", line)
		}
	})
}
